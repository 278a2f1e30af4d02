"""A loopback fake of the Slack Web API and of Socket Mode, for the real slack-bolt client.

Web API: ``/api/{method}`` on any HTTP verb, with arguments merged from the query string, a form
body and a JSON body (the SDK uses all three). It answers ``auth.test``,
``apps.connections.open`` (a ``ws://`` URL back to this fake),
``chat.postMessage``/``chat.update``, ``reactions.add``, ``assistant.threads.setStatus`` (only
in ``assistant_threads``, with ``assistant:write`` among the scopes, else Slack's
``invalid_thread_ts`` / ``missing_scope``; what shows in ``statuses``, until '' or a reply in
the thread clears it), ``conversations.replies`` (by ``latest``, ``oldest``, ``limit`` and
``cursor``, from ``replies`` and the bot's posts in the thread), ``conversations.history`` (the
channel's top-level messages, people's from ``history`` and the bot's posts, newest first, by
the same arguments) and ``users.info`` (from ``users``, with ``is_admin`` and ``is_owner``
from ``admins`` and ``workspace_owners``); every call is recorded. A post keeps its
``metadata``, which the two reads return only with ``include_all_metadata``, as Slack does;
``posted(channel)`` lists the bot's messages there as the reads would show them. A posted
message's ``ts`` counts from 1700000000, or from ``clock()`` when one is given. Errors are
scripted per method for the next calls: a 429 with ``Retry-After``, Slack's ``ok: false``, a 5xx
(``status``), or a connection reset (``reset_next``); with ``land=True`` the call is carried out
before it fails, as a timeout after the request landed would. ``chat.delete`` removes a posted
message; ``visible(channel)`` is what the channel shows now.
Streams: ``chat.startStream`` posts a message in a thread that ``chat.appendStream`` and
``chat.stopStream`` grow (their ``markdown_text`` added at its end); ``streaming`` lists
those not stopped. Its errors are Slack's: ``invalid_arguments`` without ``thread_ts``,
``missing_recipient_team_id`` / ``missing_recipient_user_id`` outside a DM, and
``message_not_in_streaming_state`` once stopped; ``fail_next`` makes them refuse otherwise.

Socket Mode: ``/link/`` sends ``hello``, then whatever envelopes the test pushes with
``send_event`` (or ``send_slash_command``); the client's acks (``{"envelope_id": …}``,
with the payload a command's ack may carry) are recorded, and what is posted to a command's
``response_url`` (``/commands/<envelope id>``) is kept in ``command_responses``.
``drop_socket`` closes the connection from the server side, as Slack does when it rotates
sockets. Several clients (the nodes of a cluster, each through its ``node_url``) may be
connected at once (``sockets``, oldest first, and the prefix each came through in
``socket_via``); ``send_event(..., socket=i)`` picks the connection an envelope goes over, and
``deliver_event`` spreads events over every open connection as Slack does, sending one again
over the next connection when it is not acknowledged in time.

Files: ``add_file`` keeps bytes and returns the file object a ``file_share`` message lists;
``GET /files-pri/<team>-<id>/<name>`` (its ``url_private``) serves them only with
``Authorization: Bearer <token>`` for the token given, and Slack's HTML sign-in page
otherwise, as Slack does for a token without ``files:read``. ``file_downloads`` records
each fetch and the token it came with.

Files (``files_upload_v2``): ``files.getUploadURLExternal`` hands out a file id and an upload
URL back to this fake (``/upload/{file_id}``, where the bytes are posted; ``fail_upload``
answers the next posts with an error status), and ``files.completeUploadExternal`` shares
the uploaded files in a channel; ``shared_files`` lists what was shared, with the bytes.

Every answer carries ``X-OAuth-Scopes``, the scopes the token was granted, as Slack's do:
``scopes`` (all a botd app asks for, unless a test takes some away; None: no header).

Slack's limit on posting (``limit_like_slack``): past three ``chat.postMessage`` in any three
seconds in one channel (about one a second, in short bursts) a post is answered 429
``ratelimited`` with ``Retry-After``, and not counted; ``rate_limited`` lists those calls.

``signed_headers`` signs an HTTP Events API request body like Slack does.

    async with FakeSlack() as fake:
        client = AsyncWebClient(token="xoxb-test", base_url=fake.base_url)
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import re
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import WSMsgType, web

from tests.support.waiting import HANG_GUARD

from .faults import Outage, reset
from .limits import SlidingLimit, retry_seconds
from .loopback import serve

BOT_USER_ID = "UBOT"
BOT_ID = "BBOT"
TEAM_ID = "T0001"


@dataclass(frozen=True)
class ApiCall:
    method: str
    http_method: str
    token: str
    args: dict[str, Any]
    via: str = ""
    """The path prefix it came through (``node_url``; empty: ``base_url``)."""


@dataclass
class ScriptedError:
    """The next call of a method answers with this instead: HTTP ``status`` with ``ok: false``."""

    error: str
    status: int = 200
    retry_after: int | None = None
    land: bool = False
    reset: bool = False


@dataclass(frozen=True)
class SharedFile:
    """A file ``files.completeUploadExternal`` shared: where, with which comment, its bytes."""

    file_id: str
    title: str
    channel: str
    initial_comment: str | None
    thread_ts: str | None
    data: bytes


@dataclass
class _State:
    calls: list[ApiCall] = field(default_factory=list)
    acks: list[str] = field(default_factory=list)
    ack_payloads: dict[str, Any] = field(default_factory=dict)
    connections: int = 0


def signed_headers(secret: str, body: bytes, *, timestamp: int | None = None) -> dict[str, str]:
    """The headers Slack sends with an Events API request: timestamp and v0 HMAC signature."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    base = f"v0:{ts}:".encode() + body
    signature = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": signature,
    }


def _blocks(args: dict[str, Any]) -> list[dict[str, Any]]:
    """A call's ``blocks`` (a form body carries them as JSON)."""
    blocks = args.get("blocks") or []
    return list(json.loads(blocks) if isinstance(blocks, str) else blocks)


def event_callback(event: dict[str, Any], *, event_id: str | None = None) -> dict[str, Any]:
    """An ``event_callback`` body around ``event``, with a fresh event id unless given."""
    return {
        "token": "verification-token",
        "team_id": TEAM_ID,
        "api_app_id": "A0001",
        "type": "event_callback",
        "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": int(time.time()),
        "event": event,
    }


def shared_message(
    text: str, *, author: str, author_name: str, ts: str, channel: str = "C777"
) -> dict[str, Any]:
    """The attachment Slack puts on a message that shares another ("Share message"):
    the shared message's text, author, channel and ``ts``."""
    return {
        "ts": ts,
        "author_id": author,
        "author_name": author_name,
        "channel_id": channel,
        "channel_name": "general",
        "is_msg_unfurl": True,
        "is_share": True,
        "text": text,
        "fallback": f"[{ts}] {author_name}: {text}",
        "from_url": f"https://example.slack.com/archives/{channel}/p{ts.replace('.', '')}",
        "mrkdwn_in": ["text"],
        "footer": "Posted in #general",
        "color": "D0D0D0",
    }


def message_changed(
    original: dict[str, Any],
    text: str,
    *,
    edited_ts: str,
    user: str | None = None,
    subtype: str | None = None,
) -> dict[str, Any]:
    """The ``message_changed`` event Slack sends when ``original`` (a ``message`` event) is
    edited to ``text`` at ``edited_ts`` (by its sender, unless ``user``); ``subtype``: what
    the message became (``tombstone`` for a deleted thread parent)."""
    before = {k: v for k, v in original.items() if k not in ("channel", "channel_type")}
    editor = user or str(original.get("user") or "")
    return {
        "type": "message",
        "subtype": "message_changed",
        "hidden": True,
        "channel": original["channel"],
        **({"channel_type": original["channel_type"]} if "channel_type" in original else {}),
        "ts": edited_ts,
        "event_ts": edited_ts,
        "message": {
            **before,
            "text": text,
            "edited": {"user": editor, "ts": edited_ts},
            **({"subtype": subtype} if subtype else {}),
        },
        "previous_message": before,
    }


ALL_SCOPES = (
    "chat:write",
    "app_mentions:read",
    "channels:history",
    "groups:history",
    "im:history",
    "mpim:history",
    "reactions:write",
    "files:read",
    "files:write",
    "assistant:write",
    "users:read",
    "commands",
)


class FakeSlack:
    """See the module docstring. ``base_url`` ends with a slash, as the SDK requires."""

    def __init__(self, *, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock
        self._posts: dict[tuple[str, str], dict[str, Any]] = {}
        self.command_responses: list[tuple[str, dict[str, Any]]] = []
        """What was posted to slash commands' response URLs: (envelope id, body)."""
        self._buttons: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self.ephemerals: list[tuple[str, str]] = []
        """``chat.postEphemeral``: (the user shown it, its text), in order."""
        self._state = _State()
        self._errors: dict[str, deque[ScriptedError]] = defaultdict(deque)
        self._ts = itertools.count(1)
        self._ws: web.WebSocketResponse | None = None
        self._turn = 0
        self.deliveries: list[tuple[str, str, int]] = []
        """``deliver_event``'s attempts: (event id, connection's via, retry attempt)."""
        self._ws_ready = asyncio.Event()
        self.sockets: list[web.WebSocketResponse] = []
        """The open Socket Mode connections, oldest first (Slack spreads events over them)."""
        self.socket_via: dict[web.WebSocketResponse, str] = {}
        """The path prefix each open connection's URL was asked through (``node_url``)."""
        self._runner: web.AppRunner | None = None
        self._outage: Outage | None = None
        self.port = 0
        self.replies: dict[str, list[dict[str, Any]]] = {}
        """``conversations.replies`` answers by ``thread_ts``."""
        self.history: dict[str, list[dict[str, Any]]] = {}
        """Messages people posted in each channel, as ``conversations.history`` lists them
        beside the bot's (a reply in a thread only when it is a ``thread_broadcast``)."""
        self.messages: dict[tuple[str, str], str] = {}
        """The bot's messages by (channel, ts), as last updated; deleted ones are gone."""
        self._private_files: dict[str, tuple[bytes, str]] = {}
        self.file_downloads: list[tuple[str, str]] = []
        """(path, bearer token sent) of every file fetch."""
        self.uploaded: dict[str, bytes] = {}
        """Bytes posted to each upload URL, by file id."""
        self.upload_posts: list[str] = []
        """The file ids of every post to an upload URL, failed ones included."""
        self.shared_files: list[SharedFile] = []
        self._upload_failures: deque[int] = deque()
        self._file_ids = itertools.count(1)
        self.users: dict[str, dict[str, Any]] = {}
        """``users.info`` answers: each user's profile by id (others: ``user_not_found``)."""
        self.admins: set[str] = set()
        """Users ``users.info`` says are workspace admins (``is_admin``)."""
        self.workspace_owners: set[str] = set()
        """Users ``users.info`` says own the workspace (``is_owner``)."""
        self.assistant_threads: set[tuple[str, str]] = set()
        """(channel, thread_ts) of the assistant threads (a DM with the app as an agent):
        the only threads ``assistant.threads.setStatus`` accepts."""
        self.statuses: dict[tuple[str, str], str] = {}
        """The status each assistant thread shows now (cleared by '' or by a reply)."""
        self.status_history: list[tuple[str, str, str]] = []
        """Every status set, in order: (channel, thread_ts, status)."""
        self.reactions: dict[tuple[str, str], list[str]] = {}
        """The bot's reactions (emoji names) on each message, by (channel, ts)."""
        self.streaming: set[tuple[str, str]] = set()
        """The (channel, ts) of the streamed messages not stopped yet."""
        self.scopes: list[str] | None = list(ALL_SCOPES)
        """What ``X-OAuth-Scopes`` lists on every answer (None: the header is left out)."""
        self.post_limit: SlidingLimit | None = None
        """Slack's limit on ``chat.postMessage`` per channel, when enforced."""
        self.rate_limited: list[ApiCall] = []
        """The calls answered 429 for going past ``post_limit``."""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    def node_url(self, name: str) -> str:
        """A base URL serving the same API under the path prefix ``/name``: its calls are
        recorded with ``via=name``, and so is the Socket Mode connection it opens."""
        return f"http://127.0.0.1:{self.port}/{name}/api/"

    @property
    def calls(self) -> list[ApiCall]:
        return list(self._state.calls)

    def calls_to(self, method: str) -> list[ApiCall]:
        return [call for call in self._state.calls if call.method == method]

    @property
    def acks(self) -> list[str]:
        """Envelope ids acknowledged by the Socket Mode client, in order."""
        return list(self._state.acks)

    @property
    def connections(self) -> int:
        """How many Socket Mode connections were opened."""
        return self._state.connections

    def fail_next(
        self,
        method: str,
        error: str,
        *,
        status: int = 200,
        retry_after: int | None = None,
        times: int = 1,
        land: bool = False,
    ) -> None:
        """Script the next ``times`` calls of ``method`` to fail (queued per method)."""
        for _ in range(times):
            self._errors[method].append(ScriptedError(error, status, retry_after, land))

    def reset_next(self, method: str, *, times: int = 1, land: bool = False) -> None:
        """Reset the connection of the next ``times`` calls of ``method``."""
        for _ in range(times):
            self._errors[method].append(ScriptedError("", land=land, reset=True))

    def limit_like_slack(self) -> None:
        """From now on, answer 429 past Slack's posting limit (see the module docstring)."""
        self.post_limit = SlidingLimit(3, 3.0)

    def fail_upload(self, status: int = 500, *, times: int = 1) -> None:
        """Answer the next ``times`` posts to an upload URL with ``status``."""
        self._upload_failures.extend([status] * times)

    def posted(self, channel: str) -> list[dict[str, Any]]:
        """The bot's messages in ``channel`` (threads too) as Slack keeps them, oldest first."""
        return [
            {**message, "text": self.messages[key]}
            for key, message in sorted(self._posts.items())
            if key[0] == channel and key in self.messages
        ]

    def visible(self, channel: str) -> list[str]:
        """The texts of the bot's messages in ``channel`` as they show now, oldest first."""
        return [text for (chat, _), text in sorted(self.messages.items()) if chat == channel]

    # --- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> FakeSlack:
        app = web.Application()
        app.router.add_get("/link/", self._socket)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_route("*", "/{via}/api/{method}", self._api)
        app.router.add_get("/files-pri/{path:.*}", self._file)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_post("/commands/{envelope_id}", self._command_response)
        self._runner, self.port = await serve(app)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for ws in list(self.sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- files --------------------------------------------------------------------------------

    def add_file(
        self, data: bytes, *, name: str, mimetype: str, token: str, **extra: Any
    ) -> dict[str, Any]:
        """Keep ``data`` for fetches with ``token``; returns the file object for an event."""
        file_id = f"F{len(self._private_files) + 1:04d}"
        path = f"{TEAM_ID}-{file_id}/{name}"
        self._private_files[path] = (data, token)
        url = f"http://127.0.0.1:{self.port}/files-pri/{path}"
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": name.rsplit(".", 1)[-1],
            "size": len(data),
            "url_private": url,
            "url_private_download": f"{url}?download=1",
            **extra,
        }

    async def _file(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        self.file_downloads.append((path, token))
        found = self._private_files.get(path)
        if found is None:
            return web.Response(status=404, text="not found")
        data, wanted = found
        if token != wanted:
            return web.Response(text="<html>Sign in to Slack</html>", content_type="text/html")
        return web.Response(body=data, content_type="application/octet-stream")

    # --- Web API ------------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            if request.content_type == "application/json":
                args.update(await request.json())
            else:
                args.update(await request.post())
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        via = request.match_info.get("via", "")
        call = ApiCall(method, request.method, token, args, via)
        self._state.calls.append(call)
        if self._outage is not None and self._outage.active:
            return reset(request)
        if self.post_limit is not None and method == "chat.postMessage":
            channel, now = str(args.get("channel", "")), time.monotonic()
            wait = self.post_limit.wait(channel, now)
            if wait > 0:
                self.rate_limited.append(call)
                headers = {**self._scope_header(), "Retry-After": str(retry_seconds(wait))}
                body = {"ok": False, "error": "ratelimited"}
                return web.json_response(body, status=429, headers=headers)
            self.post_limit.count_call(channel, now)
        if self._errors[method]:
            scripted = self._errors[method].popleft()
            if scripted.land:
                self._answer(method, args, request)
            if scripted.reset:
                return reset(request)
            headers = self._scope_header()
            if scripted.retry_after is not None:
                headers["Retry-After"] = str(scripted.retry_after)
            return web.json_response(
                {"ok": False, "error": scripted.error}, status=scripted.status, headers=headers
            )
        return web.json_response(self._answer(method, args, request), headers=self._scope_header())

    def _scope_header(self) -> dict[str, str]:
        return {} if self.scopes is None else {"X-OAuth-Scopes": ",".join(self.scopes)}

    def _answer(self, method: str, args: dict[str, Any], request: web.Request) -> dict[str, Any]:
        if method == "auth.test":
            return {
                "ok": True,
                "url": "https://fake.slack.com/",
                "team": "Fake",
                "team_id": TEAM_ID,
                "user": "botd",
                "user_id": BOT_USER_ID,
                "bot_id": BOT_ID,
            }
        if method == "apps.connections.open":
            via = request.match_info.get("via", "")
            url = f"ws://127.0.0.1:{self.port}/link/?ticket={uuid.uuid4()}&via={via}"
            return {"ok": True, "url": url}
        if method == "chat.postMessage":
            return self._post_message(args)
        if method == "chat.postEphemeral":
            self.ephemerals.append((str(args.get("user")), str(args.get("text"))))
            return {"ok": True, "message_ts": "1700000000.999999"}
        if method in ("chat.startStream", "chat.appendStream", "chat.stopStream"):
            return self._stream(method, args)
        if method == "chat.update":
            where = (str(args.get("channel")), str(args.get("ts")))
            self.messages[where] = str(args.get("text"))
            if where in self._posts:
                self._posts[where]["blocks"] = _blocks(args)
            return {"ok": True, "channel": args.get("channel"), "ts": args.get("ts")}
        if method == "chat.delete":
            if self.messages.pop((str(args.get("channel")), str(args.get("ts"))), None) is None:
                return {"ok": False, "error": "message_not_found"}
            return {"ok": True, "channel": args.get("channel"), "ts": args.get("ts")}
        if method == "conversations.replies":
            return self._replies(args)
        if method == "conversations.history":
            return self._history(args)
        if method in ("files.getUploadURLExternal", "files.completeUploadExternal"):
            return self._shared_file_call(method, args)
        if method == "assistant.threads.setStatus":
            return self._set_status(args)
        if method in ("reactions.add", "reactions.remove"):
            return self._reaction(method, args)
        if method == "users.info":
            profile = self.users.get(str(args.get("user")))
            if profile is None:
                return {"ok": False, "error": "user_not_found"}
            who = str(args.get("user"))
            found: dict[str, Any] = {"id": who, "profile": profile}
            found |= {"is_admin": who in self.admins, "is_owner": who in self.workspace_owners}
            return {"ok": True, "user": found}
        return {"ok": False, "error": "unknown_method"}

    def _set_status(self, args: dict[str, Any]) -> dict[str, Any]:
        """``assistant.threads.setStatus``: refused as Slack does without ``assistant:write``
        (``missing_scope``) and outside an assistant thread (``invalid_thread_ts``)."""
        if self.scopes is not None and "assistant:write" not in self.scopes:
            return {
                "ok": False,
                "error": "missing_scope",
                "needed": "assistant:write",
                "provided": ",".join(self.scopes),
            }
        thread = (str(args.get("channel_id")), str(args.get("thread_ts")))
        if thread not in self.assistant_threads:
            return {"ok": False, "error": "invalid_thread_ts"}
        status = str(args.get("status", ""))
        self.status_history.append((thread[0], thread[1], status))
        if status:
            self.statuses[thread] = status
        else:
            self.statuses.pop(thread, None)
        return {"ok": True}

    def _reaction(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        """``reactions.add``/``remove`` of the bot's own reaction, with Slack's refusals."""
        if self.scopes is not None and "reactions:write" not in self.scopes:
            provided = ",".join(self.scopes)
            return {"ok": False, "error": "missing_scope", "needed": "reactions:write",
                    "provided": provided}  # fmt: skip
        name = str(args.get("name") or "")
        if not re.fullmatch(r"[a-z0-9_+'-]+", name):
            return {"ok": False, "error": "invalid_name"}
        names = self.reactions.setdefault(
            (str(args.get("channel")), str(args.get("timestamp"))), []
        )
        if method == "reactions.add":
            if name in names:
                return {"ok": False, "error": "already_reacted"}
            names.append(name)
        elif name not in names:
            return {"ok": False, "error": "no_reaction"}
        else:
            names.remove(name)
        return {"ok": True}

    def _post_message(self, args: dict[str, Any]) -> dict[str, Any]:
        base = 1700000000 if self._clock is None else int(self._clock())
        ts = f"{base}.{next(self._ts):06d}"
        channel = str(args.get("channel"))
        self.messages[(channel, ts)] = str(args.get("text"))
        message: dict[str, Any] = {
            "type": "message",
            "user": BOT_USER_ID,
            "bot_id": BOT_ID,
            "ts": ts,
        }
        if args.get("thread_ts"):
            message["thread_ts"] = str(args["thread_ts"])
            self.statuses.pop((channel, str(args["thread_ts"])), None)  # a reply clears it
        meta = args.get("metadata")
        if isinstance(meta, str):  # a form body carries it as JSON
            meta = json.loads(meta)
        if isinstance(meta, dict):
            message["metadata"] = meta
        if blocks := _blocks(args):
            message["blocks"] = blocks
            self._buttons[(channel, ts)] = {
                element["action_id"]: element
                for block in blocks
                if block.get("type") == "actions"
                for element in block["elements"]
            }
        self._posts[(channel, ts)] = message
        return {"ok": True, "channel": channel, "ts": ts, "message": {**message, "text": ""}}

    def _stream(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        """Slack's streamed messages: one that starts in a thread (``invalid_arguments``
        without one; outside a DM it needs its recipient) and grows by what each append and
        the stop add; one no longer streaming is ``message_not_in_streaming_state``."""
        channel = str(args.get("channel"))
        markdown = str(args.get("markdown_text") or "")
        if method == "chat.startStream":
            if not args.get("thread_ts"):
                return {"ok": False, "error": "invalid_arguments"}
            if not channel.startswith("D") and not args.get("recipient_team_id"):
                return {"ok": False, "error": "missing_recipient_team_id"}
            if not channel.startswith("D") and not args.get("recipient_user_id"):
                return {"ok": False, "error": "missing_recipient_user_id"}
            answer = self._post_message({**args, "text": markdown})
            self.streaming.add((channel, answer["ts"]))
            return {"ok": True, "channel": channel, "ts": answer["ts"]}
        key = (channel, str(args.get("ts")))
        if key not in self.messages:
            return {"ok": False, "error": "message_not_found"}
        if key not in self.streaming:
            return {"ok": False, "error": "message_not_in_streaming_state"}
        self.messages[key] += markdown
        if method == "chat.stopStream":
            self.streaming.discard(key)
            return {"ok": True, "channel": channel, "ts": key[1], "message": {"ts": key[1]}}
        return {"ok": True, "channel": channel, "ts": key[1]}

    def _shown(self, message: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
        """``message`` as a read returns it: metadata only when asked for."""
        if str(args.get("include_all_metadata", "")).lower() in ("1", "true"):
            return message
        return {k: v for k, v in message.items() if k != "metadata"}

    def _history(self, args: dict[str, Any]) -> dict[str, Any]:
        """The channel's top-level messages (people's in ``history`` and the bot's), newest
        first, paged like ``_replies``."""
        channel = str(args.get("channel"))
        messages = [
            self._shown(m, args)
            for m in [*self.history.get(channel, []), *self.posted(channel)]
            if m.get("thread_ts") in (None, m["ts"]) or m.get("subtype") == "thread_broadcast"
        ]
        messages.sort(key=lambda m: float(m["ts"]))
        return self._page(list(reversed(messages)), args)

    def _replies(self, args: dict[str, Any]) -> dict[str, Any]:
        """A thread, oldest first, as Slack pages it: only messages before ``latest`` and
        after ``oldest`` (and at them with ``inclusive``), ``limit`` per page, the next page
        by ``cursor``. The thread is ``replies``' messages and the bot's posts in it."""
        thread = str(args.get("ts"))
        channel = str(args.get("channel"))
        posted = [
            self._shown(m, args)
            for m in self.posted(channel)
            if m.get("thread_ts") == thread or m["ts"] == thread
        ]
        messages = sorted([*self.replies.get(thread, []), *posted], key=lambda m: float(m["ts"]))
        return self._page(messages, args)

    def _page(self, messages: list[dict[str, Any]], args: dict[str, Any]) -> dict[str, Any]:
        latest = args.get("latest")
        if latest is not None:
            inclusive = str(args.get("inclusive", "")).lower() in ("1", "true")
            cut = float(latest)
            messages = [
                m for m in messages if float(m["ts"]) < cut or (inclusive and float(m["ts"]) == cut)
            ]
        oldest = args.get("oldest")
        if oldest is not None:
            inclusive = str(args.get("inclusive", "")).lower() in ("1", "true")
            floor = float(oldest)
            messages = [
                m
                for m in messages
                if float(m["ts"]) > floor or (inclusive and float(m["ts"]) == floor)
            ]
        start = int(args.get("cursor") or 0)
        limit = int(args.get("limit") or 1000)
        page = messages[start : start + limit]
        more = start + limit < len(messages)
        answer: dict[str, Any] = {"ok": True, "messages": page, "has_more": more}
        answer["response_metadata"] = {"next_cursor": str(start + limit) if more else ""}
        return answer

    async def _upload(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        data = await request.read()
        self.upload_posts.append(file_id)
        if self._upload_failures:
            return web.Response(status=self._upload_failures.popleft(), text="upload failed")
        self.uploaded[file_id] = data
        return web.Response(text=f"OK - {len(data)}")

    def _shared_file_call(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        if method == "files.getUploadURLExternal":
            file_id = f"F{next(self._file_ids):04d}"
            url = f"http://127.0.0.1:{self.port}/upload/{file_id}"
            return {"ok": True, "upload_url": url, "file_id": file_id}
        files = json.loads(str(args.get("files", "[]")))
        shared = []
        for entry in files:
            file_id = str(entry.get("id"))
            if file_id not in self.uploaded:
                return {"ok": False, "error": "file_not_found"}
            self.shared_files.append(
                SharedFile(
                    file_id,
                    str(entry.get("title", "")),
                    str(args.get("channel_id")),
                    args.get("initial_comment"),
                    args.get("thread_ts"),
                    self.uploaded[file_id],
                )
            )
            shared.append({"id": file_id, "title": entry.get("title", "")})
        return {"ok": True, "files": shared}

    # --- Socket Mode --------------------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        if self._outage is not None and self._outage.active:
            return reset(request)
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._ws = ws
        self.sockets.append(ws)
        self.socket_via[ws] = request.query.get("via", "")
        self._state.connections += 1
        hello = {"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A0001"}}
        await ws.send_str(json.dumps(hello))
        self._ws_ready.set()
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                data = json.loads(message.data)
                if "envelope_id" in data:
                    self._state.acks.append(data["envelope_id"])
                    self._state.ack_payloads[data["envelope_id"]] = data.get("payload")
        self.sockets.remove(ws)
        del self.socket_via[ws]
        if self._ws is ws:  # the newest connection still open takes its place, if any
            self._ws = self.sockets[-1] if self.sockets else None
            if self._ws is None:
                self._ws_ready.clear()
        return ws

    async def deliver_event(
        self, body: dict[str, Any], *, ack_timeout: float = 1.0, retries: int = 3
    ) -> bool:
        """Deliver an ``events_api`` event as Slack does to an app with several Socket Mode
        connections: each attempt over the next open connection in turn, in an envelope of its
        own; one not acknowledged within ``ack_timeout`` is sent again (``retry_attempt``
        counting, ``retry_reason`` timeout), at most ``retries`` times. Whether one attempt
        was acknowledged; ``deliveries`` records each (event id, connection's via, attempt)."""
        event_id = str(body.get("event_id") or "")
        for attempt in range(retries + 1):
            await self.wait_socket(HANG_GUARD)
            ws = self.sockets[self._turn % len(self.sockets)]
            self._turn += 1
            self.deliveries.append((event_id, self.socket_via[ws], attempt))
            envelope_id = str(uuid.uuid4())
            with contextlib.suppress(ConnectionError):
                await self._send_envelope(ws, body, attempt, envelope_id)
            deadline = time.monotonic() + ack_timeout
            while time.monotonic() < deadline:
                if envelope_id in self._state.acks:
                    return True
                await asyncio.sleep(0.01)
        return False

    async def wait_socket(self, timeout: float = 10.0) -> None:
        """Wait until a Socket Mode client is connected."""
        await asyncio.wait_for(self._ws_ready.wait(), timeout)

    async def send_event(
        self,
        body: dict[str, Any],
        *,
        retry_attempt: int = 0,
        envelope_id: str | None = None,
        socket: int | None = None,
    ) -> str:
        """Push an ``events_api`` envelope over the socket (the newest, or ``sockets[socket]``:
        Slack sends each envelope over one of the app's connections, a retry maybe over
        another); returns its envelope id."""
        await self.wait_socket()
        ws = self._ws if socket is None else self.sockets[socket]
        assert ws is not None
        envelope_id = envelope_id or str(uuid.uuid4())
        await self._send_envelope(ws, body, retry_attempt, envelope_id)
        return envelope_id

    async def _send_envelope(
        self, ws: web.WebSocketResponse, body: dict[str, Any], retry_attempt: int, envelope_id: str
    ) -> None:
        envelope = {
            "envelope_id": envelope_id,
            "type": "events_api",
            "accepts_response_payload": False,
            "retry_attempt": retry_attempt,
            "retry_reason": "timeout" if retry_attempt else "",
            "payload": body,
        }
        await ws.send_str(json.dumps(envelope))

    async def send_press(
        self,
        channel: str,
        ts: str,
        action_id: str,
        *,
        user: str = "U1",
        action_ts: str | None = None,
        forged: tuple[str, str] | None = None,
    ) -> str:
        """Push the ``interactive`` envelope of a press of the button ``action_id`` under the
        bot's message ``ts`` (a ``block_actions`` payload, as Slack sends it over Socket
        Mode); the same ``action_ts`` again is a redelivery. ``forged``: a made-up button
        (label, value) instead, on any message of the bot's, as a hostile client or app
        with the signing secret could send it. Returns the envelope id."""
        await self.wait_socket()
        assert self._ws is not None
        message = {**self._posts[(channel, ts)], "text": self.messages[(channel, ts)]}
        # A client still showing the buttons (another user's, not yet refreshed) sends the
        # button as it was posted.
        if forged is not None:
            label, value = forged
            button = {"text": {"type": "plain_text", "text": label}, "value": value}
        else:
            button = self._buttons[(channel, ts)][action_id]
        envelope_id = str(uuid.uuid4())
        payload = {
            "type": "block_actions",
            "user": {
                "id": user,
                "username": f"name-{user}",
                "name": f"name-{user}",
                "team_id": TEAM_ID,
            },
            "api_app_id": "A0001",
            "token": "verification-token",
            "container": {
                "type": "message",
                "message_ts": ts,
                "channel_id": channel,
                "is_ephemeral": False,
            },
            "trigger_id": f"trigger-{envelope_id}",
            "team": {"id": TEAM_ID, "domain": "fake"},
            "channel": {"id": channel, "name": "general"},
            "message": message,
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": "b1",
                    "text": button["text"],
                    "value": button.get("value"),
                    "type": "button",
                    "action_ts": action_ts or f"{time.time():.6f}",
                }
            ],
        }
        envelope = {
            "envelope_id": envelope_id,
            "type": "interactive",
            "accepts_response_payload": False,
            "payload": payload,
        }
        await self._ws.send_str(json.dumps(envelope))
        return envelope_id

    async def send_slash_command(
        self,
        command: str,
        text: str = "",
        *,
        channel: str = "D1",
        user: str = "U1",
        trigger_id: str | None = None,
    ) -> str:
        """Push a ``slash_commands`` envelope, as Slack does when a user runs ``command``
        (``/botd``) with ``text`` in ``channel``; returns its envelope id."""
        await self.wait_socket()
        assert self._ws is not None
        envelope_id = str(uuid.uuid4())
        payload = {
            "token": "verification-token",
            "team_id": "T1",
            "channel_id": channel,
            "channel_name": "directmessage" if channel.startswith("D") else "general",
            "user_id": user,
            "user_name": f"name-{user}",
            "command": command,
            "text": text,
            "api_app_id": "A0001",
            "response_url": f"http://127.0.0.1:{self.port}/commands/{envelope_id}",
            "trigger_id": trigger_id or f"trigger-{envelope_id}",
        }
        envelope = {
            "envelope_id": envelope_id,
            "type": "slash_commands",
            "accepts_response_payload": True,
            "payload": payload,
        }
        await self._ws.send_str(json.dumps(envelope))
        return envelope_id

    async def _command_response(self, request: web.Request) -> web.Response:
        """A message posted to a slash command's ``response_url``."""
        self.command_responses.append((request.match_info["envelope_id"], await request.json()))
        return web.Response(text="ok")

    def ack_payload(self, envelope_id: str) -> Any:
        """What the client sent back with its ack of ``envelope_id`` (None: nothing)."""
        return self._state.ack_payloads.get(envelope_id)

    async def outage(self) -> Outage:
        """Take Slack away until ``end()`` is awaited: new connections are refused, requests
        on open ones reset, and the Socket Mode connection is closed (reconnecting fails)."""
        assert self._runner is not None
        self._outage = Outage(self._runner, self.port)
        await self._outage.begin()
        await self.drop_socket()
        return self._outage

    async def drop_socket(self) -> None:
        """Close the current Socket Mode connection from the server side."""
        ws = self._ws
        self._ws = None
        self._ws_ready.clear()
        if ws is not None:
            await ws.close()
