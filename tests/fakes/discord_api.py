"""A loopback fake of the Discord REST API and gateway, on aiohttp, for the real discord.py.

botd's Discord adapter talks to it when given ``fake.base_url`` as its ``api_base_url`` and
``fake.gateway_url`` as its ``gateway_url`` (its clients' own URLs: several fakes serve
several bots in one process). What the fake serves:

- Members: ``GET /guilds/{id}/members/{id}`` serves alice (the server's owner), the
  ``members`` and the ``managers`` (a role with Manage Server); anyone else is Discord's 404
  Unknown Member.
- Message history: ``GET /channels/{id}`` (the guild's channel and thread, threads the bot
  started, the DM) and ``GET /channels/{id}/messages`` with ``after``/``before``/``limit``,
  paged and ordered as Discord does (``history_reads`` lists them). A message made with
  ``message`` and never dispatched is one posted while botd was not listening.
- REST under ``/api/v10`` (also under ``/<name>/api/v10``, ``node_url``, one per process:
  its requests are recorded with ``via=name``): ``users/@me``, ``oauth2/applications/@me`` and
  ``applications/@me`` (with configurable application flags), ``gateway/bot``,
  ``channels/{id}/messages`` POST and PATCH, ``channels/{id}/typing`` and reaction PUTs
  (all answered 401 when ``token`` is set and not sent). JSON replies carry
  ``Content-Type: application/json`` exactly, because discord.py compares the whole header.
  ``rate_limit_next_post()`` answers the next message POST with a 429 that discord.py waits
  out (a ``Via`` header and ``retry_after`` in the body). ``limit_like_discord()`` puts the
  message POSTs of each channel in a bucket, as Discord does (five per five seconds): every
  answer carries the bucket's ``X-RateLimit-*`` headers, which discord.py reads to wait
  before the limit, and a POST past it is answered 429 (``rate_limited``).
  ``channels/{id}/messages/{id}/threads`` POST starts a thread owned by the bot (one per
  message, announced with THREAD_CREATE; ``threads_started``), or answers
  ``refuse_threads`` (status, code, message) instead.
  ``applications/{id}/commands`` and interaction callbacks: ``commands`` (``AppCommands``
  in ``discord_interactions``).
- The gateway at ``/gateway/`` (text frames, compression ignored): HELLO, IDENTIFY (recorded,
  or refused with a close code), READY pointing ``resume_gateway_url`` back
  where the session connected (through a proxy: the proxy), GUILD_CREATE
  with one text channel and one thread, heartbeat ACKs, RESUME answered with RESUMED.
  ``dispatch`` pushes an event to the live session; ``drop_connection`` closes the socket the
  way a network fault or a Discord restart would. Sharding as Discord does it: IDENTIFY's
  ``shard`` [id, count] binds the session to a shard, the guild's events (and its
  GUILD_CREATE) go to shard ``(guild_id >> 22) % count`` and DMs to shard 0; ``live_shards``
  and ``sessions_open`` tell which sessions are open on each shard.

Faults on the message routes (POST, PATCH, DELETE under ``channels/{id}/messages``):
``fail_next`` answers with an error status (a 503 discord.py does not retry itself, a 4xx),
``reset_next`` drops the connection with a TCP reset, and ``land=True`` carries the call out
first, as a timeout after the request landed would. Faulted requests go to ``faulted``, not
``requests``. ``visible(channel)`` is what a channel shows now (posts, edits and deletes).

Attachments: ``attachment(data, filename, content_type)`` keeps bytes and returns the
attachment object for a message payload (``message(..., attachments=[...])``); its ``url``
serves them (``GET /attachments/<id>/<filename>``, as Discord's CDN does, no token needed),
and ``attachment_downloads`` lists the paths fetched.

A message posted as multipart (``payload_json`` and file parts, as discord.py sends
attachments) is recorded with its JSON part as ``body`` and its files in ``files``.

Components (buttons): a message posted or edited with ``components`` keeps them
(``components_of``; an edit with ``components: []`` removes them, one without the key leaves
them); ``press(message_id, custom_id, presser)`` dispatches the component interaction a press
of one of them makes (INTERACTION_CREATE, type 3) and returns it, so a test can dispatch the
same payload again (a redelivery); its answer is the callback in ``commands.answers``.

Ids are snowflakes of the time they were made, as Discord's are (discord.py reads a message's
creation time from its id).

Like real Discord, a message POST with ``enforce_nonce`` and a ``nonce`` this bot used in the
same channel within ``nonce_window`` seconds creates nothing: it answers with the message the
first one made (``nonce_repeats`` lists those requests).

Like real Discord, guild message content is blanked when IDENTIFY lacked the message-content
intent, unless the message mentions the bot.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSMsgType, web

from .discord_interactions import TIMESTAMP, AppCommands
from .discord_interactions import json_response as _json
from .faults import Outage, reset
from .limits import FixedBuckets
from .loopback import serve

BOT_ID = 1100000000000000001
APP_ID = BOT_ID
GUILD_ID = 1200000000000000001
CHANNEL_ID = 1300000000000000001
THREAD_ID = 1300000000000000002
USER_ID = 1400000000000000001
OTHER_BOT_ID = 1400000000000000002
DM_CHANNEL_ID = 1500000000000000001
MANAGERS_ROLE_ID = 1600000000000000001
"""The server's role with Manage Server (``managers`` hold it)."""
MANAGE_GUILD = 1 << 5
DISCORD_EPOCH_MS = 1420070400000
"""2015-01-01T00:00:00Z, where Discord's snowflake clock starts."""

MESSAGE_CONTENT_INTENT = 1 << 15
# Application flags: GATEWAY_MESSAGE_CONTENT (verified) and _LIMITED (unverified, < 100 guilds).
FLAG_MESSAGE_CONTENT = 1 << 18
FLAG_MESSAGE_CONTENT_LIMITED = 1 << 19


def user(user_id: int, name: str, *, bot: bool = False) -> dict[str, Any]:
    return {
        "id": str(user_id),
        "username": name,
        "global_name": name,
        "discriminator": "0",
        "avatar": None,
        "bot": bot,
    }


BOT_USER = user(BOT_ID, "botd", bot=True)


@dataclass(frozen=True)
class Attachment:
    """A file part of a multipart message post: its name, media type and bytes."""

    filename: str
    content_type: str
    data: bytes


@dataclass
class RecordedRequest:
    method: str
    path: str
    body: Any
    headers: dict[str, str]
    files: list[Attachment] = field(default_factory=list)
    """The attachments of a multipart post (the JSON part is ``body``)."""
    via: str = ""
    """The path prefix it came through (``node_url``; empty: ``base_url``)."""


@dataclass
class _Fault:
    method: str
    status: int  # 0: reset the connection
    code: int
    message: str
    land: bool


@dataclass
class _Session:
    ws: web.WebSocketResponse
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    shard: int = 0


class FakeDiscordAPI:
    """Run with ``async with FakeDiscordAPI() as fake:``; read ``requests``, ``identifies``."""

    def __init__(
        self,
        *,
        application_flags: int = FLAG_MESSAGE_CONTENT_LIMITED,
        identify_close_code: int | None = None,
        token: str | None = None,
        nonce_window: float = 300.0,
    ) -> None:
        self.application_flags = application_flags
        self.nonce_window = nonce_window
        """How long a nonce with ``enforce_nonce`` is remembered (Discord: "a few minutes")."""
        self._nonces: dict[tuple[str, str, str], tuple[float, dict[str, Any]]] = {}
        self.nonce_repeats: list[RecordedRequest] = []
        """Message POSTs answered with the message an earlier one of the same nonce made."""
        self.token = token
        """When set, REST requests without ``Authorization: Bot <token>`` get a 401."""
        self.identify_close_code = identify_close_code
        """Close the gateway with this code on IDENTIFY (4014: disallowed intents)."""
        self.requests: list[RecordedRequest] = []
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.rate_limited: list[RecordedRequest] = []
        """Requests answered 429 (kept out of ``requests``)."""
        self._pending_429: list[float] = []
        self.buckets: FixedBuckets | None = None
        """The message POSTs' bucket per channel, when enforced (``limit_like_discord``)."""
        self._pending_refusals: list[tuple[int, int, str]] = []
        self._faults: list[_Fault] = []
        self.faulted: list[RecordedRequest] = []
        """Message requests answered with a scripted fault (kept out of ``requests``)."""
        self.messages: dict[int, tuple[str, str]] = {}
        """The bot's messages by id: (channel id, content as last edited); deleted ones gone."""
        self.payloads: dict[int, dict[str, Any]] = {}
        """Every message the fake made (built with ``message``, or posted by the bot) by id,
        as ``GET /channels/{id}/messages/{id}`` serves it."""
        self._last_id = 0
        self._sequence = 0
        self._session: _Session | None = None
        self._live = asyncio.Event()
        """Set while a session is identified or resumed and can take dispatches."""
        self.shard_count = 1
        """The shard count of the last IDENTIFY (1 without ``shard``)."""
        self.members: set[int] = set()
        """Members of the server (by user id) without a role, served by ``GET
        /guilds/{id}/members/{id}`` (with alice, the owner, and the ``managers``); anyone
        else is Discord's 404 Unknown Member."""
        self.managers: set[int] = set()
        """Members holding the server's "Managers" role (Manage Server)."""
        self.live_shards: dict[int, list[_Session]] = {}
        """The identified (or resumed) sessions still open, by shard."""
        self._shards_changed = asyncio.Event()
        self._request_arrived = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._outage: Outage | None = None
        self._port = 0
        self._attachments: dict[str, bytes] = {}
        self.attachment_downloads: list[str] = []
        self.threads_started: dict[str, str] = {}
        """Threads the bot started on a message: thread id -> the message's id."""
        self.refuse_threads: tuple[int, int, str] | None = None
        """(status, code, message) answering every thread start instead (a missing permission)."""
        self.history_reads: list[tuple[str, dict[str, str]]] = []
        """Each ``GET /channels/{id}/messages``: the channel and its query."""
        self.commands = AppCommands(APP_ID)
        self.reactions: dict[str, list[str]] = {}
        """The bot's own reactions on each message, by message id."""
        self.refuse_reactions: tuple[int, int, str] | None = None
        """(status, code, message) answering every reaction call instead (403, 50013,
        "Missing Permissions": no Add Reactions where the message is)."""
        """The application's slash commands and the interactions' answers."""

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/api/v10"

    def node_url(self, name: str) -> str:
        """A REST base URL under the path prefix ``/name``: its requests are recorded with
        ``via=name`` (which of several processes made them)."""
        return f"http://127.0.0.1:{self._port}/{name}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self._port}/gateway/"

    async def __aenter__(self) -> FakeDiscordAPI:
        app = web.Application()
        app.router.add_get("/gateway/", self._gateway)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        app.router.add_route("*", "/{via}/api/v10/{path:.*}", self._rest)
        app.router.add_get("/attachments/{path:.*}", self._attachment)
        self._runner, self._port = await serve(app, shutdown_timeout=1.0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._session is not None:
            await self._session.ws.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- scripting ---------------------------------------------------------------------------

    def rate_limit_next_post(self, retry_after: float = 0.01) -> None:
        """Answer the next message POST with a 429 that discord.py retries after ``retry_after``."""
        self._pending_429.append(retry_after)

    def limit_like_discord(self, count: int = 5, seconds: float = 5.0) -> None:
        """From now on, each channel's message POSTs go in a bucket of ``count`` per
        ``seconds``, told in the answers' headers and enforced with 429s."""
        self.buckets = FixedBuckets(count, seconds)

    def refuse_next_post(self, status: int, code: int, message: str) -> None:
        """Answer the next message POST with Discord's JSON error (``code`` and ``message``)."""
        self._pending_refusals.append((status, code, message))

    def fail_next(
        self,
        method: str,
        status: int,
        *,
        code: int = 0,
        message: str = "",
        times: int = 1,
        land: bool = False,
    ) -> None:
        """Answer the next ``times`` message requests of ``method`` (POST, PATCH, DELETE, GET) with
        ``status`` and Discord's JSON error; with ``land``, carry each out first."""
        text = message or {503: "Service Unavailable"}.get(status, "error")
        self._faults += [_Fault(method, status, code, text, land) for _ in range(times)]

    def reset_next(self, method: str, *, times: int = 1, land: bool = False) -> None:
        """Reset the connection of the next ``times`` message requests of ``method``."""
        self._faults += [_Fault(method, 0, 0, "", land) for _ in range(times)]

    def visible(self, channel_id: int) -> list[str]:
        """The bot's messages in ``channel_id`` as they show now, oldest first."""
        return [
            text for _, (chat, text) in sorted(self.messages.items()) if chat == str(channel_id)
        ]

    def shard_of(self, data: dict[str, Any]) -> int:
        """The shard an event goes to: its guild's, ``(guild_id >> 22) % shard_count`` as
        Discord computes it; events of no guild (DMs) go to shard 0."""
        guild = data.get("guild_id")
        return 0 if guild is None else (int(guild) >> 22) % self.shard_count

    def sessions_open(self) -> dict[int, int]:
        """How many identified sessions are open on each shard."""
        return {shard: len(sessions) for shard, sessions in self.live_shards.items() if sessions}

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send a dispatch (op 0) on the live session of the event's shard (``shard_of``),
        waiting for one to be established; every session of the shard gets it, as Discord
        does when two connections identified on one shard."""
        shard = self.shard_of(data)
        while not self.live_shards.get(shard):
            changed = self._shards_changed
            await changed.wait()
        for session in list(self.live_shards[shard]):
            await self._send(session.ws, event, data)

    def _shard_live(self, session: _Session, live: bool) -> None:
        sessions = self.live_shards.setdefault(session.shard, [])
        if live and session not in sessions:
            sessions.append(session)
        elif not live and session in sessions:
            sessions.remove(session)
        changed, self._shards_changed = self._shards_changed, asyncio.Event()
        changed.set()

    async def dispatch_message(self, payload: dict[str, Any]) -> None:
        """Dispatch MESSAGE_CREATE, blanking guild content as Discord does without the intent."""
        await self.dispatch("MESSAGE_CREATE", self._as_seen(payload))

    def _as_seen(self, payload: dict[str, Any]) -> dict[str, Any]:
        """``payload`` as the bot may see it: without the message content intent, a guild
        message's content is blank unless it mentions the bot or is the bot's own."""
        intents = self.identifies[-1]["intents"] if self.identifies else 0
        mentioned = any(int(u["id"]) == BOT_ID for u in payload.get("mentions", []))
        seen = mentioned or int(payload["author"]["id"]) == BOT_ID
        if "guild_id" in payload and not intents & MESSAGE_CONTENT_INTENT and not seen:
            return {**payload, "content": ""}
        return payload

    async def dispatch_edit(self, payload: dict[str, Any], content: str, *, at: str) -> None:
        """Dispatch MESSAGE_UPDATE: the message of ``payload`` now reads ``content``, edited at
        ``at`` (an ISO timestamp)."""
        edited = {**payload, "content": content, "edited_timestamp": at}
        await self.dispatch("MESSAGE_UPDATE", edited)

    async def drop_connection(self, code: int = 4000) -> None:
        """Close the live gateway socket from the server side (a resumable close code)."""
        await self._live.wait()
        session = self._session
        assert session is not None
        self._live.clear()
        await session.ws.close(code=code)
        await session.closed.wait()

    async def outage(self) -> Outage:
        """Take Discord away until ``end()`` is awaited: new connections are refused,
        requests on open ones reset, and the live gateway socket is closed (resuming fails)."""
        assert self._runner is not None
        self._outage = Outage(self._runner, self._port)
        await self._outage.begin()
        if self._live.is_set():
            await self.drop_connection()
        return self._outage

    async def wait_for_requests(
        self, predicate: Callable[[RecordedRequest], bool], count: int = 1
    ) -> list[RecordedRequest]:
        """Wait until ``count`` recorded requests match; callers add their own hang guard."""
        async with self._request_arrived:
            await self._request_arrived.wait_for(
                lambda: len([r for r in self.requests if predicate(r)]) >= count
            )
        return [r for r in self.requests if predicate(r)]

    def message_posts(self) -> list[RecordedRequest]:
        """Message POSTs answered 200 (429s are in ``rate_limited``), in order."""
        return [r for r in self.requests if r.method == "POST" and r.path.endswith("/messages")]

    # --- payload builders --------------------------------------------------------------------

    def next_id(self) -> int:
        """A new snowflake: the milliseconds since Discord's epoch, then an increment (each
        id above the last)."""
        now = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
        self._last_id = max(now, self._last_id + 1)
        return self._last_id

    def components_of(self, message_id: int | str) -> list[dict[str, Any]]:
        """The components (action rows) the bot's message ``message_id`` shows now."""
        return list(self.payloads.get(int(message_id), {}).get("components") or [])

    async def press(
        self,
        message_id: int | str,
        custom_id: str,
        presser: dict[str, Any],
        *,
        guild_id: int | None = None,
    ) -> dict[str, Any]:
        """``presser`` presses the button ``custom_id`` of the bot's message ``message_id``
        (in a guild's channel when ``guild_id``, else a DM): dispatches the component
        interaction and returns it."""
        message = self.payloads[int(message_id)]
        channel: dict[str, Any] = {"id": message["channel_id"], "type": 1}
        if guild_id is not None:
            channel = {**channel, "type": 0, "guild_id": str(guild_id), "name": "general"}
        interaction = self.commands.component_interaction(
            message, custom_id, presser, channel=channel, guild_id=guild_id
        )
        await self.dispatch("INTERACTION_CREATE", interaction)
        return interaction

    def message(
        self,
        content: str,
        *,
        channel_id: int = CHANNEL_ID,
        author: dict[str, Any] | None = None,
        guild: bool = True,
        mentions: tuple[dict[str, Any], ...] = (),
        message_id: int | None = None,
        reply_to: dict[str, Any] | None = None,
        resolved: bool = True,
        attachments: list[dict[str, Any]] | None = None,
        stickers: tuple[str, ...] = (),
        poll: tuple[str, tuple[str, ...]] | None = None,
        forwards: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A MESSAGE_CREATE payload, kept as a message of the channel (``payloads``);
        ``guild=False`` makes it a DM. ``reply_to``: the message it replies to, sent along
        as ``referenced_message`` unless ``resolved`` is False (Discord leaves it out when
        it did not look the message up). ``stickers``: the names of the stickers it carries
        (``sticker_items``); ``poll``: its question and answers; ``forwards``: the message
        (payload) it forwards, as Discord sends a forward: no content of its own, a
        reference of type 1 and the forwarded message as a snapshot."""
        author = author or user(USER_ID, "alice")
        snowflake = message_id or self.next_id()
        payload: dict[str, Any] = {
            "id": str(snowflake),
            "channel_id": str(channel_id),
            "author": author,
            "content": content,
            "timestamp": TIMESTAMP if message_id else _snowflake_time(snowflake),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": list(mentions),
            "mention_roles": [],
            "attachments": list(attachments or ()),
            "embeds": [],
            "pinned": False,
            "type": 0,
        }
        if guild:
            payload["guild_id"] = str(GUILD_ID)
            payload["member"] = {
                "roles": [],
                "joined_at": TIMESTAMP,
                "deaf": False,
                "mute": False,
                "flags": 0,
            }
        if reply_to is not None:
            payload["type"] = 19
            if resolved:
                payload["referenced_message"] = reply_to
            payload["message_reference"] = {
                "type": 0,
                "message_id": reply_to["id"],
                "channel_id": reply_to["channel_id"],
                **({"guild_id": str(GUILD_ID)} if guild else {}),
            }
        if stickers:
            payload["sticker_items"] = [
                {"id": str(self.next_id()), "name": name, "format_type": 1} for name in stickers
            ]
        if poll is not None:
            question, answers = poll
            payload["poll"] = {
                "question": {"text": question},
                "answers": [
                    {"answer_id": n, "poll_media": {"text": answer}}
                    for n, answer in enumerate(answers, 1)
                ],
                "expiry": TIMESTAMP,
                "allow_multiselect": False,
                "layout_type": 1,
            }
        if forwards is not None:
            payload["content"] = ""
            payload["message_reference"] = {
                "type": 1,
                "message_id": forwards["id"],
                "channel_id": forwards["channel_id"],
                **({"guild_id": forwards["guild_id"]} if "guild_id" in forwards else {}),
            }
            kept = ("type", "content", "embeds", "attachments", "timestamp", "edited_timestamp")
            snapshot = {key: forwards[key] for key in kept}
            snapshot.update(flags=0, mentions=[], mention_roles=[], components=[])
            if "sticker_items" in forwards:
                snapshot["sticker_items"] = forwards["sticker_items"]
            payload["message_snapshots"] = [{"message": snapshot}]
        self.payloads[int(payload["id"])] = payload
        return payload

    def attachment(self, data: bytes, filename: str, content_type: str) -> dict[str, Any]:
        """Keep ``data`` to be served; returns the attachment object for a message."""
        attachment_id = str(self.next_id())
        path = f"{attachment_id}/{filename}"
        self._attachments[path] = data
        url = f"http://127.0.0.1:{self._port}/attachments/{path}"
        return {
            "id": attachment_id,
            "filename": filename,
            "content_type": content_type,
            "size": len(data),
            "url": url,
            "proxy_url": url,
        }

    async def _attachment(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        self.attachment_downloads.append(path)
        data = self._attachments.get(path)
        if data is None:
            return web.Response(status=404, text="not found")
        return web.Response(body=data, content_type="application/octet-stream")

    def _posted_message(self, channel_id: str, body: dict[str, Any]) -> dict[str, Any]:
        payload = self.message(
            body.get("content") or "", channel_id=int(channel_id), author=BOT_USER, guild=False
        )
        if body.get("message_reference"):
            payload["type"] = 19
            payload["message_reference"] = body["message_reference"]
        payload["components"] = list(body.get("components") or [])
        return payload

    def _guild(self) -> dict[str, Any]:
        return {
            "id": str(GUILD_ID),
            "name": "Fake Guild",
            "owner_id": str(USER_ID),
            "unavailable": False,
            "member_count": 2,
            "large": False,
            "features": [],
            "emojis": [],
            "stickers": [],
            "voice_states": [],
            "presences": [],
            "roles": [
                {
                    "id": str(GUILD_ID),
                    "name": "@everyone",
                    "permissions": "104324673",
                    "position": 0,
                    "color": 0,
                    "hoist": False,
                    "managed": False,
                    "mentionable": False,
                    "flags": 0,
                },
                {
                    "id": str(MANAGERS_ROLE_ID),
                    "name": "Managers",
                    "permissions": str(MANAGE_GUILD),
                    "position": 1,
                    "color": 0,
                    "hoist": False,
                    "managed": False,
                    "mentionable": False,
                    "flags": 0,
                },
            ],
            "channels": [
                {
                    "id": str(CHANNEL_ID),
                    "type": 0,
                    "guild_id": str(GUILD_ID),
                    "name": "general",
                    "position": 0,
                    "permission_overwrites": [],
                    "parent_id": None,
                    "nsfw": False,
                    "topic": None,
                    "last_message_id": None,
                    "rate_limit_per_user": 0,
                }
            ],
            "threads": [
                {
                    "id": str(THREAD_ID),
                    "type": 11,
                    "guild_id": str(GUILD_ID),
                    "parent_id": str(CHANNEL_ID),
                    "owner_id": str(USER_ID),
                    "name": "a thread",
                    "last_message_id": None,
                    "rate_limit_per_user": 0,
                    "message_count": 0,
                    "member_count": 2,
                    "flags": 0,
                    "thread_metadata": {
                        "archived": False,
                        "auto_archive_duration": 1440,
                        "archive_timestamp": TIMESTAMP,
                        "locked": False,
                    },
                }
            ],
            "members": [
                {
                    "user": BOT_USER,
                    "roles": [],
                    "joined_at": TIMESTAMP,
                    "deaf": False,
                    "mute": False,
                    "flags": 0,
                }
            ],
            "joined_at": TIMESTAMP,
            "mfa_level": 0,
            "verification_level": 0,
            "explicit_content_filter": 0,
            "default_message_notifications": 0,
            "premium_tier": 0,
            "nsfw_level": 0,
            "system_channel_flags": 0,
            "preferred_locale": "en-US",
        }

    # --- REST --------------------------------------------------------------------------------

    async def _record(self, request: web.Request) -> RecordedRequest:
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            files = [
                Attachment(value.filename, value.content_type, value.file.read())
                for value in form.values()
                if isinstance(value, web.FileField)
            ]
            payload = form.get("payload_json")
            parsed = json.loads(payload) if isinstance(payload, str) else {}
            path = "/" + request.match_info["path"]
            via = request.match_info.get("via", "")
            return RecordedRequest(
                request.method, path, parsed, dict(request.headers), files, via=via
            )
        raw = await request.read()
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
        recorded = RecordedRequest(
            request.method,
            "/" + request.match_info["path"],
            body,
            dict(request.headers),
            via=request.match_info.get("via", ""),
        )
        return recorded

    async def _remember(self, recorded: RecordedRequest) -> None:
        async with self._request_arrived:
            self.requests.append(recorded)
            self._request_arrived.notify_all()

    async def _rest(self, request: web.Request) -> web.Response:
        if self._outage is not None and self._outage.active:
            return reset(request)
        recorded = await self._record(request)
        parts = recorded.path.strip("/").split("/")
        method = recorded.method
        if method == "POST" and parts[-1] == "messages" and self._pending_429:
            retry_after = self._pending_429.pop(0)
            self.rate_limited.append(recorded)
            body = {"message": "You are being rate limited.", "retry_after": retry_after}
            # Without Via discord.py takes a 429 for a Cloudflare ban and gives up.
            return _json({**body, "global": False}, 429, {"Via": "1.1 google"})
        bucket: dict[str, str] = {}
        if self.buckets is not None and method == "POST" and parts[2:] == ["messages"]:
            state = self.buckets.call(parts[1], time.monotonic())
            bucket = state.headers(f"messages-{parts[1]}")
            if state.refused:
                self.rate_limited.append(recorded)
                body = {"message": "You are being rate limited.", "global": False}
                body["retry_after"] = state.reset_after
                return _json(body, 429, {"Via": "1.1 google", **bucket})
        if method == "POST" and parts[-1] == "messages" and self._pending_refusals:
            status, code, message = self._pending_refusals.pop(0)
            return _json({"message": message, "code": code}, status)
        fault = self._fault_for(method, parts)
        if fault is not None:
            self.faulted.append(recorded)
            if fault.land:
                self._message_call(method, parts, recorded)
            if fault.status == 0:
                return reset(request)
            return _json({"message": fault.message, "code": fault.code}, fault.status)
        await self._remember(recorded)
        if self.token is not None and request.headers.get("Authorization") != f"Bot {self.token}":
            return _json({"message": "401: Unauthorized", "code": 0}, 401)
        if parts == ["users", "@me"]:
            return _json(BOT_USER)
        if parts == ["gateway", "bot"]:
            limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
            return _json({"url": self.gateway_url, "shards": 1, "session_start_limit": limit})
        if parts in (["oauth2", "applications", "@me"], ["applications", "@me"]):
            return _json(
                {
                    "id": str(APP_ID),
                    "name": "botd",
                    "description": "",
                    "icon": None,
                    "bot_public": False,
                    "bot_require_code_grant": False,
                    "owner": user(USER_ID, "alice"),
                    "verify_key": "0" * 64,
                    "flags": self.application_flags,
                }
            )
        served = self.commands.handle(method, parts, recorded.body)
        if served is not None:
            return served
        if parts[0] == "channels" and len(parts) == 2 and method == "GET":
            return self._channel_object(parts[1])
        if parts[0] == "guilds" and parts[2:3] == ["members"] and method == "GET":
            return self._member(int(parts[3]))
        if parts[0] == "channels" and parts[2:] == ["messages"] and method == "GET":
            return self._history(parts[1], request.query)
        if parts[0] == "channels" and len(parts) == 5 and parts[4] == "threads":
            return await self._start_thread(parts[1], parts[3], recorded.body or {})
        if parts[0] == "channels" and len(parts) >= 3:
            if parts[2] == "typing":
                return web.Response(status=204)
            if len(parts) == 7 and parts[2] == "messages" and parts[4:7:2] == ["reactions", "@me"]:
                return self._own_reaction(method, parts[3], parts[5])
            if parts[2] == "messages":
                answer = self._message_call(method, parts, recorded)
                answer.headers.update(bucket)
                return answer
        return _json({"message": "404: Not Found", "code": 0}, 404)

    def _member(self, user_id: int) -> web.Response:
        """``GET /guilds/{id}/members/{id}``: a member, a manager, or alice; else Discord's
        Unknown Member."""
        if user_id not in self.members | self.managers | {USER_ID}:
            return _json({"message": "Unknown Member", "code": 10007}, 404)
        roles = [str(MANAGERS_ROLE_ID)] if user_id in self.managers else []
        member = {"user": user(user_id, f"user{user_id}"), "roles": roles}
        return _json({**member, "joined_at": TIMESTAMP, "deaf": False, "mute": False, "flags": 0})

    def _channel_object(self, channel_id: str) -> web.Response:
        """``GET /channels/{id}``: the guild's text channel, its thread, a thread the bot
        started, or the DM with alice; Discord's 404 for any other."""
        if channel_id == str(DM_CHANNEL_ID):
            dm = {"id": channel_id, "type": 1, "recipients": [user(USER_ID, "alice")]}
            return _json({**dm, "last_message_id": None})
        guild = self._guild()
        for channel in [*guild["channels"], *guild["threads"]]:
            if channel["id"] == channel_id:
                return _json(channel)
        if channel_id in self.threads_started:
            thread = {**guild["threads"][0], "id": channel_id, "owner_id": str(BOT_ID)}
            return _json({**thread, "parent_id": str(CHANNEL_ID)})
        return _json({"message": "Unknown Channel", "code": 10003}, 404)

    def _history(self, channel_id: str, query: Mapping[str, str]) -> web.Response:
        """``GET /channels/{id}/messages``: the channel's messages (every one ``message``
        made for it and every one the bot posted there), as Discord pages them: at most
        ``limit`` (50 by default, 100 at most), right after ``after`` or right before
        ``before`` (else the latest), newest first."""
        limit = min(int(query.get("limit", "50")), 100)
        ids = sorted(i for i, p in self.payloads.items() if p["channel_id"] == channel_id)
        if "after" in query:
            ids = [i for i in ids if i > int(query["after"])][:limit]
        else:
            if "before" in query:
                ids = [i for i in ids if i < int(query["before"])]
            ids = ids[-limit:]
        self.history_reads.append((channel_id, dict(query)))
        return _json([self._as_seen(self.payloads[i]) for i in reversed(ids)])

    def _own_reaction(self, method: str, message_id: str, emoji: str) -> web.Response:
        """PUT/DELETE ``.../messages/{id}/reactions/{emoji}/@me``: the bot's own reaction,
        added or removed (both idempotent, 204), with Discord's refusals."""
        if self.refuse_reactions is not None:
            status, code, message = self.refuse_reactions
            return _json({"message": message, "code": code}, status)
        if emoji.isascii() and not re.fullmatch(r"[A-Za-z0-9_]+:[0-9]+", emoji):
            return _json({"message": "Unknown Emoji", "code": 10014}, 400)
        mine = self.reactions.setdefault(message_id, [])
        if method == "PUT" and emoji not in mine:
            mine.append(emoji)
        elif method == "DELETE" and emoji in mine:
            mine.remove(emoji)
        return web.Response(status=204)

    async def _start_thread(
        self, channel_id: str, message_id: str, body: dict[str, Any]
    ) -> web.Response:
        """``POST /channels/{id}/messages/{id}/threads``: a public thread on the message, owned
        by the bot, announced with THREAD_CREATE as Discord does; one per message."""
        if self.refuse_threads is not None:
            status, code, message = self.refuse_threads
            return _json({"message": message, "code": code}, status)
        if message_id in self.threads_started.values():
            return _json(
                {"message": "A thread has already been created for this message", "code": 160004},
                400,
            )
        thread_id = str(self.next_id())
        self.threads_started[thread_id] = message_id
        thread = {
            "id": thread_id,
            "type": 11,
            "guild_id": str(GUILD_ID),
            "parent_id": channel_id,
            "owner_id": str(BOT_ID),
            "name": str(body.get("name") or ""),
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "message_count": 0,
            "member_count": 1,
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": int(body.get("auto_archive_duration") or 1440),
                "archive_timestamp": TIMESTAMP,
                "locked": False,
            },
        }
        if self._live.is_set() and self._session is not None:
            await self._send(self._session.ws, "THREAD_CREATE", {**thread, "newly_created": True})
        return _json(thread, 201)

    def _fault_for(self, method: str, parts: list[str]) -> _Fault | None:
        if len(parts) < 3 or parts[0] != "channels" or parts[2] != "messages":
            return None
        for index, fault in enumerate(self._faults):
            if fault.method == method:
                return self._faults.pop(index)
        return None

    def _message_call(
        self, method: str, parts: list[str], recorded: RecordedRequest
    ) -> web.Response:
        channel_id = parts[1]
        if method == "POST" and len(parts) == 3:
            body = recorded.body or {}
            nonce = body.get("nonce") if body.get("enforce_nonce") else None
            # One bot token here, so the author is always the bot; the key keeps its place.
            seen = (channel_id, str(BOT_ID), str(nonce))
            if nonce is not None:
                earlier = self._nonces.get(seen)
                if earlier is not None and time.monotonic() - earlier[0] < self.nonce_window:
                    self.nonce_repeats.append(recorded)
                    return _json(earlier[1])
            payload = self._posted_message(channel_id, body)
            if nonce is not None:
                payload["nonce"] = str(nonce)
                self._nonces[seen] = (time.monotonic(), payload)
            self.messages[int(payload["id"])] = (channel_id, payload["content"])
            self.payloads[int(payload["id"])] = payload
            return _json(payload)
        if method == "GET" and len(parts) == 4:
            found = self.payloads.get(int(parts[3]))
            if found is None or found["channel_id"] != channel_id:
                return _json({"message": "Unknown Message", "code": 10008}, 404)
            return _json(self._as_seen(found))
        if method == "PATCH" and len(parts) == 4:
            body = recorded.body or {}
            kept = self.payloads.get(int(parts[3]))
            if kept is None:
                made = self._posted_message(channel_id, body)
                self.payloads.pop(int(made["id"]))
                payload = {**made, "id": parts[3]}
            else:  # what the edit names changes, the rest stays
                payload = {
                    **kept,
                    **{k: body[k] for k in ("content", "components") if k in body},
                }
            self.messages[int(parts[3])] = (channel_id, payload["content"])
            self.payloads[int(parts[3])] = payload
            return _json(payload)
        if method == "DELETE" and len(parts) == 4:
            self.payloads.pop(int(parts[3]), None)
            if self.messages.pop(int(parts[3]), None) is None:
                return _json({"message": "Unknown Message", "code": 10008}, 404)
            return web.Response(status=204)
        return _json({"message": "405: Method Not Allowed", "code": 0}, 405)

    # --- gateway -----------------------------------------------------------------------------

    async def _send(self, ws: web.WebSocketResponse, event: str, data: dict[str, Any]) -> None:
        self._sequence += 1
        await ws.send_str(json.dumps({"op": 0, "t": event, "s": self._sequence, "d": data}))

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        if self._outage is not None and self._outage.active:
            return reset(request)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        session = _Session(ws)
        self._session = session
        try:
            await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 1000}}))
            async for frame in ws:
                if frame.type != WSMsgType.TEXT:
                    continue
                payload = json.loads(frame.data)
                op = payload["op"]
                if op == 1:
                    await ws.send_str(json.dumps({"op": 11}))
                elif op == 2:
                    self.identifies.append(payload["d"])
                    if self.identify_close_code is not None:
                        await ws.close(code=self.identify_close_code)
                        break
                    shard, self.shard_count = payload["d"].get("shard") or (0, 1)
                    session.shard = shard
                    await self._identified(ws, shard, f"ws://{request.host}/gateway/")
                    self._shard_live(session, True)
                elif op == 6:
                    self.resumes.append(payload["d"])
                    await self._send(ws, "RESUMED", {})
                    self._live.set()
                    self._shard_live(session, True)
        finally:
            if self._session is session:
                self._live.clear()
            self._shard_live(session, False)
            session.closed.set()
        return ws

    async def _identified(self, ws: web.WebSocketResponse, shard: int, here: str) -> None:
        # The guild goes to its shard only; a shard without guilds is READY with none.
        guilds = [] if self.shard_of({"guild_id": GUILD_ID}) != shard else [self._guild()]
        await self._send(
            ws,
            "READY",
            {
                "v": 10,
                "user": BOT_USER,
                "guilds": [{"id": g["id"], "unavailable": True} for g in guilds],
                "session_id": f"session-{len(self.identifies)}",
                "resume_gateway_url": here,
                "shard": [shard, self.shard_count],
                "application": {"id": str(APP_ID), "flags": self.application_flags},
                "private_channels": [],
            },
        )
        for guild in guilds:
            await self._send(ws, "GUILD_CREATE", guild)
        self._live.set()


def _snowflake_time(snowflake: int) -> str:
    """The ISO timestamp a snowflake was made at."""
    millis = (snowflake >> 22) + DISCORD_EPOCH_MS
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat()
