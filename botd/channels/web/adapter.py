"""The web channel's adapter: the page's conversations, kept in memory as the page shows them.

Nothing is sent anywhere: a ``send`` appends a bot message to its conversation's log, an
``edit`` changes it in place (an ``edit`` preview grows one message as the answer streams,
then the final edit completes it), a ``delete`` takes it out; each change is published to the
conversation's subscribers (the page's event streams, ``Subscriber``) and wakes whoever waits
on the conversation (``Conversation.changed``: the OpenAI endpoint). A message is ``final``
once it will not change: posted or edited as an answer (``SendScope.final``), or posted while
no run is under way (a command's reply); a preview, or a tool's status line, is final once its
run is over (a stopped run's preview stays as it was).

Messages come in through ``submit``: an ``InboundMessage`` handed to the router like any
channel's (the durable inbox, the dedupe ledger: a retried POST with the same ``client_id``
is the same message id and is taken once). The user's message joins the log when the router
acknowledges it (it is in the inbox, or was seen before), before anything answers it.

Each conversation keeps its last ``KEPT_MESSAGES`` messages; at most ``KEPT_CONVERSATIONS``
are kept, the one used longest ago without a subscriber forgotten first. A conversation not
in memory (botd restarted, or it was forgotten) is read back from the store when it is next
used: what its chat showed (``EditorSessions.conversation_said``: the accepted messages and
the pieces sent, as long as the inbox and outbox hold them), every message final.

As a ``RunFollower`` it hears when a run of a conversation starts and ends; the model's
thinking is then not posted as blocks (the page does not show it).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ...chat import Capabilities, InboundMessage, MessageRef, Target
from ...http import event_stream
from ...text.markup import PLAIN
from ..base import ChannelAdapter, InboundSink, OutboundFile, SendScope
from .targets import web_conversation_key

if TYPE_CHECKING:
    from ...events import AgentEvent
    from ...store.protocols import EditorSessions

__all__ = [
    "KEPT_CONVERSATIONS",
    "KEPT_MESSAGES",
    "QUEUE_LIMIT",
    "ChatMessage",
    "Conversation",
    "NotTaken",
    "Subscriber",
    "WebChatAdapter",
]

log = logging.getLogger(__name__)

KEPT_MESSAGES = 200
"""Messages kept per conversation (the oldest go first)."""
KEPT_CONVERSATIONS = 1000
"""Conversations kept in memory; one forgotten is read back from the store when used."""
QUEUE_LIMIT = 256
"""Events a subscriber may fall behind by before it is dropped (its stream ends)."""
SENDER = "web"
"""Who writes in the page: its operator (whoever holds the page's token)."""

Role = Literal["user", "bot"]


@dataclass(slots=True)
class ChatMessage:
    """One message of a conversation as the page shows it."""

    id: str
    role: Role
    text: str
    final: bool
    status: bool = False
    """A run's tool status line (shown, then deleted): no part of the answer."""

    def json(self) -> dict[str, Any]:
        return {"id": self.id, "role": self.role, "text": self.text, "final": self.final}


Event = tuple[str, dict[str, Any]]
"""One server-sent event: its name (``message``, ``delete``) and its JSON object."""


Subscriber = event_stream.Subscriber[Event]
"""One event stream of a conversation (``botd.http.event_stream``): a subscriber more than
``QUEUE_LIMIT`` events behind is dropped."""


class Conversation:
    """One conversation's messages, its subscribers and its runs (see the module docstring)."""

    def __init__(self, chat_id: str) -> None:
        self.chat_id = chat_id
        self.messages: collections.OrderedDict[str, ChatMessage] = collections.OrderedDict()
        self.subscribers: set[Subscriber] = set()
        self.held = 0
        """Requests using it now (kept in memory meanwhile, like one with subscribers)."""
        self.running = False
        self.runs_over = 0
        """Runs of this conversation over since it was loaded."""
        self._changed = asyncio.Event()

    def changed(self) -> asyncio.Event:
        """Set at the next change (a message posted, edited, deleted, a run's start or end)."""
        return self._changed

    def snapshot(self) -> list[dict[str, Any]]:
        return [message.json() for message in self.messages.values()]

    def put(self, message: ChatMessage) -> None:
        """Add or replace ``message`` (a replaced one keeps its place) and publish it."""
        self.messages[message.id] = message
        while len(self.messages) > KEPT_MESSAGES:
            self.messages.popitem(last=False)
        self._publish(("message", message.json()))

    def drop(self, message_id: str) -> None:
        if self.messages.pop(message_id, None) is not None:
            self._publish(("delete", {"id": message_id}))

    def run_started(self) -> None:
        if not self.running:
            self.running = True
            self._wake()

    def run_over(self) -> None:
        """The run is over: what it left showing changes no more (a preview it stopped in)."""
        self.running = False
        self.runs_over += 1
        for message in list(self.messages.values()):
            if not message.final:
                message.final = True
                self._publish(("message", message.json()))
        self._wake()

    def _publish(self, event: Event) -> None:
        for subscriber in list(self.subscribers):
            if not subscriber.put(event):
                self.subscribers.discard(subscriber)
                log.info("web: a subscriber of %s fell behind and was dropped", self.chat_id)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def close(self) -> None:
        for subscriber in self.subscribers:
            subscriber.close()
        self.subscribers.clear()


class NotTaken(Exception):
    """The router could not take a message now (the store failed); the client may retry."""


class WebChatAdapter(ChannelAdapter):
    """See the module docstring. ``said``: where a conversation not in memory is read back
    from (None: nowhere, it starts empty)."""

    capabilities = Capabilities(text_limit=100_000, markup=PLAIN, threads=False)

    def __init__(self, *, channel: str = "web", said: EditorSessions | None = None) -> None:
        self.name = channel
        self._said = said
        self._sink: InboundSink | None = None
        self._conversations: collections.OrderedDict[str, Conversation] = collections.OrderedDict()
        self._loading: dict[str, asyncio.Future[Conversation]] = {}
        self._handing: set[asyncio.Future[object]] = set()

    # --- the page's side -------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Started and taking messages."""
        return self._sink is not None

    async def conversation(self, chat_id: str) -> Conversation:
        """``chat_id``'s conversation, read back from the store first if not in memory."""
        kept = self._conversations.get(chat_id)
        if kept is not None:
            self._conversations.move_to_end(chat_id)
            return kept
        loading = self._loading.get(chat_id)
        if loading is None:
            loading = asyncio.ensure_future(self._load(chat_id))
            self._loading[chat_id] = loading
            loading.add_done_callback(lambda _: self._loading.pop(chat_id, None))
        return await asyncio.shield(loading)

    async def _load(self, chat_id: str) -> Conversation:
        conversation = Conversation(chat_id)
        if self._said is not None:
            try:
                said = await self._said.conversation_said(self.conversation_key(chat_id))
            except Exception as exc:
                log.warning("web: reading %s back from the store failed: %s", chat_id, exc)
                said = []
            for index, line in enumerate(said[-KEPT_MESSAGES:]):
                message_id = line.message_id or f"said-{line.turn or 0}-{index}"
                conversation.messages[message_id] = ChatMessage(
                    message_id, line.by, line.text, True
                )
        self._conversations[chat_id] = conversation
        self._forget_old()
        return conversation

    def _forget_old(self) -> None:
        idle = [
            key
            for key, kept in self._conversations.items()
            if not kept.subscribers and not kept.held
        ]
        for key in idle[: max(0, len(self._conversations) - KEPT_CONVERSATIONS)]:
            del self._conversations[key]

    def conversation_key(self, chat_id: str) -> str:
        return web_conversation_key(self.name, chat_id)

    async def submit(self, chat_id: str, text: str, message_id: str | None = None) -> str:
        """Hand ``text`` to the router as a message of ``chat_id``'s conversation; its id
        (``message_id`` when given: a client's retry of it is taken once) once the router
        took it. Raises ``NotTaken`` when it could not be taken."""
        sink = self._sink
        if sink is None:
            raise NotTaken("the web channel is not running")
        conversation = await self.conversation(chat_id)
        message_id = message_id or f"{int(time.time() * 1000)}-{secrets.token_hex(6)}"
        message = InboundMessage(
            channel=self.name,
            chat_id=chat_id,
            sender_id=SENDER,
            text=text,
            message_id=message_id,
            conversation_key=self.conversation_key(chat_id),
            is_direct=True,
            mentions_bot=True,
            reactable=False,
        )
        accepted = asyncio.Event()

        def ack() -> None:
            # In the inbox (or seen before): shown before anything can answer it.
            if message_id not in conversation.messages:
                conversation.put(ChatMessage(message_id, "user", message.text, True))
            accepted.set()

        handling = asyncio.ensure_future(sink(message, ack=ack))
        waiting = asyncio.ensure_future(accepted.wait())
        try:
            await asyncio.wait({handling, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            await asyncio.wait({waiting})
        if handling.done() and not accepted.is_set():
            if handling.cancelled() or handling.exception() is not None:
                raise NotTaken("botd could not take the message now: try again")
            return message_id  # decided without an accept (nothing for the web to show)
        if not handling.done():
            self._handing.add(handling)
            handling.add_done_callback(self._handed)
        return message_id

    def _handed(self, task: asyncio.Future[object]) -> None:
        self._handing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("web: handling an accepted message failed", exc_info=task.exception())

    @contextlib.asynccontextmanager
    async def held(self, chat_id: str) -> AsyncIterator[Conversation]:
        """``chat_id``'s conversation, kept in memory until the block ends."""
        conversation = await self.conversation(chat_id)
        conversation.held += 1
        try:
            yield conversation
        finally:
            conversation.held -= 1

    @contextlib.asynccontextmanager
    async def subscribed(self, chat_id: str) -> AsyncIterator[tuple[Conversation, Subscriber]]:
        """A subscriber of ``chat_id``'s conversation for the block, with the conversation."""
        conversation = await self.conversation(chat_id)
        subscriber = Subscriber(QUEUE_LIMIT)
        conversation.subscribers.add(subscriber)
        try:
            yield conversation, subscriber
        finally:
            conversation.subscribers.discard(subscriber)

    # --- the channel's side ----------------------------------------------------------

    async def start(self, sink: InboundSink) -> None:
        self._sink = sink

    async def stop_inbound(self) -> None:
        self._sink = None
        while self._handing:
            await asyncio.wait(set(self._handing))

    async def stop(self) -> None:
        await self.stop_inbound()
        self.end_streams()

    def end_streams(self) -> None:
        """End every conversation's event streams (the page serving them is closing, or the
        channel stopping); the conversations stay, and a new stream may follow them."""
        for conversation in self._conversations.values():
            conversation.close()

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        if not markdown.strip():
            return []
        message_id = f"bot-{secrets.token_hex(8)}"
        await self._put(target, message_id, markdown, scope)
        return [MessageRef(target, message_id)]

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """Change the message in place (one an earlier process posted is shown anew)."""
        if markdown.strip():
            await self._put(ref.target, ref.message_id, markdown, scope)
        return [ref]

    async def _put(
        self, target: Target, message_id: str, markdown: str, scope: SendScope | None
    ) -> None:
        conversation = await self.conversation(target.chat_id)
        status = scope is not None and scope.status_line
        if scope is not None and scope.final:
            final = True
        else:  # a preview, a status line, or a notice (final when no run is under way)
            final = not status and not conversation.running
        conversation.put(ChatMessage(message_id, "bot", markdown, final, status))

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        (await self.conversation(ref.target.chat_id)).drop(ref.message_id)

    async def send_file(
        self,
        target: Target,
        file: OutboundFile,
        caption: str = "",
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """The page shows no uploads: the caption and the file's name, as a message."""
        named = f"[file: {file.filename}]"
        text = f"{caption}\n{named}" if caption.strip() else named
        return await self.send(target, text, scope=scope)

    async def react(self, ref: MessageRef, emoji: str) -> None:
        return None

    async def typing(self, target: Target) -> None:
        return None

    def run_event(self, target: Target, event: AgentEvent) -> None:
        kept = self._conversations.get(target.chat_id)
        if kept is not None:
            kept.run_started()

    async def run_over(self, target: Target, outcome: str) -> None:
        (await self.conversation(target.chat_id)).run_over()
