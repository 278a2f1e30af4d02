"""Catching up on Slack (``botd.channels.catch_up``): the history of the chats and threads
botd took messages in, read after a start (Socket Mode and HTTP mode alike) and after each
reconnect of the socket.

A channel or DM is read with ``conversations.history``, a thread with
``conversations.replies``, both from the mark (``oldest``, exclusive) and paged by cursor, at
most ``MAX_PAGES`` pages of ``PAGE`` messages per chat, through the adapter's own calls (a 429
waited out after its ``Retry-After``). Slack's history lists a channel's top-level messages
only: a reply in a thread is caught up when botd took a message in that thread before (its
mark), and not otherwise. What older than ``max_age`` lies after a mark is read from the mark
up to the age limit and counted, not taken.

Each message is handed to the adapter's live handler (``take``) as the ``message`` event it
was (its channel and, for a DM, ``channel_type: im`` added), so it is converted, filtered
(the bot's own, other bots', joins and other subtypes) and answered as if it had come live;
with no event id, its dedupe key is ``channel:ts``, the key its live delivery carries too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from ...store.records import ChatMark
from ..catch_up import SKIP_COUNTED, Missed
from .sent import Call

__all__ = ["MAX_PAGES", "PAGE", "SlackHistory"]

PAGE = 200
MAX_PAGES = 5
"""At most this many pages of ``PAGE`` messages are read of one chat at one catch-up."""

Event = dict[str, Any]
Take = Callable[[Event], Awaitable[None]]


class SlackHistory:
    """The ``History`` of one Slack app's chats (see the module docstring). ``wanted`` says
    whether the live path would take a message (not the bot's own, not a join)."""

    def __init__(
        self, call: Call, client: AsyncWebClient, take: Take, wanted: Callable[[Event], bool]
    ) -> None:
        self._call = call
        self._client = client
        self._take = take
        self._wanted = wanted

    async def take(self, message: Event) -> None:
        await self._take(message)

    async def read(self, mark: ChatMark, cutoff: float) -> Missed[Event]:
        skipped, more = 0, False
        oldest = mark.message_id
        if float(oldest) < cutoff:
            limit = f"{cutoff:.6f}"
            older = await self._read(mark, oldest=oldest, latest=limit, most=SKIP_COUNTED)
            skipped, more = sum(1 for m in older if self._wanted(m)), len(older) >= SKIP_COUNTED
            oldest = limit
        found = await self._read(mark, oldest=oldest, most=PAGE * MAX_PAGES)
        return Missed([m for m in found if self._wanted(m)], skipped, more)

    async def _read(
        self, mark: ChatMark, *, oldest: str, latest: str | None = None, most: int
    ) -> list[Event]:
        """The messages after ``oldest`` (before ``latest``) where ``mark`` is, oldest
        first, at most ``most`` (of the pages read: a channel's newest, a thread's
        oldest), as events."""
        args: dict[str, Any] = {"channel": mark.chat_id, "oldest": oldest, "limit": PAGE}
        if latest is not None:
            args["latest"] = latest
        method, func = "conversations.history", self._client.conversations_history
        if mark.thread_id is not None:
            method, args["ts"] = "conversations.replies", mark.thread_id
            func = self._client.conversations_replies  # type: ignore[assignment]
        found: list[Event] = []
        for _ in range(MAX_PAGES):
            response = await self._call(method, func, **args)
            found += [m for m in response.get("messages") or [] if isinstance(m, dict)]
            cursor = (response.get("response_metadata") or {}).get("next_cursor")
            if not response.get("has_more") or not cursor or len(found) >= most:
                break
            args["cursor"] = cursor
        where = {"channel": mark.chat_id}
        if mark.chat_id.startswith("D"):
            where["channel_type"] = "im"
        # conversations.history pages newest first, conversations.replies oldest first (its
        # first message the thread's parent, whatever ``oldest`` says).
        events = sorted(
            ({**m, **where} for m in found if float(m.get("ts") or 0) > float(oldest)),
            key=lambda m: float(m["ts"]),
        )
        return events[:most]
