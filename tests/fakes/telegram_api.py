"""A loopback fake of the Telegram Bot API (``POST /bot<token>/<method>``), on aiohttp.

    async with FakeTelegramAPI(token="123:TEST") as fake:
        fake.push_text(777, "hello")                   # a DM update for getUpdates
        fake.fail_next("sendMessage", retry_after(1))   # script the next sendMessage to 429
        ...  # point the client at fake.base_url (``base_url(f"{fake.base_url}/bot")``)
        await fake.wait_for_call("sendMessage")
        fake.calls_to("sendMessage")[0].params["text"]

Bodies may be form-encoded, multipart or JSON; the nested fields PTB JSON-encodes inside a
form (``reply_parameters``, ``reaction``, ``entities``...) are decoded, so ``params`` holds
what the client meant. ``getUpdates`` long-polls a queue of updates and honours ``offset``,
``timeout`` and ``limit`` (1 to 100, default 100: one poll hands out up to that many pending
updates) like Telegram: updates below the offset are forgotten (confirmed), unless
``forget_confirmed`` is False, which simulates a crash before Telegram learned the
confirmation, so a poller starting from offset 0 would see everything again. Like Telegram,
a long poll still waiting when another ``getUpdates`` comes is ended with 409 "Conflict:
terminated by other getUpdates request" (``conflicts`` counts them): two processes polling
one token keep cutting each other off.

``sendMessage``/``editMessageText`` with ``parse_mode=HTML`` check the markup the way
Telegram does (only its tag subset, properly nested) and refuse it with Telegram's 400
"can't parse entities"; text longer than 4096 characters after parsing gets "message is too
long". Every request is recorded as a ``Call`` with the HTTP status it was answered with.

Faults: ``fail_next`` scripts error answers (``server_error()`` for a 5xx, ``retry_after()``
for a 429); ``reset_next`` drops the connection with a TCP reset (status 0 in ``calls``);
``land=True`` carries the call out before failing it, as a timeout after the request landed
would; ``outage()`` takes the whole server away until ``end()``.

Telegram's limits (``limit_like_telegram``): past them a call is answered 429 "Too Many
Requests: retry after N" with ``retry_after``, counted as Telegram counts (``RateLimits``):
every call but ``getUpdates`` against the token's 30 in any second, and a message posted (not
an edit, a reaction, a chat action or a draft) against its chat's window too: 20 in any
minute for a group (a negative id), 3 in any 3 seconds for a private chat (about one a second,
in short bursts). A call answered 429 is not counted. ``rate_limited`` lists those calls.

Files users send: ``push_file`` stores the bytes under a new ``file_id`` and queues a
message carrying them (a photo in two sizes, a document, a voice note, an audio file, a
video, with an optional caption); ``getFile`` answers with the file's path, and
``GET /file/bot<token>/<path>`` serves its bytes (``file_downloads`` lists the paths fetched);
with ``content_encoding`` the bytes go out as they are under that ``Content-Encoding`` (a
compressed body, or a hostile one).
``getFile`` can be failed like any method (``fail_next``); ``hold_downloads`` makes the file
server take each download and answer it only once the returned event is set (a slow or stuck
file server), counting the requests waiting in ``downloads_held``.

Webhook: ``setWebhook`` registers a URL (with its ``secret_token``); from then on the queued
updates are POSTed there one at a time, in order, as JSON with the
``X-Telegram-Bot-Api-Secret-Token`` header, and each is forgotten once answered 200; any other
answer (or no connection, or none within ``webhook_timeout``) is kept as
``last_error_message`` in Telegram's words and the update is POSTed again after
``webhook_retry_delay`` seconds, as Telegram does. ``webhook_posts``
lists every POST as (update id, status; 0: no connection). ``getUpdates`` is refused with 409
while a webhook is set; ``deleteWebhook`` ends the deliveries (``drop_pending_updates``
forgets the queue). ``post_to_webhook`` makes one POST as anyone could, with any secret.
``webhook_forward``, when set, is where the POSTs really go: the reverse proxy in front of
botd that the public (https) URL reaches.

Several botd processes on one token: ``node_url(name)`` is a base URL of its own for each
(the same API under the path prefix ``/name``), and every call is recorded with the prefix it
came through (``Call.via``), so a test knows which process made each call. Any other prefix is
not found (404), as on a wrong URL.

Admins: ``getChatAdministrators`` answers from ``chat_admins`` (a group's creator and
administrators by user id, the bot among them) and refuses a private chat as Telegram does.

Drafts: ``sendMessageDraft`` takes a private chat's draft (``drafts`` keeps every text,
``draft_showing`` what the chat shows: the last one, until a message is posted there) and
refuses any other chat with Telegram's 400 "TEXTDRAFT_PEER_INVALID"; ``fail_next`` makes it
refuse otherwise.

Uploads: ``sendPhoto``, ``sendDocument``, ``sendVoice``, ``sendAudio`` and ``sendVideo`` take
the file as a multipart part (read into an ``UploadedFile`` in ``params``) and post a message
with its caption; ``uploads`` lists the files that went through, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http import HTTPStatus
from typing import Any, Self

import aiohttp
from aiohttp import web
from telegram.constants import ReactionEmoji

from .faults import Outage, reset
from .limits import SlidingLimit, retry_seconds
from .loopback import serve

BOT_ID = 999_000
REACTION_EMOJI = frozenset(emoji.value for emoji in ReactionEmoji)
"""The emoji a bot may react with (Telegram's list, as python-telegram-bot keeps it)."""
BOT_USERNAME = "botd_test_bot"

# Fields PTB JSON-encodes inside a form body.
_NESTED = frozenset(
    {
        "allowed_updates",
        "caption_entities",
        "commands",
        "entities",
        "link_preview_options",
        "media",
        "reaction",
        "reply_markup",
        "reply_parameters",
    }
)
_ALLOWED_TAGS = frozenset(
    {
        "a",
        "b",
        "blockquote",
        "code",
        "del",
        "em",
        "i",
        "ins",
        "pre",
        "s",
        "span",
        "strike",
        "strong",
        "tg-emoji",
        "tg-spoiler",
        "u",
    }
)
TEXT_LIMIT = 4096
UPDATES_LIMIT = 100
"""The most updates one ``getUpdates`` hands out (Telegram's cap and default ``limit``)."""


@dataclass(frozen=True)
class ScriptedError:
    """An error answer: HTTP status, Telegram's description, optional ``parameters``."""

    status: int
    description: str
    parameters: dict[str, Any] | None = None


def cant_parse_entities() -> ScriptedError:
    return ScriptedError(
        400, 'Bad Request: can\'t parse entities: Unsupported start tag "foo" at byte offset 0'
    )


def server_error(status: int = 500) -> ScriptedError:
    phrases = {500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}
    return ScriptedError(status, phrases.get(status, "Server Error"))


def retry_after(seconds: int = 1) -> ScriptedError:
    return ScriptedError(429, f"Too Many Requests: retry after {seconds}", {"retry_after": seconds})


def conflict() -> ScriptedError:
    return ScriptedError(
        409,
        "Conflict: terminated by other getUpdates request; "
        "make sure that only one bot instance is running",
    )


@dataclass(frozen=True)
class UploadedFile:
    """A file part of a multipart request: its name, media type and bytes."""

    filename: str
    content_type: str
    data: bytes


@dataclass(frozen=True)
class Upload:
    """A file the bot sent: the method, the chat, the file and its caption."""

    method: str
    chat_id: int
    file: UploadedFile
    caption: str


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    status: int = 200
    via: str = ""
    """The path prefix the call came through (``node_url``; empty: ``base_url``)."""
    at: float = field(default_factory=time.monotonic)
    """When it came (monotonic seconds)."""


@dataclass
class _Script:
    error: ScriptedError | None  # None: reset the connection
    remaining: int
    land: bool = False
    chat_id: int | None = None  # None: any chat

    def applies(self, params: dict[str, Any]) -> bool:
        return self.chat_id is None or str(params.get("chat_id")) == str(self.chat_id)


class _MarkupCheck(HTMLParser):
    """Telegram's HTML parse_mode rules, roughly: its tag subset, nested properly."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.text: list[str] = []
        self.error: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.error is None and tag not in _ALLOWED_TAGS:
            self.error = f'Unsupported start tag "{tag}" at byte offset {self.getpos()[1]}'
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self.error is None and (not self.stack or self.stack[-1] != tag):
            self.error = f"Unexpected end tag at byte offset {self.getpos()[1]}"
        if self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse_html(markup: str) -> tuple[str, str | None]:
    """The visible text of Telegram HTML, and the parse error Telegram would report, if any."""
    checker = _MarkupCheck()
    checker.feed(markup)
    checker.close()
    error = checker.error
    if error is None and checker.stack:
        error = f'Can\'t find end tag corresponding to start tag "{checker.stack[-1]}"'
    return "".join(checker.text), error


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


_COMMAND = re.compile(r"/[A-Za-z0-9_]+(?:@[A-Za-z0-9_]+)?")


def mention_entities(text: str) -> list[dict[str, Any]]:
    """The entities Telegram would attach: a leading ``/command[@bot]``, ``@name`` mentions."""
    entities = []
    i = 0
    if command := _COMMAND.match(text):
        entities.append({"type": "bot_command", "offset": 0, "length": command.end()})
        i = command.end()
    while (i := text.find("@", i)) >= 0:
        end = i + 1
        while end < len(text) and (text[end].isalnum() or text[end] == "_"):
            end += 1
        if end - i > 1 and (i == 0 or not text[i - 1].isalnum()):
            entities.append(
                {
                    "type": "mention",
                    "offset": _utf16_len(text[:i]),
                    "length": _utf16_len(text[i:end]),
                }
            )
        i = end
    return entities


def user(user_id: int, first_name: str = "Ada", username: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
    if username:
        found["username"] = username
    return found


# --- what a message may carry besides text and files (the Bot API's shapes) ------------------


def sticker(emoji: str | None, *, animated: bool = False, video: bool = False) -> dict[str, Any]:
    """A ``Sticker`` (its ``emoji``; ``animated``: a TGS, ``video``: a WEBM one)."""
    found: dict[str, Any] = {
        "file_id": "sticker-1",
        "file_unique_id": "usticker-1",
        "type": "regular",
        "width": 512,
        "height": 512,
        "is_animated": animated,
        "is_video": video,
        "set_name": "TestSet",
    }
    if emoji is not None:
        found["emoji"] = emoji
    return found


def location(latitude: float, longitude: float) -> dict[str, Any]:
    """A ``Location``."""
    return {"latitude": latitude, "longitude": longitude}


def venue(title: str, address: str, latitude: float, longitude: float) -> dict[str, Any]:
    """A ``Venue`` (a message with one carries its ``location`` too: ``push_message`` adds it)."""
    return {"location": location(latitude, longitude), "title": title, "address": address}


def contact(first_name: str, phone: str, last_name: str | None = None) -> dict[str, Any]:
    """A ``Contact``."""
    found: dict[str, Any] = {"phone_number": phone, "first_name": first_name}
    if last_name is not None:
        found["last_name"] = last_name
    return found


def poll(question: str, options: list[str], *, quiz: bool = False) -> dict[str, Any]:
    """A ``Poll`` nobody voted in yet (a quiz with its first option correct)."""
    found: dict[str, Any] = {
        "id": "poll-1",
        "question": question,
        "options": [
            {"persistent_id": f"option-{n}", "text": option, "voter_count": 0}
            for n, option in enumerate(options)
        ],
        "total_voter_count": 0,
        "is_closed": False,
        "is_anonymous": True,
        "type": "quiz" if quiz else "regular",
        "allows_multiple_answers": False,
        "allows_revoting": True,
        "members_only": False,
    }
    if quiz:
        found["correct_option_ids"] = [0]
    return found


def dice(emoji: str, value: int) -> dict[str, Any]:
    """A ``Dice`` as thrown."""
    return {"emoji": emoji, "value": value}


def from_user(sender: dict[str, Any], date: int) -> dict[str, Any]:
    """A ``MessageOriginUser``: forwarded from ``sender``, first sent at ``date``."""
    return {"type": "user", "date": date, "sender_user": sender}


def from_hidden_user(name: str, date: int) -> dict[str, Any]:
    """A ``MessageOriginHiddenUser``: forwarded from someone who hides their account."""
    return {"type": "hidden_user", "date": date, "sender_user_name": name}


def from_channel(chat_id: int, title: str, date: int, message_id: int = 1) -> dict[str, Any]:
    """A ``MessageOriginChannel``: forwarded from a post of channel ``chat_id``."""
    chat = {"id": chat_id, "type": "channel", "title": title}
    return {"type": "channel", "date": date, "chat": chat, "message_id": message_id}


BOT_USER: dict[str, Any] = {
    "id": BOT_ID,
    "is_bot": True,
    "first_name": "Botd",
    "username": BOT_USERNAME,
}


@dataclass
class RateLimits:
    """Telegram's limits as the fake counts them (see the module docstring): (count,
    seconds) per token, per group and per private chat."""

    token: tuple[int, float] = (30, 1.0)
    group: tuple[int, float] = (20, 60.0)
    chat: tuple[int, float] = (3, 3.0)

    def __post_init__(self) -> None:
        self._token = SlidingLimit(*self.token)
        self._group = SlidingLimit(*self.group)
        self._chat = SlidingLimit(*self.chat)

    def refuse(self, method: str, params: dict[str, Any], now: float) -> ScriptedError | None:
        """A 429 when a call of ``method`` now would go past a limit; else None, and the
        call is counted."""
        windows = [(self._token, "token")]
        chat = params.get("chat_id")
        counted = method.startswith(("send", "copy", "forward"))
        if chat is not None and counted and method not in _NOT_MESSAGES:
            group = str(chat).startswith(("-", "@"))
            windows.append((self._group if group else self._chat, f"chat:{chat}"))
        wait = max(limit.wait(key, now) for limit, key in windows)
        if wait > 0:
            return retry_after(retry_seconds(wait))
        for limit, key in windows:
            limit.count_call(key, now)
        return None


_NOT_MESSAGES = frozenset({"sendChatAction", "sendMessageDraft", "setMessageReaction"})


class FakeTelegramAPI:
    """See the module docstring."""

    def __init__(
        self, token: str = "123456:TEST-TOKEN", *, port: int = 0, updates_before: int = 0
    ) -> None:
        """``port``: where to listen (0: any free port); ``updates_before``: how many updates
        the bot was given before (by an earlier server: a botd's saved offset is past them),
        so the first one queued here has the next id."""
        self.stalls = 0
        self.token = token
        self.calls: list[Call] = []
        self.forget_confirmed = True
        self.webhook_url = ""
        self.my_commands: list[dict[str, Any]] = []
        """The bot's command menu (``setMyCommands``), as the bot would show it."""
        """What ``getWebhookInfo`` reports as set (empty: none, so polling works)."""
        self.can_read_all_group_messages = False
        """``getMe``'s flag: False while privacy mode is on (BotFather's default)."""
        self.chat_admins: dict[int, list[int]] = {}
        """``getChatAdministrators`` answers: each group's administrators by user id, its
        creator first (a chat not listed has the bot alone; a private chat is refused)."""
        self._updates: list[dict[str, Any]] = []
        self._vias: set[str] = set()  # the prefixes handed out by node_url
        self._polls = 0  # getUpdates requests so far: a waiting one ends when another comes
        self._next_update_id = updates_before + 1
        self._next_message_id: dict[int, int] = {}
        self._chats: dict[int, dict[str, Any]] = {}
        self._sent: dict[tuple[int, int], dict[str, Any]] = {}
        self._scripts: dict[str, list[_Script]] = {}
        self._changed = asyncio.Event()
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._outage: Outage | None = None
        self.port = port
        self._files: dict[str, tuple[str, bytes]] = {}
        self._file_encodings: dict[str, str] = {}  # path -> Content-Encoding it is served with
        self.file_downloads: list[str] = []
        """Paths of the files the bot downloaded, in order."""
        self.downloads_held: list[str] = []
        """Paths of the downloads held (``hold_downloads``), in the order they came."""
        self._download_gate: asyncio.Event | None = None
        self.uploads: list[Upload] = []
        self.reactions: dict[tuple[int, int], str] = {}
        """The bot's reaction on each message, by (chat id, message id)."""
        self.refuse_reactions: str | None = None
        """Telegram's words refusing every ``setMessageReaction`` (a chat that allows no
        reactions: "Bad Request: REACTION_INVALID")."""
        self.webhook_secret = ""
        self.webhook_max_connections = 0
        self.webhook_retry_delay = 0.05
        """Seconds before an update the webhook did not take is POSTed again."""
        self.webhook_timeout = 60.0
        """Seconds a webhook POST may take before it counts as failed (and is made again)."""
        self.webhook_posts: list[tuple[int, int]] = []
        """Every POST to the webhook: (update id, HTTP status; 0 when no connection)."""
        self.last_error_message = ""
        self.webhook_forward: str | None = None
        """Where the POSTs go instead of the URL set (None: to it)."""
        self._webhook_task: asyncio.Task[None] | None = None
        self.conflicts = 0
        """Long polls ended with 409 because another one came (see ``getUpdates``)."""
        self._next_query_id = 0
        self.allowed_updates: list[str] = []
        """The update kinds the last ``getUpdates`` asked for ([]: Telegram's default)."""
        self.answered_queries: dict[str, str | None] = {}
        """``answerCallbackQuery``: each query answered, with the text shown (None: none)."""
        self.drafts: dict[int, list[str]] = {}
        """Every draft text sent to each chat (``sendMessageDraft``), in order."""
        self._drafting: dict[int, str] = {}
        self.limits: RateLimits | None = None
        """Telegram's limits, when enforced (``limit_like_telegram``)."""
        self.rate_limited: list[Call] = []
        """The calls answered 429 for going past ``limits``."""

    @property
    def base_url(self) -> str:
        """What the adapter takes as ``api_base_url``."""
        return f"http://127.0.0.1:{self.port}"

    def node_url(self, name: str) -> str:
        """An ``api_base_url`` that serves the same bot under the path prefix ``/name``, so
        each call made through it is recorded with ``via=name``: which of several botd
        processes made it."""
        self._vias.add(name)
        return f"{self.base_url}/{name}"

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_post("/bot{token}/{method}", self._handle)
        app.router.add_post("/{via}/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.*}", self._file)
        app.router.add_get("/{via}/file/bot{token}/{path:.*}", self._file)
        self._runner, self.port = await serve(app, self.port, shutdown_timeout=1)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing.set()
        await self._stop_webhook()
        if self._download_gate is not None:
            self._download_gate.set()  # held downloads end with the server
        self._notify()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- scripting ----------------------------------------------------------------------------

    def limit_like_telegram(self, limits: RateLimits | None = None) -> RateLimits:
        """From now on, answer 429 past Telegram's limits (see the module docstring)."""
        self.limits = limits or RateLimits()
        return self.limits

    def stall_next_polls(self, times: int = 1) -> None:
        """The next ``times`` getUpdates requests are held open and never answered."""
        self.stalls = times

    def hold_downloads(self) -> asyncio.Event:
        """Hold every file download from now on until the returned event is set."""
        self._download_gate = asyncio.Event()
        return self._download_gate

    def fail_next(
        self,
        method: str,
        error: ScriptedError,
        *,
        times: int = 1,
        land: bool = False,
        chat_id: int | None = None,
    ) -> None:
        """Answer the next ``times`` calls of ``method`` (to ``chat_id`` only, if given) with
        ``error`` (after carrying each out, with ``land``)."""
        self._scripts.setdefault(method, []).append(_Script(error, times, land, chat_id))

    def reset_next(self, method: str, *, times: int = 1, land: bool = False) -> None:
        """Reset the connection of the next ``times`` calls of ``method`` instead of answering
        (after carrying each out, with ``land``)."""
        self._scripts.setdefault(method, []).append(_Script(None, times, land))

    def clear_faults(self) -> None:
        """Forget every scripted failure not yet used."""
        self._scripts.clear()

    async def outage(self) -> Outage:
        """Take the server away (connections refused or reset) until ``end()`` is awaited."""
        assert self._runner is not None
        self._outage = Outage(self._runner, self.port)
        await self._outage.begin()
        return self._outage

    def chat(
        self, chat_id: int, *, chat_type: str | None = None, is_forum: bool = False
    ) -> dict[str, Any]:
        """A chat object (private for positive ids, a supergroup otherwise), remembered."""
        if chat_id not in self._chats or chat_type is not None or is_forum:
            kind = chat_type or ("private" if chat_id > 0 else "supergroup")
            found: dict[str, Any] = {"id": chat_id, "type": kind}
            if kind == "private":
                found["first_name"] = "Ada"
            else:
                found["title"] = f"Group {chat_id}"
            if is_forum:
                found["is_forum"] = True
            self._chats[chat_id] = found
        return self._chats[chat_id]

    def _new_message_id(self, chat_id: int) -> int:
        self._next_message_id[chat_id] = self._next_message_id.get(chat_id, 0) + 1
        return self._next_message_id[chat_id]

    def push_update(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue a raw update (its ``update_id`` is assigned) and wake long polls."""
        update = {"update_id": self._next_update_id, **update}
        self._next_update_id += 1
        self._updates.append(update)
        self._notify()
        return update

    def text_message(
        self,
        chat_id: int,
        text: str,
        *,
        sender: dict[str, Any] | None = None,
        chat_type: str | None = None,
        is_forum: bool = False,
        thread_id: int | None = None,
        reply_to: dict[str, Any] | None = None,
        quote: str | None = None,
        entities: list[dict[str, Any]] | None = None,
        message_id: int | None = None,
        date: int | None = None,
        forward_origin: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A text message as Telegram sends it (not queued: ``push_text`` queues one).
        ``@word`` mentions get entities.

        ``thread_id`` makes it a forum-topic message (``is_topic_message``); ``reply_to`` is a
        message dict (one the fake returned for a bot send, say); ``quote`` is the part of it
        the user selected to quote (a manual ``TextQuote``); ``date`` is when it was sent
        (Unix seconds; default now); ``forward_origin``: where it was forwarded from
        (``from_user``, ``from_channel``…).
        """
        chat = self.chat(chat_id, chat_type=chat_type, is_forum=is_forum)
        message: dict[str, Any] = {
            "message_id": message_id or self._new_message_id(chat_id),
            "date": int(time.time()) if date is None else date,
            "chat": chat,
            "from": sender or user(chat_id if chat_id > 0 else 4242),
            "text": text,
        }
        found_entities = mention_entities(text) if entities is None else entities
        if found_entities:
            message["entities"] = found_entities
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        if reply_to is not None:
            message["reply_to_message"] = reply_to
        if quote is not None:
            original = str((reply_to or {}).get("text") or (reply_to or {}).get("caption") or "")
            position = max(original.find(quote), 0)
            message["quote"] = {"text": quote, "position": position, "is_manual": True}
        if forward_origin is not None:
            message["forward_origin"] = forward_origin
        return message

    def push_text(self, chat_id: int, text: str, **options: Any) -> dict[str, Any]:
        """Queue a text message update (``text_message`` with ``options``); returns the
        message."""
        message = self.text_message(chat_id, text, **options)
        self.push_update({"message": message})
        return message

    def push_message(
        self,
        chat_id: int,
        content: dict[str, Any],
        *,
        sender: dict[str, Any] | None = None,
        chat_type: str | None = None,
        reply_to: dict[str, Any] | None = None,
        forward_origin: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Queue a message of any kind: ``content`` holds its kind's fields as Telegram sends
        them (``{"sticker": sticker("😀")}``, ``{"game": {...}}``; a venue's location is
        added); ``forward_origin``: where it was forwarded from (``from_user``…). Returns
        the message."""
        chat = self.chat(chat_id, chat_type=chat_type)
        message: dict[str, Any] = {
            "message_id": self._new_message_id(chat_id),
            "date": int(time.time()),
            "chat": chat,
            "from": sender or user(chat_id if chat_id > 0 else 4242),
            **content,
        }
        if "venue" in content:
            message["location"] = content["venue"]["location"]
        if reply_to is not None:
            message["reply_to_message"] = reply_to
        if forward_origin is not None:
            message["forward_origin"] = forward_origin
        self.push_update({"message": message})
        return message

    def push_press(
        self,
        message: dict[str, Any],
        data: str,
        *,
        sender: dict[str, Any] | None = None,
        query_id: str | None = None,
    ) -> dict[str, Any]:
        """Queue the ``callback_query`` update of a press of the inline button with callback
        ``data`` under the bot's ``message`` (as it shows now); returns the query. Pushing
        the returned query again (``push_update({"callback_query": q})``) is a redelivery."""
        self._next_query_id += 1
        chat_id = int(message["chat"]["id"])
        query: dict[str, Any] = {
            "id": query_id or f"q{self._next_query_id}",
            "from": sender or user(chat_id if chat_id > 0 else 4242),
            "message": dict(message),
            "chat_instance": f"ci{chat_id}",
            "data": data,
        }
        self.push_update({"callback_query": query})
        return query

    def keyboard(self, chat_id: int, message_id: int) -> list[list[dict[str, Any]]]:
        """The inline keyboard under the bot's message as it shows now ([]: none)."""
        markup = self._sent[(chat_id, message_id)].get("reply_markup") or {}
        return list(markup.get("inline_keyboard", []))

    def push_edit(self, message: dict[str, Any], text: str, *, edit_date: int) -> dict[str, Any]:
        """Queue the ``edited_message`` update of a user's message now reading ``text``
        (entities for its ``@word`` mentions, ``edit_date`` when it was edited)."""
        edited = {k: v for k, v in message.items() if k != "entities"}
        edited.update(text=text, edit_date=edit_date)
        if found := mention_entities(text):
            edited["entities"] = found
        self.push_update({"edited_message": edited})
        return edited

    def add_file(
        self, data: bytes, *, name: str = "file", content_encoding: str | None = None
    ) -> str:
        """Keep ``data`` as a file the bot may fetch (served with ``content_encoding`` when
        given); returns its ``file_id``."""
        file_id = f"file-{len(self._files) + 1}"
        path = f"documents/{file_id}-{name}"
        self._files[file_id] = (path, data)
        if content_encoding is not None:
            self._file_encodings[path] = content_encoding
        return file_id

    def push_file(
        self,
        chat_id: int,
        kind: str,
        data: bytes,
        *,
        caption: str | None = None,
        file_name: str | None = None,
        mime_type: str | None = None,
        declared_size: int | None = None,
        sender: dict[str, Any] | None = None,
        chat_type: str | None = None,
        album: str | None = None,
        content_encoding: str | None = None,
        reply_to: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Queue a message carrying ``data`` as ``kind`` (``photo``, ``document``,
        ``voice``, ``audio``, ``video``) with ``caption``; returns the message. ``album``:
        its ``media_group_id`` (the files of an album come as one message each);
        ``reply_to``: the message dict it replies to.

        A photo comes in two sizes, a small thumbnail first (other bytes) and ``data`` as the
        large one. ``declared_size`` is the size the message claims (default: the real one).
        ``content_encoding``: the file is served as it is with that ``Content-Encoding``.
        """
        chat = self.chat(chat_id, chat_type=chat_type)
        file_id = self.add_file(data, name=file_name or kind, content_encoding=content_encoding)
        described: dict[str, Any] = {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_size": len(data) if declared_size is None else declared_size,
        }
        if kind == "photo":
            small = self.add_file(b"\xff\xd8\xffthumbnail", name="thumb.jpg")
            thumb = {"file_id": small, "file_unique_id": f"u{small}", "file_size": 14}
            media: Any = [
                {**thumb, "width": 90, "height": 60},
                {**described, "width": 1280, "height": 853},
            ]
        else:
            media = dict(described)
            if file_name is not None:
                media["file_name"] = file_name
            if mime_type is not None:
                media["mime_type"] = mime_type
            if kind in ("voice", "audio", "video"):
                media["duration"] = 3
            if kind == "video":
                media.update(width=640, height=480)
        message: dict[str, Any] = {
            "message_id": self._new_message_id(chat_id),
            "date": int(time.time()),
            "chat": chat,
            "from": sender or user(chat_id if chat_id > 0 else 4242),
            kind: media,
        }
        if caption is not None:
            message["caption"] = caption
            found = mention_entities(caption)
            if found:
                message["caption_entities"] = found
        if album is not None:
            message["media_group_id"] = album
        if reply_to is not None:
            message["reply_to_message"] = reply_to
        self.push_update({"message": message})
        return message

    # --- inspection ---------------------------------------------------------------------------

    def calls_to(self, method: str, *, ok_only: bool = False) -> list[Call]:
        return [c for c in self.calls if c.method == method and (not ok_only or c.status == 200)]

    def sent_message(self, chat_id: int, message_id: int) -> dict[str, Any]:
        """A message the bot sent (as last edited)."""
        return self._sent[(chat_id, message_id)]

    async def wait_for_call(
        self, method: str, count: int = 1, *, ok_only: bool = False, timeout: float = 10
    ) -> list[Call]:
        """Wait (a hang guard, not a delay) until ``method`` was called ``count`` times."""

        def enough() -> bool:
            return len(self.calls_to(method, ok_only=ok_only)) >= count

        async with asyncio.timeout(timeout):
            await self._wait_until(enough)
        return self.calls_to(method, ok_only=ok_only)

    async def _wait_until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await self._changed.wait()

    def _notify(self) -> None:
        # Wake every waiter; each re-checks its condition against a fresh event.
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # --- the API ------------------------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            body = await request.json()
            return dict(body) if isinstance(body, dict) else {}
        params: dict[str, Any] = {}
        for key, value in (await request.post()).items():
            if isinstance(value, web.FileField):
                params[key] = UploadedFile(value.filename, value.content_type, value.file.read())
            elif isinstance(value, str) and key in _NESTED:
                params[key] = json.loads(value)
            else:
                params[key] = value
        return params

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await self._params(request)
        call = Call(method, params, via=request.match_info.get("via", ""))
        if call.via and call.via not in self._vias:
            raise web.HTTPNotFound()
        self.calls.append(call)
        try:
            if self._outage is not None and self._outage.active:
                call.status = 0
                return reset(request)
            if request.match_info["token"] != self.token:
                return self._error(call, ScriptedError(401, "Unauthorized"))
            if self.limits is not None and method != "getUpdates":
                refused = self.limits.refuse(method, params, time.monotonic())
                if refused is not None:
                    self.rate_limited.append(call)
                    return self._error(call, refused)
            handler = getattr(self, f"_api_{method}", None)
            scripts = self._scripts.get(method, [])
            script = next((s for s in scripts if s.applies(params)), None)
            if script is not None:
                script.remaining -= 1
                if script.remaining <= 0:
                    scripts.remove(script)
                if script.land and handler is not None:
                    await handler(params)
                if script.error is None:
                    call.status = 0
                    return reset(request)
                return self._error(call, script.error)
            if handler is None:
                return self._error(call, ScriptedError(404, "Not Found"))
            result = await handler(params)
            if isinstance(result, ScriptedError):
                return self._error(call, result)
            return web.json_response({"ok": True, "result": result})
        finally:
            self._notify()

    def _error(self, call: Call, error: ScriptedError) -> web.Response:
        call.status = error.status
        body: dict[str, Any] = {
            "ok": False,
            "error_code": error.status,
            "description": error.description,
        }
        if error.parameters:
            body["parameters"] = error.parameters
        return web.json_response(body, status=error.status)

    async def _api_getFile(self, params: dict[str, Any]) -> Any:
        found = self._files.get(str(params.get("file_id")))
        if found is None:
            return ScriptedError(400, "Bad Request: invalid file_id")
        path, data = found
        file_id = str(params["file_id"])
        return {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_size": len(data),
            "file_path": path,
        }

    async def _file(self, request: web.Request) -> web.StreamResponse:
        if request.match_info.get("via", "") not in {"", *self._vias}:
            raise web.HTTPNotFound()
        if request.match_info["token"] != self.token:
            return web.json_response({"ok": False, "error_code": 401}, status=401)
        path = request.match_info["path"]
        for known, data in self._files.values():
            if known == path:
                if self._download_gate is not None:
                    self.downloads_held.append(path)
                    self._notify()
                    await self._download_gate.wait()
                self.file_downloads.append(path)
                self._notify()
                encoding = self._file_encodings.get(path)
                headers = {"Content-Encoding": encoding} if encoding is not None else {}
                return web.Response(
                    body=data, content_type="application/octet-stream", headers=headers
                )
        return web.json_response({"ok": False, "error_code": 404}, status=404)

    async def _api_getMe(self, params: dict[str, Any]) -> Any:
        return {**BOT_USER, "can_read_all_group_messages": self.can_read_all_group_messages}

    async def _api_getChatAdministrators(self, params: dict[str, Any]) -> Any:
        chat_id = int(params["chat_id"])
        if chat_id > 0:
            return ScriptedError(
                400, "Bad Request: there are no administrators in the private chat"
            )
        ids = self.chat_admins.get(chat_id, [])
        rights = (
            "can_manage_chat can_delete_messages can_manage_video_chats can_restrict_members "
            "can_promote_members can_change_info can_invite_users can_post_stories "
            "can_edit_stories can_delete_stories"
        ).split()
        members: list[dict[str, Any]] = [
            {"status": "creator", "user": user(uid), "is_anonymous": False}
            if index == 0
            else {
                "status": "administrator",
                "user": user(uid),
                "can_be_edited": False,
                "is_anonymous": False,
                **dict.fromkeys(rights, True),
            }
            for index, uid in enumerate(ids)
        ]
        members.append(
            {
                "status": "administrator",
                "user": {**BOT_USER},
                "can_be_edited": False,
                "is_anonymous": False,
                **dict.fromkeys(rights, True),
            }
        )
        return members

    async def _api_getMyCommands(self, params: dict[str, Any]) -> Any:
        return self.my_commands

    async def _api_setMyCommands(self, params: dict[str, Any]) -> Any:
        self.my_commands = list(params.get("commands") or [])
        return True

    async def _api_getWebhookInfo(self, params: dict[str, Any]) -> Any:
        info: dict[str, Any] = {
            "url": self.webhook_url,
            "has_custom_certificate": False,
            "pending_update_count": len(self._updates) if self.webhook_url else 0,
        }
        if self.webhook_url and self.webhook_max_connections:
            info["max_connections"] = self.webhook_max_connections
        if self.last_error_message:
            info["last_error_date"] = int(time.time())
            info["last_error_message"] = self.last_error_message
        return info

    async def _api_setWebhook(self, params: dict[str, Any]) -> Any:
        url = str(params.get("url") or "")
        if not url:
            return await self._api_deleteWebhook(params)
        await self._stop_webhook()
        self.webhook_url = url
        self.webhook_secret = str(params.get("secret_token") or "")
        self.webhook_max_connections = int(params.get("max_connections") or 40)
        self.last_error_message = ""
        self._webhook_task = asyncio.create_task(self._deliver_to_webhook())
        return True

    async def _api_deleteWebhook(self, params: dict[str, Any]) -> Any:
        await self._stop_webhook()
        self.webhook_url = ""
        if str(params.get("drop_pending_updates", "")).lower() in ("1", "true"):
            self._updates.clear()
        return True

    async def _stop_webhook(self) -> None:
        task, self._webhook_task = self._webhook_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def post_to_webhook(self, update: dict[str, Any], secret: str | None) -> int:
        """POST ``update`` to the registered webhook once, with ``secret`` as the secret token
        header (None: no header); the answer's status."""
        headers = {} if secret is None else {"X-Telegram-Bot-Api-Secret-Token": secret}
        timeout = aiohttp.ClientTimeout(total=self.webhook_timeout)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(
                self.webhook_forward or self.webhook_url, json=update, headers=headers
            ) as response,
        ):
            return response.status

    async def _deliver_to_webhook(self) -> None:
        """Telegram's side of a webhook: each queued update POSTed until answered 200."""
        while True:
            await self._wait_until(lambda: bool(self._updates))
            update = self._updates[0]
            try:
                status = await self.post_to_webhook(update, self.webhook_secret or None)
            except aiohttp.ClientError as exc:
                status, self.last_error_message = 0, f"Connection refused ({exc})"
            except TimeoutError:
                status, self.last_error_message = 0, "Read timeout expired"
            self.webhook_posts.append((int(update["update_id"]), status))
            if status == 200:
                if self._updates and self._updates[0] is update:
                    self._updates.pop(0)
            elif status:
                reason = HTTPStatus(status).phrase
                self.last_error_message = f"Wrong response from the webhook: {status} {reason}"
            self._notify()
            if status != 200:
                await asyncio.sleep(self.webhook_retry_delay)  # Telegram's pause before again

    async def _api_getUpdates(self, params: dict[str, Any]) -> Any:
        if self.webhook_url:
            return ScriptedError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; "
                "use deleteWebhook to delete the webhook first",
            )
        if self.stalls > 0:
            # A long poll accepted and never answered (a dead proxy, a black-holed route).
            self.stalls -= 1
            await self._closing.wait()
            return []
        offset = int(params.get("offset", 0) or 0)
        timeout = float(params.get("timeout", 0) or 0)
        limit = min(max(int(params.get("limit", 0) or UPDATES_LIMIT), 1), UPDATES_LIMIT)
        if offset > 0 and self.forget_confirmed:
            self._updates = [u for u in self._updates if u["update_id"] >= offset]

        allowed = params.get("allowed_updates")
        if isinstance(allowed, str):
            allowed = json.loads(allowed)
        if allowed is not None:
            self.allowed_updates = list(allowed)

        def kind_allowed(update: dict[str, Any]) -> bool:
            # Telegram leaves out the kinds not asked for (an empty list: all but a few).
            kinds = self.allowed_updates
            return not kinds or any(kind in update for kind in kinds)

        def pending() -> list[dict[str, Any]]:
            return [u for u in self._updates if u["update_id"] >= offset and kind_allowed(u)]

        self._polls += 1
        poll = self._polls
        self._notify()  # a long poll still waiting learns that this one came
        if not pending() and timeout > 0:
            try:
                async with asyncio.timeout(timeout):
                    await self._wait_until(
                        lambda: bool(pending()) or self._closing.is_set() or self._polls != poll
                    )
            except TimeoutError:
                pass
            if self._polls != poll:  # a newer getUpdates took over, as Telegram answers the older
                self.conflicts += 1
                return conflict()
        return pending()[:limit]

    @staticmethod
    def _check_markup(params: dict[str, Any]) -> ScriptedError | None:
        """Telegram's refusals of an inline keyboard: callback data of 1 to 64 bytes."""
        markup = params.get("reply_markup")
        if markup is None:
            return None
        for row in markup.get("inline_keyboard", []):
            for button in row:
                data = button.get("callback_data")
                if data is not None and not 1 <= len(str(data).encode()) <= 64:
                    return ScriptedError(400, "Bad Request: BUTTON_DATA_INVALID")
                if not str(button.get("text", "")).strip():
                    return ScriptedError(400, "Bad Request: text buttons are unallowed")
        return None

    def _check_text(self, params: dict[str, Any]) -> tuple[str, ScriptedError | None]:
        text = str(params.get("text", ""))
        if params.get("parse_mode") == "HTML":
            text, error = parse_html(text)
            if error is not None:
                return text, ScriptedError(400, f"Bad Request: can't parse entities: {error}")
        if not text.strip():
            return text, ScriptedError(400, "Bad Request: message text is empty")
        if _utf16_len(text) > TEXT_LIMIT:
            return text, ScriptedError(400, "Bad Request: message is too long")
        return text, None

    async def _api_sendMessage(self, params: dict[str, Any]) -> Any:
        text, error = self._check_text(params)
        error = error or self._check_markup(params)
        if error is not None:
            return error
        chat_id = int(params["chat_id"])
        message: dict[str, Any] = {
            "message_id": self._new_message_id(chat_id),
            "date": int(time.time()),
            "chat": self.chat(chat_id),
            "from": BOT_USER,
            "text": text,
        }
        if "message_thread_id" in params:
            message["message_thread_id"] = int(params["message_thread_id"])
            message["is_topic_message"] = True
        reply = params.get("reply_parameters")
        if isinstance(reply, dict):
            original = self._sent.get((chat_id, int(reply["message_id"])))
            message["reply_to_message"] = original or {
                "message_id": int(reply["message_id"]),
                "date": int(time.time()),
                "chat": self.chat(chat_id),
            }
        if params.get("reply_markup", {}).get("inline_keyboard"):
            message["reply_markup"] = params["reply_markup"]
        self._sent[(chat_id, message["message_id"])] = message
        self._drafting.pop(chat_id, None)  # a message posted ends the chat's draft
        return message

    async def _api_sendMessageDraft(self, params: dict[str, Any]) -> Any:
        chat_id = int(params["chat_id"])
        if self.chat(chat_id)["type"] != "private":
            return ScriptedError(400, "Bad Request: TEXTDRAFT_PEER_INVALID")
        text, error = self._check_text(params)
        if error is not None and text.strip():  # an empty draft shows "Thinking..."
            return error
        self.drafts.setdefault(chat_id, []).append(text)
        self._drafting[chat_id] = text
        return True

    def draft_showing(self, chat_id: int) -> str | None:
        """The draft the chat shows now: the last one sent, until a message is posted."""
        return self._drafting.get(chat_id)

    async def _api_editMessageReplyMarkup(self, params: dict[str, Any]) -> Any:
        error = self._check_markup(params)
        if error is not None:
            return error
        key = (int(params["chat_id"]), int(params["message_id"]))
        message = self._sent.get(key)
        if message is None:
            return ScriptedError(400, "Bad Request: message to edit not found")
        markup = params.get("reply_markup") or {}
        if (message.get("reply_markup") or {}) == (markup if markup.get("inline_keyboard") else {}):
            return ScriptedError(400, "Bad Request: message is not modified")
        if markup.get("inline_keyboard"):
            message["reply_markup"] = markup
        else:
            message.pop("reply_markup", None)
        return message

    async def _api_answerCallbackQuery(self, params: dict[str, Any]) -> Any:
        query = str(params["callback_query_id"])
        if query in self.answered_queries:
            return ScriptedError(
                400,
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
            )
        self.answered_queries[query] = params.get("text")
        return True

    async def _api_editMessageText(self, params: dict[str, Any]) -> Any:
        text, error = self._check_text(params)
        error = error or self._check_markup(params)
        if error is not None:
            return error
        key = (int(params["chat_id"]), int(params["message_id"]))
        message = self._sent.get(key)
        if message is None:
            return ScriptedError(400, "Bad Request: message to edit not found")
        markup = params.get("reply_markup")
        if markup is not None:
            if markup.get("inline_keyboard"):
                message["reply_markup"] = markup
            else:
                message.pop("reply_markup", None)
        elif message["text"] == text:
            return ScriptedError(
                400,
                "Bad Request: message is not modified: specified new message content and "
                "reply markup are exactly the same as a current content and reply markup "
                "of the message",
            )
        message["text"] = text
        message["edit_date"] = int(time.time())
        return message

    async def _api_deleteMessage(self, params: dict[str, Any]) -> Any:
        key = (int(params["chat_id"]), int(params["message_id"]))
        if self._sent.pop(key, None) is None:
            return ScriptedError(400, "Bad Request: message to delete not found")
        return True

    def sent_in(self, chat_id: int) -> list[dict[str, Any]]:
        """The bot's messages in ``chat_id`` as they show now, oldest first."""
        return [m for (chat, _), m in sorted(self._sent.items()) if chat == chat_id]

    def visible(self, chat_id: int) -> list[str]:
        """The texts of the bot's messages in ``chat_id`` as they show now, oldest first."""
        return [m["text"] for (chat, _), m in sorted(self._sent.items()) if chat == chat_id]

    async def _api_sendChatAction(self, params: dict[str, Any]) -> Any:
        return True

    async def _api_setMessageReaction(self, params: dict[str, Any]) -> Any:
        """The bot's reaction on a message, replaced (an empty list takes it away). A bot may
        set one reaction, and only an emoji of Telegram's list (``ReactionEmoji``)."""
        if self.refuse_reactions is not None:
            return ScriptedError(400, self.refuse_reactions)
        reaction = params.get("reaction") or []
        if len(reaction) > 1:
            return ScriptedError(400, "Bad Request: REACTIONS_TOO_MANY")
        emoji = [r.get("emoji") for r in reaction]
        if any(r.get("type") != "emoji" for r in reaction) or not set(emoji) <= REACTION_EMOJI:
            return ScriptedError(400, "Bad Request: REACTION_INVALID")
        key = (int(params["chat_id"]), int(params["message_id"]))
        if emoji:
            self.reactions[key] = str(emoji[0])
        else:
            self.reactions.pop(key, None)
        return True

    async def _upload(self, method: str, field: str, params: dict[str, Any]) -> Any:
        file = params.get(field)
        if not isinstance(file, UploadedFile):
            return ScriptedError(400, f"Bad Request: there is no {field} in the request")
        chat_id = int(params["chat_id"])
        caption = str(params.get("caption", ""))
        if params.get("parse_mode") == "HTML" and caption:
            caption, error = parse_html(caption)
            if error is not None:
                return ScriptedError(400, f"Bad Request: can't parse entities: {error}")
        if _utf16_len(caption) > 1024:
            return ScriptedError(400, "Bad Request: message caption is too long")
        self.uploads.append(Upload(method, chat_id, file, caption))
        message: dict[str, Any] = {
            "message_id": self._new_message_id(chat_id),
            "date": int(time.time()),
            "chat": self.chat(chat_id),
            "from": BOT_USER,
        }
        if caption:
            message["caption"] = caption
        reply = params.get("reply_parameters")
        if isinstance(reply, dict):
            message["reply_to_message"] = {
                "message_id": int(reply["message_id"]),
                "date": int(time.time()),
                "chat": self.chat(chat_id),
            }
        return message

    async def _api_sendPhoto(self, params: dict[str, Any]) -> Any:
        return await self._upload("sendPhoto", "photo", params)

    async def _api_sendDocument(self, params: dict[str, Any]) -> Any:
        return await self._upload("sendDocument", "document", params)

    async def _api_sendVoice(self, params: dict[str, Any]) -> Any:
        return await self._upload("sendVoice", "voice", params)

    async def _api_sendAudio(self, params: dict[str, Any]) -> Any:
        return await self._upload("sendAudio", "audio", params)

    async def _api_sendVideo(self, params: dict[str, Any]) -> Any:
        return await self._upload("sendVideo", "video", params)
