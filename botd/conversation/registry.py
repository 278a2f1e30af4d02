"""``Conversations``: the map of conversation key -> ``Conversation``, the global run cap,
chat commands, and the registry's lifetime (resume, drain, close).

``submit`` takes an inbound message (already deduplicated, allowed and addressed to the
bot; in botd an inbox entry the dispatcher hands over, in order). Chat commands are done at
once (``commands.py``) and their answer sent in the background (``post_later``), so an
outage of one chat never holds up the channel's input for the others; ``/new`` or
``/reset`` followed by text or with files starts over with them as the new conversation's
first message. Anything else goes to its conversation, which queues it
(``Conversation.take``).

Runs of different conversations go in parallel, capped by a global semaphore; runs of one
conversation never overlap. Every worker and one-shot post is a task of the registry's
``TaskOwner``, awaited by ``drain`` and ``close``.

Each conversation's work runs under the ``RunScope`` the dispatcher gives with it (``submit``,
``resume_conversation``: the conversation and, on several nodes, its lease's fence): its
store is the store's view fenced by that lease (``ConversationStore.fenced``), and every send
and tool of its runs is made for that scope (``Work``). A message given no scope (a test, a
bench) runs unfenced.

``resume_conversation`` goes on with what an earlier process (or node) left of one
conversation, from its unfinished entries and unconfirmed pieces (``Promise.plan``), when the
dispatcher claims it (``dispatcher``: at start, once the channels can send, every
conversation with unfinished entries is claimed). Its entries are submitted in order, chat
commands among them, so a resumed ``/new`` keeps its place; the unconfirmed pieces of its
finished runs are sent (``send_unconfirmed``). ``close`` cuts turns still being prepared,
lets running answers finish within the grace and cancels the rest, without ending their
entries: they resume at the next start.

Each run is logged with ``LogContext`` ids (channel, conversation, run = session id and run
number), and optional ``RunHooks`` tell the daemon when a run starts, how it ended and when
its first reply reached the chat (for metrics). ``/status`` also lists the conversation's
scheduled jobs when a ``jobs`` callable is given, and the channels and MCP servers that are
down. ``models`` names the configured models (primary first) that ``/model`` chooses among
per conversation; ``owners`` tells who the bot's owners are (``botd.owners``), for the
commands only they may use. ``place`` gives each message's chat settings
(``botd.config.overrides``: its system prompt, model, queue mode, backend, each with where it
came from), which the runs, the queue and ``/status`` read; without it every chat has the
agent's (``settings``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..agent.tools.base import Tool
from ..agent.types import Provider
from ..approvals import Approvals
from ..chat import Button, InboundMessage, Target
from ..cluster.fencing import RunScope
from ..commands import chat_command, command_argument
from ..config.overrides import Effective
from ..config.schema import MediaSection
from ..delivery import Delivery
from ..media import MediaResolver
from ..store import InboxEntry, OutboxEntry
from ..store.protocols import ConversationStore
from .commands import FILES_NOT_READ, STARTING_OVER, CommandDesk, ForgetCommand, OwnerChecks
from .conversation import Conversation, Shared, Work
from .models import ModelBook
from .promise import Promise, ResumePlan
from .queue import Timer, Windows, strategy
from .reactions import StatusReactions
from .run import Runner
from .session import Session
from .settings import RunHooks, SessionSettings, everywhere
from .tasks import TaskOwner
from .voice import VoiceSwitch

if TYPE_CHECKING:
    from ..agent.acp.agent import AcpAgent

log = logging.getLogger(__package__)

REACTIONS_GRACE = 2.0
"""At most how long the shutdown waits for status reactions under way."""


class Conversations:
    """Owns every conversation; see the module docstring."""

    def __init__(
        self,
        store: ConversationStore,
        provider: Provider,
        delivery: Delivery,
        settings: SessionSettings,
        *,
        tools: Callable[[InboundMessage], Sequence[Tool]] | None = None,
        clock: Callable[[], float] = time.time,
        jobs: Callable[[str], Awaitable[list[str]]] | None = None,
        hooks: RunHooks | None = None,
        channels_down: Callable[[], Mapping[str, str]] | None = None,
        servers_down: Callable[[], Mapping[str, str]] | None = None,
        models: Sequence[str] = (),
        media: MediaResolver | None = None,
        timer: Timer | None = None,
        reactions: StatusReactions | None = None,
        approvals: Approvals | None = None,
        acp: Mapping[str, AcpAgent] | None = None,
        answered_by: Callable[[InboundMessage], str] = lambda _inbound: "model",
        place: Callable[[InboundMessage], Effective] | None = None,
        owners: OwnerChecks | None = None,
        prompt_note: Callable[[InboundMessage, str], Awaitable[str]] | None = None,
        memory_command: Callable[[InboundMessage, str], Awaitable[str]] | None = None,
        resumed_note: Callable[[InboundMessage, str], Awaitable[str]] | None = None,
        forget_command: ForgetCommand | None = None,
    ) -> None:
        self._ledger = store
        self._conversations: dict[str, Conversation] = {}
        self._closed = False
        self._cancelling = False
        self._delivery = delivery
        self._workers = TaskOwner()
        """Each conversation's worker, until it ends."""
        self._posts = TaskOwner()
        """One-shot texts (command answers, unconfirmed pieces) on their way."""
        self._reactions = reactions
        self._promise = Promise(store, None if reactions is None else reactions.ended)
        book = ModelBook(store, models or [settings.loop.model], clock)
        speech = settings.speech
        voice = VoiceSwitch(store, configured=lambda: speech is not None and speech.configured)
        agents = everywhere(settings, book.primary)
        place = place or (lambda _message: agents)
        self._runner = Runner(
            store,
            self._promise,
            provider,
            delivery,
            settings,
            tools or (lambda _message: ()),
            hooks or RunHooks(),
            book,
            lambda: self._cancelling,
            approvals=approvals,
            acp=acp,
            answered_by=answered_by,
            place=place,
            prompt_note=prompt_note,
            resumed_note=resumed_note,
            voice=voice,
        )
        windows = Windows(settings.debounce)
        self._shared = Shared(
            delivery=delivery,
            media=media or MediaResolver(MediaSection),
            queue=lambda message: strategy(place(message).queue_mode.value),
            windows=windows if timer is None else replace(windows, timer=timer),
            reset=settings.reset,
            clock=clock,
            slots=asyncio.Semaphore(settings.max_concurrent_runs),
            closing=lambda: self._closed,
            workers=self._workers,
        )
        self._commands = CommandDesk(
            store,
            self._conversations,
            place=place,
            unplaced=agents,
            jobs=jobs,
            channels_down=channels_down,
            servers_down=servers_down,
            models=book,
            owners=owners,
            memory=memory_command,
            grants=None if approvals is None else approvals.grants_command,
            voice=voice,
            forget=forget_command,
        )

    # -- inbound ----------------------------------------------------------------------------

    async def submit(self, message: InboundMessage, scope: RunScope | None = None) -> None:
        """Take one inbound message: a command is answered now, text goes to its
        conversation. ``scope``: what the conversation's work runs under on this node (the
        dispatcher's; None: unfenced)."""
        scope = scope or RunScope(message.conversation_key)
        if self._closed:
            log.warning("message %s dropped: shutting down", message.message_id)
            return
        command = chat_command(message.text, message.bot_name)
        if command is not None:
            rest = command_argument(message.text)
            plain = command not in STARTING_OVER or not (rest or message.attachments)
            if plain or await self._commands.refused(command, message):
                store = self._ledger.fenced(scope.fence)
                reply = await self._commands.answer(command, message, store)
                text = reply.text + (FILES_NOT_READ if message.attachments else "")
                target, inbox_id = message.reply_target(), message.inbox_id
                promise = self._work(scope).promise
                self._posts.spawn(
                    self._post(target, text, inbox_id, reply.after, promise, reply.buttons),
                    f"post:{message.chat_id}",
                )
                return
            # "/new <text>" (or files captioned /new): start over, and the rest is the new
            # conversation's first message. A run of it that a restart resumes is already in
            # the new conversation: it does not start over again.
            known = self._conversations.get(message.conversation_key)
            if known is None or message.inbox_id is None or not known.resumes(message.inbox_id):
                await self._commands.answer(command, message, self._ledger.fenced(scope.fence))
            message = replace(message, text=rest)
        conversation = await self.conversation(message.conversation_key, scope)
        if self._reactions is not None:
            self._reactions.taken(message)
        await conversation.take(message)

    async def conversation(self, key: str, scope: RunScope | None = None) -> Conversation:
        """The conversation under ``key``, loaded from the store on first use, its work run
        under ``scope`` (None: unfenced); one this node has already runs under its own."""
        found = self._conversations.get(key)
        if found is not None:
            return found
        record = await self._ledger.open_session(key)
        history = await self._ledger.transcript(record.session_id)
        found = self._conversations.get(key)  # another submit loaded it meanwhile
        if found is not None:
            return found
        session = Session(key, record.session_id, history, record.runs, record.runs)
        work = self._work(scope or RunScope(key))
        conversation = Conversation(key, session, record.updated_at, self._shared, work)
        self._conversations[key] = conversation
        return conversation

    async def status(self, conversation_key: str) -> str:
        """What the conversation is doing, what waits, and its scheduled jobs (its chat's
        settings as the agent's: the chat is not known by its key)."""
        return await self._commands.status(conversation_key)

    def post_later(self, target: Target, text: str, *, inbox_id: int | None = None) -> None:
        """Send a one-shot text (a command's answer, a pairing reply) in the background.

        The delivery retries it through an outage of that chat; meanwhile the channel goes on
        taking input for every other chat. ``inbox_id``, the message it answers, is answered
        once it is sent (failed when refused); cut by a shutdown, the message stays in the
        inbox and is answered after the restart.
        """
        post = self._post(target, text, inbox_id, None, self._promise)
        self._posts.spawn(post, f"post:{target.chat_id}")

    async def _post(
        self,
        target: Target,
        text: str,
        inbox_id: int | None,
        after: asyncio.Event | None,
        promise: Promise,
        buttons: tuple[tuple[Button, ...], ...] = (),
    ) -> None:
        """Send ``text`` (with ``buttons`` under it) once ``after`` is set (None: now), then
        end ``inbox_id`` through ``promise`` (the conversation's, whose scope the send is
        made for)."""
        if after is not None:
            await after.wait()  # the turn a /stop or /new cut winds down first
        try:
            await self._delivery.send_text(target, text, buttons=buttons, scope=promise.scope)
        except Exception as exc:
            log.warning("a reply to %s:%s was not sent: %s", target.channel, target.chat_id, exc)
            promise.failed([inbox_id])
            return
        promise.answered([inbox_id])

    def _work(self, scope: RunScope) -> Work:
        """The work of ``scope``'s conversation on this node, bound to its scope."""
        ledger = self._ledger.fenced(scope.fence)
        promise = self._promise.under(scope, ledger)
        return Work(scope, ledger, promise, self._runner.under(scope, ledger, promise))

    @property
    def conversations(self) -> Mapping[str, Conversation]:
        return self._conversations

    # -- restart ----------------------------------------------------------------------------

    async def resume_conversation(
        self,
        key: str,
        entries: Sequence[InboxEntry],
        pieces: Sequence[OutboxEntry],
        scope: RunScope | None = None,
    ) -> ResumePlan:
        """This node took the conversation ``key`` over (the dispatcher claimed its lease: at
        a restart, or from another node): go on with what its previous holder left, from its
        unfinished ``entries`` (in ``seq`` order) and its unconfirmed ``pieces``. Pieces of
        finished runs are sent now, keyed; the runs start at once. Returns what was resumed
        (the dispatcher says it). ``scope``: what its work runs under on this node (None:
        unfenced)."""
        self.forget(key)  # whatever this node held of it before is stale
        scope = scope or RunScope(key)
        delivery, now = self._delivery, time.time()
        plan = await self._work(scope).promise.plan(
            entries,
            pieces,
            lambda piece: delivery.resends_safely(piece.target, piece.written_at, now),
        )
        self.send_unconfirmed(plan.unsent, scope)
        for entry in plan.entries:
            user_turn_id = plan.resumed_turns.get(entry.id)
            if user_turn_id is not None:
                conversation = await self.conversation(key, scope)
                conversation.resume_from(entry.id, user_turn_id)
            await self.submit(entry.message, scope)
        return plan

    def send_unconfirmed(
        self, pieces: Sequence[OutboxEntry], scope: RunScope | None = None
    ) -> None:
        """Send pieces of finished runs that a crash left unconfirmed, keyed, in the
        background: each chat's in order, beside the others (one chat's outage holds up
        none); for the conversation ``scope`` is of (None: of none, unfenced)."""
        promise = self._promise if scope is None else self._work(scope).promise
        by_chat: dict[tuple[str, str, str | None], list[OutboxEntry]] = {}
        for piece in pieces:
            target = piece.target
            by_chat.setdefault((target.channel, target.chat_id, target.thread_id), []).append(piece)
        for (_channel, chat_id, _thread), chat_pieces in by_chat.items():
            self._posts.spawn(
                promise.send_unconfirmed(self._delivery, chat_pieces),
                f"unconfirmed:{chat_id}",
            )

    def forget(self, key: str) -> None:
        """This node no longer holds ``key`` (its lease was lost or released): its work is
        cut, marking nothing, and it leaves memory (``Conversation.abandon``)."""
        conversation = self._conversations.pop(key, None)
        if conversation is not None:
            conversation.abandon()

    def idle(self, key: str) -> bool:
        """Nothing of ``key`` is prepared, run or waiting on this node."""
        conversation = self._conversations.get(key)
        return conversation is None or conversation.idle

    # -- lifecycle --------------------------------------------------------------------------

    async def drain(self) -> None:
        """Wait until every conversation is idle and every one-shot text sent."""
        while self._workers.running() or self._posts.running():
            await self._workers.settle()
            await self._posts.settle()
        if self._reactions is not None:
            await self._reactions.settle()  # the ended runs' reactions too

    async def close(self, grace: float = 10.0) -> None:
        """Stop taking input, let running turns (and one-shot texts) finish within ``grace``,
        cancel the rest and await every task."""
        self._closed = True
        for conversation in self._conversations.values():
            conversation.closing()
        busy = [*self._workers.running(), *self._posts.running()]
        if busy:
            await asyncio.wait(busy, timeout=grace)
        # What is cancelled now is left unanswered in the inbox and resumes at next start:
        # runs wind down by themselves (writing nothing more), one-shot texts are cancelled.
        self._cancelling = True
        for conversation in self._conversations.values():
            conversation.cancel()
        await self._posts.close()
        await self._workers.settle()
        if self._reactions is not None:
            # Cosmetic: what is not set by then is not (a resumed entry shows it again).
            await self._reactions.close(min(grace, REACTIONS_GRACE))


__all__ = ["Conversations"]
