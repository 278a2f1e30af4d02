"""The application-command half of the fake Discord: registered commands and interactions.

``AppCommands`` serves ``applications/{id}/commands`` (GET the registered list, PUT to
overwrite it, as ``CommandTree.sync`` does; ``refuse`` answers both with a Discord error
instead) and ``interactions/{id}/{token}/callback`` (an interaction's answer, recorded in
``answers``; a second answer to one interaction is refused with 40060, as Discord does) and
``webhooks/{app}/{token}`` (a follow-up message through an interaction's token, recorded in
``followups``).
``interaction(...)`` builds an INTERACTION_CREATE payload for a slash command used in a
guild channel, a thread of it or a DM; ``component_interaction(...)`` one for a press of a
button of a bot's message (type 3, MESSAGE_COMPONENT, with the message as Discord sends it).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from aiohttp import web

TIMESTAMP = "2026-01-01T00:00:00.000000+00:00"


def json_response(
    data: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """JSON with ``Content-Type: application/json`` exactly: discord.py compares the whole
    header (aiohttp's ``json_response`` adds a charset, which discord.py takes for text)."""
    return web.Response(
        status=status,
        body=json.dumps(data).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )


class AppCommands:
    """The application's commands and the interactions' answers."""

    def __init__(self, app_id: int) -> None:
        self.app_id = app_id
        self.registered: list[dict[str, Any]] = []
        self.overwrites: list[list[dict[str, Any]]] = []
        """Each PUT's body, in order."""
        self.answers: dict[str, dict[str, Any]] = {}
        """Each interaction's answer (the callback's body), by interaction id."""
        self.followups: list[dict[str, Any]] = []
        """Follow-up messages posted through interaction tokens (the bodies), in order."""
        self.refuse: tuple[int, int, str] | None = None
        """(status, code, message) answering every command list call instead."""
        self._ids = itertools.count(1700000000000000001)

    def handle(self, method: str, parts: list[str], body: Any) -> web.Response | None:
        """The answer to a REST call this half serves, or None for any other."""
        if len(parts) == 3 and parts[0] == "applications" and parts[2] == "commands":
            if self.refuse is not None:
                status, code, message = self.refuse
                return json_response({"message": message, "code": code}, status)
            if method == "PUT":
                self.overwrites.append(list(body or []))
                self.registered = [self._stored(command) for command in body or []]
            return json_response(self.registered)
        if len(parts) == 4 and parts[0] == "interactions" and parts[3] == "callback":
            if parts[1] in self.answers:
                refusal = {"message": "Interaction has already been acknowledged.", "code": 40060}
                return json_response(refusal, 400)
            self.answers[parts[1]] = body or {}
            ephemeral = bool((body or {}).get("data", {}).get("flags", 0) & 64)
            callback = {
                "id": parts[1],
                "type": 2,
                "response_message_id": str(next(self._ids)),
                "response_message_loading": False,
                "response_message_ephemeral": ephemeral,
            }
            return json_response({"interaction": callback})
        if len(parts) == 3 and parts[0] == "webhooks" and method == "POST":
            self.followups.append(body or {})
            return json_response(self._followup_message(parts[1], body or {}))
        return None

    def _followup_message(self, app_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": str(next(self._ids)),
            "channel_id": str(next(self._ids)),
            "type": 0,
            "content": str(body.get("content") or ""),
            "author": {"id": app_id, "username": "botd", "discriminator": "0", "avatar": None},
            "webhook_id": app_id,
            "application_id": app_id,
            "timestamp": TIMESTAMP,
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "flags": int(body.get("flags") or 0),
        }

    def _stored(self, command: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": 1,
            "options": [],
            "default_member_permissions": None,
            "nsfw": False,
            **command,
            "id": str(next(self._ids)),
            "application_id": str(self.app_id),
            "version": str(next(self._ids)),
        }

    def interaction(
        self,
        name: str,
        user: dict[str, Any],
        *,
        channel: dict[str, Any],
        guild_id: int | None,
        text: str | None = None,
    ) -> dict[str, Any]:
        """INTERACTION_CREATE for ``/name`` (with ``text`` as its text option) used by
        ``user`` in ``channel`` (a guild's, or a DM when ``guild_id`` is None)."""
        registered = next((c for c in self.registered if c["name"] == name), None)
        data: dict[str, Any] = {
            "id": registered["id"] if registered else str(next(self._ids)),
            "name": name,
            "type": 1,
        }
        if text is not None:
            data["options"] = [{"name": "text", "type": 3, "value": text}]
        return self._interaction(2, data, user, channel=channel, guild_id=guild_id)

    def component_interaction(
        self,
        message: dict[str, Any],
        custom_id: str,
        user: dict[str, Any],
        *,
        channel: dict[str, Any],
        guild_id: int | None,
    ) -> dict[str, Any]:
        """INTERACTION_CREATE for ``user`` pressing the button ``custom_id`` of ``message``
        (the bot's, with its components) in ``channel``."""
        data = {"custom_id": custom_id, "component_type": 2}
        payload = self._interaction(3, data, user, channel=channel, guild_id=guild_id)
        payload["message"] = message
        return payload

    def _interaction(
        self,
        kind: int,
        data: dict[str, Any],
        user: dict[str, Any],
        *,
        channel: dict[str, Any],
        guild_id: int | None,
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "id": str(next(self._ids)),
            "application_id": str(self.app_id),
            "type": kind,
            "data": data,
            "channel_id": channel["id"],
            "channel": channel,
            "token": f"interaction-token-{next(self._ids)}",
            "version": 1,
            "locale": "en-US",
            "app_permissions": "0",
            "entitlements": [],
            "attachment_size_limit": 10 * 1024 * 1024,
            "authorizing_integration_owners": {},
            "context": 0 if guild_id is not None else 1,
        }
        if guild_id is not None:
            payload["guild_id"] = str(guild_id)
            payload["guild_locale"] = "en-US"
            payload["member"] = {
                "user": user,
                "roles": [],
                "joined_at": TIMESTAMP,
                "deaf": False,
                "mute": False,
                "flags": 0,
                "permissions": "0",
            }
        else:
            payload["user"] = user
        return payload
