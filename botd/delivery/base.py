"""What the sessions see of delivery: one protocol to open a run's output, and its pieces.

A session hands each run's replies to ``Delivery.open_run(target)``, which returns a
``RunOutput``: the run pushes blocks, partial replies (live previews), tool-start flushes and
final replies into it without waiting, and awaits ``close()`` once the run is over. What the
output does with them (order, coalescing, previews, typing) is delivery's business. One-shot
texts outside a run (chat command answers) go through ``Delivery.send_text``.

Every piece that leaves a run passes, as an ``Outgoing`` with its kind and its number in the
run, through one method (``RunOutbox._post``): the place where a durable outbox can write it
down before sending and mark it sent with the platform's message ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

from ..channels.base import RunFollower
from ..chat import Button, MessageRef, PieceKey, Target
from ..store.records import StoredPreview
from ..subscriber import BlockReply, PartialReply
from .scope import RunScope
from .voice import Voice

DeliveryMode = Literal["blocks", "edit", "final", "stream"]
"""How a run is shown in a chat: every block as its own message, one preview edited into the
answer, only the final answer, or the platform's own streaming of the answer (a kind of
preview: Telegram drafts, Slack streams; an ``edit`` preview where there is none)."""
DEFAULT_DELIVERY_MODE: DeliveryMode = "blocks"

ReplyKind = Literal["block", "final"]
"""What a delivered reply is: a block streamed during the run, or a final reply after it."""

PieceKind = Literal["block", "partial", "final"]


ChunkMode = Literal["length", "newline"]
"""How a reply is cut into messages: only where it outgrows one, or also at every paragraph."""


@dataclass(frozen=True, slots=True)
class ChunkSettings:
    """How one channel cuts replies into messages (``chunk_mode``, ``text_chunk_limit``)."""

    mode: ChunkMode = "length"
    """``length``: one message unless the text outgrows it; ``newline``: a message per
    paragraph (per line on a plain-text channel), each still cut by length."""
    limit: int | None = None
    """The longest message, at most the platform's own limit (None: the platform's)."""


@dataclass(frozen=True, slots=True)
class CoalesceSettings:
    """Block coalescing: flush at ``max_chars``, or after ``idle_ms`` once ``min_chars`` wait."""

    min_chars: int = 800
    max_chars: int = 1200
    idle_ms: float = 1000.0
    joiner: str = "\n\n"


class RunJournal(Protocol):
    """Where a run's outbox writes each block and final reply down (the durable outbox;
    ``conversation.promise.PieceJournal``, where the pieces' states change).

    ``written`` is awaited before the piece is sent and returns a key for it; ``sent`` after
    the platform took it, with the refs of the messages it made; ``failed`` when it refused.
    """

    async def written(self, piece: Outgoing, text: str) -> int: ...

    def sent(self, key: int, refs: Sequence[MessageRef]) -> None: ...

    def failed(self, key: int) -> None: ...


class PreviewJournal(Protocol):
    """Where a run's preview messages are kept (``conversation.promise.PieceJournal`` over
    the store's ``PreviewLedger``), so a run resumed after a crash finishes them."""

    async def preview_left(self) -> StoredPreview | None:
        """The preview an interrupted attempt of this run showed, if any."""
        ...

    async def preview_posted(self, refs: Sequence[MessageRef], *, streaming: bool) -> None:
        """The run's preview shows in ``refs`` now (the first an open stream if
        ``streaming``); awaited before the preview shows more."""
        ...


class DeliveryCounts(Protocol):
    """Where delivery counts what it posted and what failed (the daemon's ``Metrics``)."""

    def message_out(self, channel: str, count: int = 1) -> None:
        """``count`` messages were posted to ``channel``, confirmed by the platform."""
        ...

    def error(self, channel: str, kind: Literal["send_retry", "send_failed"]) -> None:
        """A send on ``channel`` failed and is retried, or a reply did not reach its chat."""
        ...


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How one run's output is paced."""

    coalesce: CoalesceSettings | None = None
    """Join small blocks that stream in quick succession into one message (blocks mode)."""
    typing_delay: float = 1.0
    """Seconds a run may work with no piece out before "typing…" is shown (0: at once)."""
    typing_interval: float = 5.0
    """How often "typing…" is renewed while the run works (platforms expire it)."""
    journal: RunJournal | None = None
    """Where each block and final reply is written before it is sent (None: nowhere)."""
    mode: DeliveryMode | None = None
    """How this run is shown whatever its channel's mode (None: the channel's); a heartbeat
    check shows only its final answer, if any."""
    typing: bool = True
    """Whether "typing…" is shown at all (a heartbeat check that finds nothing shows nothing)."""
    previews: PreviewJournal | None = None
    """Where the run's preview messages are kept (``edit`` and ``stream`` modes; None:
    nowhere, and a resumed run starts a new preview)."""
    speech: Voice | None = None
    """Speaks the replies that ask for it (``media.speech``; None: none is spoken, and
    ``[[tts]]`` is dropped)."""
    voice: bool = False
    """Every reply of the run is spoken (the conversation's ``/voice on``)."""


class Outgoing(NamedTuple):
    """One piece of a run on its way to the chat.

    ``seq`` numbers the run's blocks and finals from 1 in the order they are sent. Partial
    replies carry 0: each preview replaces the one before, so none is worth keeping.
    """

    seq: int
    kind: PieceKind
    reply: BlockReply | PartialReply


class RunOutput(Protocol):
    """One run's replies, in order. The push methods never block; ``close`` waits."""

    @property
    def mode(self) -> DeliveryMode:
        """How this run is shown (decided per target when the output is opened)."""
        ...

    def block(self, reply: BlockReply) -> None:
        """A block the run finished (``blocks`` mode)."""
        ...

    def partial(self, reply: PartialReply) -> None:
        """The answer so far (``edit`` and ``stream`` modes); a newer one may replace it
        before it is shown."""
        ...

    def flush(self) -> None:
        """A tool starts: blocks held back for coalescing go out before anything it does."""
        ...

    def final(self, reply: BlockReply) -> None:
        """One of the run's final replies."""
        ...

    def cancel(self) -> None:
        """The run was stopped: from now on nothing more is posted (pieces already handed
        to the platform stay; what waits and what comes later is dropped)."""
        ...

    async def close(self, then: Callable[[], None] | None = None) -> None:
        """Every piece is out (or failed and was logged) and "typing…" has stopped.

        ``then`` is called once every piece is out, in the same step as the last one's
        confirmation, or refusal (not when the sender itself broke down)."""
        ...


StatusKind = Literal["message", "assistant"]
"""How a tool status shows: a status line message of its own, or the assistant thread's
status (Slack), whose ref is the thread's."""


@dataclass(frozen=True, slots=True)
class ToolActivity:
    """What a run's tool status says: the tool that runs, in plain words, and a short hint
    of what it works on (a host name; never an argument that could hold a secret)."""

    tool: str
    where: str = ""
    """Where the tool comes from (an MCP server's name), '' for a built-in."""
    hint: str = ""
    phrase: str = ""
    """What runs in words, shown instead of the tool's name ("a command"); '' for the name."""

    def _parts(self, tool: str) -> str:
        where = f" from {self.where}" if self.where else ""
        hint = f" ({self.hint})" if self.hint else ""
        return f"{self.phrase or tool}{where}{hint}"

    def line(self) -> str:
        """The status line's Markdown: ``⏳ Running `web_fetch` (example.com)…``."""
        return f"⏳ Running {self._parts(f'`{self.tool}`')}…"

    def status(self) -> str:
        """An assistant thread's status, which the platform shows after the app's name."""
        return f"is running {self._parts(self.tool)}…"


@dataclass(frozen=True, slots=True)
class PlanStep:
    """What a run's status says while no tool runs and its agent follows a plan (an ACP
    agent's ``plan``): the step under way, its place and the plan's length."""

    number: int
    of: int
    text: str

    def line(self) -> str:
        """The status line's Markdown: ``📋 Step 2 of 5: Write the tests``."""
        return f"📋 Step {self.number} of {self.of}: {self.text}"

    def status(self) -> str:
        return f"is on step {self.number} of {self.of}: {self.text}"


class StatusJournal(Protocol):
    """Where a run's tool status is kept while it shows (the store's ``StatusLines``), so a
    run resumed after a crash removes what was left; a failure to keep is only logged."""

    async def kept(self, kind: StatusKind, ref: MessageRef) -> None: ...

    async def removed(self, kind: StatusKind, ref: MessageRef) -> None: ...


class ToolStatus(Protocol):
    """One run's tool status in its chat (``agent.tool_progress: status``)."""

    def show(self, activity: ToolActivity | PlanStep | None) -> None:
        """Show ``activity`` (None: nothing); never blocks. Changes are coalesced and the
        platform is called at most once per edit interval."""
        ...

    async def close(self) -> None:
        """Remove what shows (at once, whatever the interval) and stop."""
        ...


class Delivery(Protocol):
    """Where the sessions send: a run's output, or a one-shot text."""

    def open_run(
        self,
        target: Target,
        options: RunOptions = ...,
        *,
        on_first_reply: Callable[[], None] | None = None,
        scope: RunScope | None = None,
    ) -> RunOutput:
        """Start a run's output to ``target``; "typing…" shows if no piece went out within
        the options' ``typing_delay``, until the first piece goes out or ``close``.

        ``on_first_reply`` is called once, right after the run's first piece reached the chat.
        ``scope``: the conversation the run is of; its lease fences every piece (None:
        unfenced).
        """
        ...

    async def send_text(
        self,
        target: Target,
        markdown: str,
        *,
        reply_to: str | None = None,
        media: Sequence[str] = (),
        audio_as_voice: bool = False,
        piece: PieceKey | None = None,
        buttons: Sequence[Sequence[Button]] = (),
        scope: RunScope | None = None,
    ) -> Sequence[MessageRef]:
        """Post one text now, with ``media`` (URLs or paths) uploaded; a refusal is raised.
        ``piece``: the outbox piece it is, whose key tags each message it posts; ``buttons``:
        rows of buttons under its last message (not with ``media``); ``scope``: the
        conversation it is sent for, whose lease fences it (None: unfenced)."""
        ...

    async def send_buttons(
        self,
        target: Target,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: RunScope | None = None,
    ) -> Sequence[MessageRef]:
        """Post ``markdown`` with ``rows`` of buttons under its last message."""
        ...

    async def clear_buttons(
        self, ref: MessageRef, markdown: str, *, scope: RunScope | None = None
    ) -> None:
        """Edit ``ref``'s message to ``markdown``, its buttons removed."""
        ...

    def resends_safely(self, target: Target, written_at: float, now: float) -> bool:
        """Whether ``target``'s platform recognises a piece written at ``written_at`` when it
        is sent again ``now`` with its key (``Capabilities.resend_window``)."""
        ...

    def open_status(
        self,
        target: Target,
        journal: StatusJournal | None = None,
        *,
        scope: RunScope | None = None,
    ) -> ToolStatus:
        """A run's tool status in ``target``'s chat, kept in ``journal`` while it shows."""
        ...

    async def remove_status(
        self, kind: StatusKind, ref: MessageRef, *, scope: RunScope | None = None
    ) -> None:
        """Remove a tool status an earlier process left showing; a refusal is raised."""
        ...

    def follower(self, target: Target) -> RunFollower | None:
        """``target``'s channel when its client follows a run's events and end itself (an
        ACP editor); None for a chat, which sees only the run's replies."""
        ...


class Outlet(Protocol):
    """What a ``RunOutbox`` sends to, one call per piece: ``ChannelDelivery`` for the chats
    of the channel adapters; a surface of another kind (a web page, an ACP session)
    implements only this, and opens a ``RunOutbox`` over it."""

    def delivery_mode(self, target: Target) -> DeliveryMode: ...

    async def deliver(
        self,
        target: Target,
        reply: BlockReply,
        *,
        kind: ReplyKind = "block",
        piece: PieceKey | None = None,
        scope: RunScope | None = None,
    ) -> Sequence[MessageRef]:
        """Post (or, for a final in ``edit`` mode, show in place) one reply; raise on refusal.
        ``piece``: its key in the outbox, for the platforms that can use it; ``scope``: the
        run's (the conversation's lease fences the reply)."""
        ...

    async def preview(
        self, target: Target, partial: PartialReply, scope: RunScope | None = None
    ) -> bool:
        """Show the answer so far (``edit`` mode); True when the chat shows a preview (one
        that failed is only logged: the next one, or the final, shows the text)."""
        ...

    def fits_caption(self, target: Target, text: str) -> bool:
        """Whether ``text`` goes out with a file as its caption in ``target``'s chat (else as a
        message of its own before the file)."""
        ...

    async def typing(self, target: Target) -> None:
        """Show "typing…" once; platforms expire it after a few seconds."""
        ...

    async def end_run(self, target: Target, scope: RunScope | None = None) -> None:
        """Every piece of the run is out (also after cancelled runs)."""
        ...


__all__ = [
    "DEFAULT_DELIVERY_MODE",
    "ChunkMode",
    "ChunkSettings",
    "CoalesceSettings",
    "Delivery",
    "DeliveryCounts",
    "DeliveryMode",
    "Outgoing",
    "Outlet",
    "PieceKind",
    "PreviewJournal",
    "ReplyKind",
    "RunJournal",
    "RunOptions",
    "RunOutput",
    "StatusJournal",
    "StatusKind",
    "ToolActivity",
    "ToolStatus",
]
