"""The doctor's live probe of a Discord bot: read-only requests only.

``users/@me``, ``gateway/bot`` (session starts left) and ``applications/@me`` for the
message-content intent botd asks the gateway for. URLs are named without tokens.
"""

from __future__ import annotations

from typing import Any

import httpx

from ...ops.doctor.checks import Answer, Check, Unreachable, failed, passed, request, unreachable

__all__ = ["DISCORD_API", "DISCORD_INTENT_FIX", "probe"]

DISCORD_API = "https://discord.com/api/v10"
API_URL_KEY = "channels.discord.api_base_url"
"""The key that points the probe at the API."""

# Application flags granting the message-content intent (verified apps, and apps in fewer
# than 100 servers).
GATEWAY_MESSAGE_CONTENT = 1 << 18
GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 19

DISCORD_INTENT_FIX = (
    'enable "Message Content Intent" in the Discord developer portal '
    "(Applications > your app > Bot > Privileged Gateway Intents)"
)


async def probe(client: httpx.AsyncClient, section: Any) -> list[Check]:
    base = str(section.api_base_url or DISCORD_API).rstrip("/")
    headers = {"Authorization": f"Bot {section.token}"}

    async def get(path: str) -> Answer:
        return await request(client, "GET", f"{base}/{path}", headers=headers)

    try:
        me = await get("users/@me")
    except Unreachable as exc:
        return [unreachable("discord.token", "discord", base, exc, API_URL_KEY)]
    if me.status == 401:
        return [
            failed(
                "discord.token",
                "discord: the bot token was rejected (users/@me: 401 Unauthorized)",
                "check channels.discord.token: the bot token from the developer portal "
                "(Applications > your app > Bot > Reset Token)",
            )
        ]
    if me.status == 404:
        return [_discord_not_found("discord.token", "users/@me", base)]
    if me.status != 200:
        return [_discord_trouble("discord.token", "users/@me", me)]
    bot = me.field("username") or "?"
    checks = [passed("discord.token", f"discord: token accepted, bot {bot} ({base})")]
    try:
        gateway = await get("gateway/bot")
        application = await get("applications/@me")
    except Unreachable as exc:
        return [
            *checks,
            unreachable("discord.gateway", "discord", base, exc, API_URL_KEY),
        ]
    if gateway.status != 200:
        checks.append(_discord_trouble("discord.gateway", "gateway/bot", gateway))
    else:
        limit = gateway.field("session_start_limit")
        remaining = limit.get("remaining") if isinstance(limit, dict) else None
        if remaining == 0:
            wait = int(limit.get("reset_after", 0)) // 1000 if isinstance(limit, dict) else 0
            checks.append(
                failed(
                    "discord.gateway",
                    "discord: no gateway session starts left today",
                    f"wait about {wait} s before starting botd (too many restarts)",
                )
            )
        else:
            url = gateway.field("url") or "?"
            checks.append(passed("discord.gateway", f"discord: gateway reachable ({url})"))
    flags = application.field("flags")
    if application.status != 200 or not isinstance(flags, int):
        checks.append(_discord_trouble("discord.intent", "applications/@me", application))
    elif flags & (GATEWAY_MESSAGE_CONTENT | GATEWAY_MESSAGE_CONTENT_LIMITED):
        checks.append(passed("discord.intent", "discord: message content intent enabled"))
    else:
        checks.append(
            failed(
                "discord.intent",
                "discord: the message content intent is off, so Discord refuses the gateway "
                "connection botd asks for",
                DISCORD_INTENT_FIX,
            )
        )
    return checks


def _discord_not_found(name: str, path: str, base: str) -> Check:
    return failed(
        name,
        f"discord: {base} answered {path} with 404 Not Found",
        f"check channels.discord.api_base_url (normally {DISCORD_API}, or leave it out)",
    )


def _discord_trouble(name: str, path: str, answer: Answer) -> Check:
    message = answer.field("message") or "no message"
    return failed(
        name,
        f"discord: {path} answered {answer.status} ({message})",
        "if it is a 5xx or 429, Discord is having trouble: try again later",
    )
