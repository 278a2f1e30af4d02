"""Slack thread context: the earlier messages of a thread, on the bot's first mention there.

Someone who mentions the bot inside a thread that has been going on without it expects it to
have read the thread. ``ThreadContext.add_to`` fetches the thread with
``conversations.replies`` when a channel message mentions the bot inside a thread (its
``thread_ts`` differs from its own ts) that the bot has no conversation for yet (neither in
the store, asked through ``known``, nor fetched before in this process), from a sender the
access policy lets address the bot there (asked through ``admits``), and attaches it to
the message as context: the thread's first message, then the most recent ones before the
mention, ``limit`` in all, each line labelled with its sender like kept chatter (the bot's
own as ``[you]``), at most ``CONTEXT_CHARS`` characters. A sender whose message brought no
name (``conversations.replies`` often leaves the profile out) is named through ``names``
(``users.info``, remembered), within the same time budget as the fetch.

Only what the policy would take from its sender reaches the model: each earlier message's
sender is asked about through ``admits`` as if they had mentioned the bot there (another
bot like a person, by its user id, else its bot id), and the bot's own lines stay. The
others' messages are left out before anything is chosen or named, so neither their words,
their files nor their names are shown or looked up; one line says how many were left out,
so the model does not take the thread for whole (a reply may answer one of them).

A DM has no thread context, but a thread there is a conversation of its own: the first
message of a DM thread the bot has no conversation for carries the thread's first message
(its parent, often the bot's own answer the user opened the thread on) as its ``quoted``
message, fetched with one ``conversations.replies`` call in the same time budget. In a
channel the parent is the first line of the thread context already, and a thread the bot has
a conversation for was read before: neither is quoted again. ``limit`` 0 fetches nothing,
the parent neither.

The fetch is bounded: one page per call (``PAGE_SIZE``), at most ``MAX_PAGES`` calls from the
thread's start, then, for a longer thread, a few for its latest part (``TAIL_WINDOWS``), within
``FETCH_TIMEOUT`` seconds (the message waits for it before Slack is acknowledged). A failure
(Slack's error, a 429, a timeout, a dropped connection) is logged in Slack's words and the
message goes on without the context; it is not tried again for that thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from ...bounded import Recent
from ...chat import InboundMessage, Quote
from ...speakers import bot_line, labelled, speaker
from .inbound_media import slack_attachments
from .names import profile_name

log = logging.getLogger(__name__)

__all__ = [
    "CONTEXT_CHARS",
    "DEFAULT_THREAD_CONTEXT",
    "THREAD_HEADER",
    "ThreadContext",
    "refused_line",
    "render_thread",
    "sender_name",
]

DEFAULT_THREAD_CONTEXT = 20
"""How many earlier messages of a thread the model is given (``channels.slack.thread_context``)."""
CONTEXT_CHARS = 6000
"""At most this many characters of thread context (the oldest replies are left out first)."""
LINE_CHARS = 1000
"""A single message longer than this is cut."""
PAGE_SIZE = 200
MAX_PAGES = 3
TAIL_WINDOWS = (86400.0, 3600.0, 300.0, 30.0)
"""Seconds before the mention asked for, widest first, when a thread is longer than
``MAX_PAGES`` pages: the first window that fits one page gives its latest messages."""
FETCH_TIMEOUT = 3.0
THREAD_HEADER = "[Earlier messages in this thread]"
_MEMORY = 4096
_T = TypeVar("_T")


def sender_name(event: Mapping[str, Any]) -> str:
    """The display name Slack sent along with a message (``user_profile``), if any."""
    profile = event.get("user_profile")
    if not isinstance(profile, Mapping):
        return str(event.get("username") or "")
    return profile_name(profile)


class ThreadContext:
    """See the module docstring."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        limit: int = DEFAULT_THREAD_CONTEXT,
        known: Callable[[str], Awaitable[bool]] | None = None,
        admits: Callable[[InboundMessage], bool] | None = None,
        names: Callable[[str], Awaitable[str]] | None = None,
        timeout: float = FETCH_TIMEOUT,
    ) -> None:
        self._client = client
        self._names = names
        self.limit = limit
        self.known = known
        """Whether the bot has a conversation under a key already (the store's sessions)."""
        self.admits = admits
        """Whether the access policy lets a message through: a refused sender's mention
        fetches nothing, and leaves the thread to be read on an admitted one's; an earlier
        message of the thread is shown only when the same question, asked for its sender,
        is answered yes."""
        self._timeout = timeout
        self._done: Recent[str, None] = Recent(_MEMORY)

    async def wanted(self, message: InboundMessage) -> bool:
        """Whether ``message`` is a first mention inside an existing thread."""
        if message.is_direct or not message.mentions_bot:
            return False
        return await self._first_in_thread(message)

    async def _first_in_thread(self, message: InboundMessage) -> bool:
        """Whether ``message`` is inside an existing thread the bot has no conversation for,
        from a sender the policy lets address the bot there."""
        thread = message.thread_id
        if self.limit <= 0 or thread is None or thread == message.message_id:
            return False
        key = message.conversation_key
        if key in self._done or (self.known is not None and await self.known(key)):
            return False
        return self.admits is None or self.admits(message)

    async def add_to(
        self, message: InboundMessage, bot_user_id: str = "", bot_id: str = ""
    ) -> InboundMessage:
        """``message`` with its thread's earlier messages as context, or in a DM its
        thread's parent as the quoted message, where wanted."""
        if message.is_direct and await self._first_in_thread(message):
            self._done.remember(message.conversation_key, None)
            return await self._with_parent(message, bot_user_id, bot_id)
        if not await self.wanted(message):
            return message
        self._done.remember(message.conversation_key, None)
        thread_ts = message.thread_id or message.message_id  # wanted: always the thread's
        deadline = asyncio.get_running_loop().time() + self._timeout
        fetched = await self._bounded(
            message, deadline, self._fetch(message.chat_id, thread_ts, message.message_id)
        )
        if fetched is None:
            return message
        thread, gap = fetched
        earlier = [m for m in thread if str(m.get("ts")) != message.message_id]
        admitted = self._admitted(message, earlier, bot_user_id, bot_id)
        refused = sum(1 for m in earlier if _said(m)) - sum(1 for m in admitted if _said(m))
        names = await self._names_of(admitted, deadline, bot_user_id)
        context = render_thread(
            admitted,
            self.limit,
            bot_user_id=bot_user_id,
            bot_id=bot_id,
            names=names,
            gap=gap,
            refused=refused,
        )
        if not context:
            return message
        log.info(
            "slack: thread %s in %s: %d earlier message(s) read, %d of senders the policy "
            "refuses left out, %d characters given as context",
            message.thread_id,
            message.chat_id,
            len(earlier),
            refused,
            len(context),
        )
        return replace(message, context=context)

    async def _bounded(
        self, message: InboundMessage, deadline: float, fetch: Awaitable[_T]
    ) -> _T | None:
        """What ``fetch`` gives before ``deadline``; None (and a log line in Slack's words)
        when Slack refuses, does not answer in time or cannot be reached."""
        try:
            async with asyncio.timeout_at(deadline):
                return await fetch
        except SlackApiError as exc:
            response = exc.response
            error = response.get("error") if isinstance(response.data, dict) else None
            _failed(message, str(error or f"HTTP {response.status_code}"))
        except TimeoutError:
            _failed(message, f"no answer within {self._timeout:g}s")
        except (aiohttp.ClientError, OSError) as exc:
            _failed(message, f"cannot reach Slack: {exc or type(exc).__name__}")
        return None

    async def _with_parent(
        self, message: InboundMessage, bot_user_id: str, bot_id: str
    ) -> InboundMessage:
        """``message`` (the first of a DM thread) quoting its thread's first message."""
        thread = message.thread_id or message.message_id
        deadline = asyncio.get_running_loop().time() + self._timeout
        response = await self._bounded(
            message,
            deadline,
            self._client.conversations_replies(
                channel=message.chat_id, ts=thread, limit=1, inclusive=True
            ),
        )
        found = (response.get("messages") or []) if response is not None else []
        parent = next((m for m in found if isinstance(m, dict) and m.get("ts") == thread), None)
        if parent is None:
            return message
        text, files = str(parent.get("text") or ""), slack_attachments(parent)
        if _is_own(parent, bot_user_id, bot_id):
            quoted = Quote.of(message.bot_name, text, files, from_bot=True)
        else:
            user = str(parent.get("user") or parent.get("bot_id") or "")
            names = await self._names_of([parent], deadline, bot_user_id)
            name = sender_name(parent) or names.get(user, "")
            quoted = Quote.of(speaker(name, user), text, files)
        return replace(message, quoted=quoted)

    def _admitted(
        self,
        mention: InboundMessage,
        messages: list[dict[str, Any]],
        bot_user_id: str,
        bot_id: str,
    ) -> list[dict[str, Any]]:
        """The bot's own ``messages`` and those whose sender the policy would let address
        the bot where ``mention`` was: each sender is asked about once, through ``admits``,
        as the sender of a mention in the same place."""
        admits = self.admits
        if admits is None:
            return messages
        verdicts: dict[str, bool] = {}
        shown: list[dict[str, Any]] = []
        for m in messages:
            if not _is_own(m, bot_user_id, bot_id):
                sender = str(m.get("user") or m.get("bot_id") or "")
                if sender not in verdicts:
                    probe = replace(
                        mention, sender_id=sender, sender_name="", text="", attachments=()
                    )
                    verdicts[sender] = admits(probe)
                if not verdicts[sender]:
                    continue
            shown.append(m)
        return shown

    async def _fetch(
        self, channel: str, thread: str, before: str
    ) -> tuple[list[dict[str, Any]], bool]:
        """The thread before ``before``, oldest first, and whether a stretch between its
        first pages and its latest messages was skipped (a thread longer than ``MAX_PAGES``
        pages: Slack pages a thread from its start, so its latest part is asked for apart,
        by time, in the widest window that fits one page)."""
        messages: list[dict[str, Any]] = []
        cursor = ""
        for _ in range(MAX_PAGES):
            page, cursor = await self._page(channel, thread, before, cursor=cursor)
            messages.extend(page)
            if not cursor:
                return messages, False
        for window in TAIL_WINDOWS:
            oldest = f"{float(before) - window:.6f}"
            tail, more = await self._page(channel, thread, before, oldest=oldest)
            if not more:
                seen = {str(m.get("ts")) for m in messages}
                newer = [m for m in tail if str(m.get("ts")) not in seen]
                return messages[:1] + newer, True
        return messages, False  # every window overflows: the first pages, as they are

    async def _page(
        self, channel: str, thread: str, before: str, *, cursor: str = "", oldest: str = ""
    ) -> tuple[list[dict[str, Any]], str]:
        """One page of the thread before ``before`` (from ``oldest``), and the next cursor."""
        response = await self._client.conversations_replies(
            channel=channel,
            ts=thread,
            latest=before,
            inclusive=False,
            limit=PAGE_SIZE,
            cursor=cursor or None,
            oldest=oldest or None,
        )
        page = [m for m in response.get("messages") or [] if isinstance(m, dict)]
        metadata = response.get("response_metadata") or {}
        next_cursor = metadata.get("next_cursor") if isinstance(metadata, dict) else ""
        return page, str(next_cursor or "")

    async def _names_of(
        self, messages: list[dict[str, Any]], deadline: float, bot_user_id: str
    ) -> dict[str, str]:
        """The names of the senders of the messages that may be shown and brought none
        (``users.info``, through ``names``), as many as come before ``deadline``: the fetch
        and the names share one time budget, since the message waits for both."""
        if self._names is None or not messages:
            return {}
        shown = [messages[0], *messages[len(messages) - max(self.limit - 1, 0) :]]
        wanted = {str(m["user"]) for m in shown if m.get("user") and not sender_name(m)}
        users = sorted(wanted - {bot_user_id})  # the bot's own lines show as [you]
        if not users:
            return {}
        lookups = {user: asyncio.ensure_future(self._names(user)) for user in users}
        remaining = deadline - asyncio.get_running_loop().time()
        _, late = await asyncio.wait(lookups.values(), timeout=max(remaining, 0))
        for lookup in late:
            lookup.cancel()  # out of time: shown as its id
        if late:
            await asyncio.wait(late)
        found: dict[str, str] = {}
        for user, lookup in lookups.items():
            if not lookup.cancelled() and lookup.exception() is None and lookup.result():
                found[user] = lookup.result()
        return found


def _failed(message: InboundMessage, reason: str) -> None:
    log.warning(
        "slack: thread %s in %s answered without its earlier messages: "
        "conversations.replies failed: %s",
        message.thread_id,
        message.chat_id,
        reason,
    )


def render_thread(
    messages: list[dict[str, Any]],
    limit: int,
    *,
    bot_user_id: str = "",
    bot_id: str = "",
    names: Mapping[str, str] | None = None,
    gap: bool = False,
    refused: int = 0,
) -> str:
    """The thread's first message and its latest ones (``limit`` in all), labelled (by
    the name a message brought, else ``names`` by user id), within ``CONTEXT_CHARS``; empty
    when there is nothing to show. ``gap``: messages between the first and the others were
    not fetched, so how many are left out is not known. ``refused``: how many messages of
    senders the policy refuses were taken out of ``messages``, said in one line."""
    if limit <= 0:
        return ""
    lines = [_line(m, bot_user_id, bot_id, names or {}) for m in messages]
    lines = [line for line in lines if line]
    head = [THREAD_HEADER, refused_line(refused)] if refused else [THREAD_HEADER]
    if not lines:
        return "\n".join(head) if refused else ""
    first, replies = lines[0], lines[1:]
    keep = replies[len(replies) - (limit - 1) :] if limit > 1 else []
    omitted = len(replies) - len(keep)
    size = len(first) + sum(len(line) + 1 for line in keep)
    while keep and size > CONTEXT_CHARS:
        size -= len(keep.pop(0)) + 1
        omitted += 1
    shown = [*head, first[:CONTEXT_CHARS]]
    if gap:
        shown.append("[… more messages of the thread left out]")
    elif omitted:
        shown.append(f"[… {omitted} more message(s) of the thread left out]")
    return "\n".join([*shown, *keep])


def refused_line(count: int) -> str:
    """The line that says ``count`` messages of senders the policy refuses were left out."""
    return f"[… {count} message(s) from senders not allowed to address you here left out]"


def _said(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` has text to show (a join or a file alone has none)."""
    return bool(str(message.get("text") or "").strip())


def _is_own(message: Mapping[str, Any], bot_user_id: str, bot_id: str) -> bool:
    """Whether ``message`` is the bot's own (by its user id or its bot id)."""
    user = str(message.get("user") or "")
    bot = str(message.get("bot_id") or "")
    return bool((bot_user_id and user == bot_user_id) or (bot_id and bot == bot_id))


def _line(
    message: Mapping[str, Any], bot_user_id: str, bot_id: str, names: Mapping[str, str]
) -> str:
    text = str(message.get("text") or "").strip()
    if not text:
        return ""
    if len(text) > LINE_CHARS:
        text = text[: LINE_CHARS - 1] + "…"
    if _is_own(message, bot_user_id, bot_id):
        return bot_line(text)
    user = str(message.get("user") or "")
    bot = str(message.get("bot_id") or "")
    return labelled(sender_name(message) or names.get(user, ""), user or bot, text)
