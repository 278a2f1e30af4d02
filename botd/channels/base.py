"""What the core asks of a channel adapter, and where it hands inbound messages."""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from ..chat import (
    Attachment,
    Button,
    Capabilities,
    DownloadError,
    InboundMessage,
    MessageKey,
    MessageRef,
    Target,
)
from .errors import ChannelError

if TYPE_CHECKING:  # a type only: ``botd check`` loads no lease machinery
    from ..cluster.fencing import Fence
    from ..events import AgentEvent


def without_mention(text: str, mention: str, flags: re.RegexFlag = re.NOFLAG) -> str:
    """``text`` with every match of the regular expression ``mention`` (the bot's own name,
    which addresses it and is no part of what was said) taken out.

    Line breaks and indentation stay, so a pasted log or code block reaches the model as it
    was written: a mention at the start or end of a line goes with the blanks beside it, one
    between two words leaves one space, and the whole is stripped at both ends.
    """
    pattern = re.compile(rf"[ \t]*(?:{mention})[ \t]*", flags)

    def gap(match: re.Match[str]) -> str:
        start, end = match.start(), match.end()
        at_edge = start == 0 or text[start - 1] in "\r\n" or end == len(text) or text[end] in "\r\n"
        return "" if at_edge else " "

    return pattern.sub(gap, text).strip()


Ack = Callable[[], None]
"""What an adapter gives the sink when it wants to know as soon as nothing of a message can
be lost any more, before the sink returns: the router calls it right after the accept (the
message is in the durable inbox) or, for a message it drops, once its ids are recorded; then
it goes on (handing the message to its conversation, which may answer a chat command first,
or sending a pairing code). Slack acknowledges at that point, so a slow answer cannot hold
the ack."""


class InboundSink(Protocol):
    """Where an adapter hands each inbound message (the router's ``handle``), with its
    acknowledgement if it wants one (``Ack``; None: it waits for the sink to return).
    Adapters ignore what it returns (the router's decision)."""

    def __call__(
        self, message: InboundMessage, /, *, ack: Ack | None = None
    ) -> Awaitable[object]: ...


@dataclass(frozen=True, slots=True)
class SendScope:
    """What an adapter call that posts, edits or deletes a message is made for, given to it
    by the delivery (None, or a scope with neither: a call for nothing in particular).

    ``fence``: the lease of the conversation the call is made for (None: unfenced). The
    adapter hands it to its SDK's HTTP client with the call, which checks it again as the
    request is written (``Fence.check_send``: after the SDK's own rate limiting): a request
    held up past the lease's end is not written.

    ``key``: the key of the message being posted, for a reply piece's ``send``,
    ``send_buttons`` and ``send_file`` (None for anything else: previews, notices, command
    answers). An adapter whose platform can recognise a message sent again (Discord's
    ``nonce``) tags the message with ``key.token()``; one that can look it up (Slack's
    message metadata) tags it and, when ``key.piece.unconfirmed``, looks for it first and
    returns the message found instead of posting. Its ``Capabilities.resend_window`` says
    for how long that holds. A retry of the same message carries the same key. Adapters that
    know nothing of it post as usual."""

    fence: Fence | None = None
    key: MessageKey | None = None
    final: bool = False
    """The call carries an answer (the delivery's retried calls: a reply's pieces, a final
    edit), not a preview or a status line: a platform budget lets it go first."""
    status_line: bool = False
    """The call posts or edits a run's tool status line: a platform budget lets it go after
    answers and previews (``botd.channels.budget.Priority.STATUS``)."""
    silent: bool = False
    """The message a ``send`` posts is not the answer (a status line, a preview's further
    message): posted without a notification where the platform can (Telegram's
    ``disable_notification``, Discord's ``SUPPRESS_NOTIFICATIONS``; Slack has no such
    thing for a bot's message)."""


@dataclass(frozen=True, slots=True)
class LinkPreviews:
    """Whether links in the messages an adapter posts to a chat show a preview: the
    channel's ``link_previews``, or that of the group (by chat id) that sets its own. Read
    when the adapter is built: a reload that changes either restarts the channel."""

    shown: bool = True
    groups: Mapping[str, bool] = field(default_factory=dict)

    def shown_in(self, chat_id: str) -> bool:
        """Whether links in a message to ``chat_id`` show a preview."""
        return self.groups.get(chat_id, self.shown)


def fence_of(scope: SendScope | None) -> Fence | None:
    """The fence a call with ``scope`` is made under (None: unfenced)."""
    return None if scope is None else scope.fence


def key_of(scope: SendScope | None) -> MessageKey | None:
    """The key of the message a call with ``scope`` posts (None: no reply piece's)."""
    return None if scope is None else scope.key


log = logging.getLogger(__name__)


class UntilAccepted:
    """Hands a message to the sink and returns once it was accepted (its ``Ack``); what
    the sink still does after the accept (answering a chat command, say) goes on in the
    background, so an acknowledgement the platform wants soon is never held by it. Those
    hand-offs belong to it: ``settle`` waits for them (the adapter's ``stop_inbound``)."""

    def __init__(self, channel: str) -> None:
        """``channel``: the channel instance's name, which its log lines start with."""
        self._channel = channel
        self._handling: set[asyncio.Future[object]] = set()

    async def hand(self, sink: InboundSink, message: InboundMessage) -> None:
        """Return once ``message`` was accepted or the sink returned; a failure before the
        accept is raised (the message was not taken)."""
        accepted = asyncio.Event()
        handling = asyncio.ensure_future(sink(message, ack=accepted.set))
        signalled = asyncio.ensure_future(accepted.wait())
        try:
            await asyncio.wait({handling, signalled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            signalled.cancel()
            await asyncio.wait({signalled})
        if handling.done():
            handling.result()
            return
        self._handling.add(handling)
        handling.add_done_callback(self._handled)

    async def settle(self) -> None:
        """Wait until every accepted message's hand-off has ended (it only hands the message
        on, the accept being durable already)."""
        while self._handling:
            await asyncio.wait(set(self._handling))

    def _handled(self, task: asyncio.Future[object]) -> None:
        self._handling.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "%s: handling an accepted message failed",
                self._channel,
                exc_info=task.exception(),
            )


FileKind = Literal["photo", "audio", "video", "document"]


@dataclass(frozen=True, slots=True)
class OutboundFile:
    """A file to upload: its bytes, the name it is shown under and its media type.

    ``as_voice`` asks for an audio file to be sent as a voice note where the platform has
    them (Telegram); elsewhere it is an ordinary audio file.
    """

    data: bytes
    filename: str
    content_type: str = ""
    as_voice: bool = False
    source: str = ""
    """Where the bytes came from (the URL or path the agent named), for logs and the console."""

    @property
    def media_type(self) -> str:
        """The declared media type, else the one the file name suggests ('' when neither)."""
        if self.content_type:
            return self.content_type.lower()
        guessed, _ = mimetypes.guess_type(self.filename)
        return (guessed or "").lower()

    @property
    def kind(self) -> FileKind:
        """What the file is shown as: a photo (jpeg, png, webp), audio, video or a document."""
        media = self.media_type
        if media in ("image/jpeg", "image/png", "image/webp"):
            return "photo"
        if media.startswith("audio/"):
            return "audio"
        if media.startswith("video/"):
            return "video"
        return "document"


class PlatformLink:
    """How an adapter tells botd whether its platform answers while its SDK reconnects by
    itself (``ChannelContext.link`` gives one per channel).

    ``unreachable(error)`` at every try that failed (a poll, a reconnect: ``error`` in the
    platform's or the SDK's words), ``reachable()`` once one went through; calling either
    again changes nothing. botd shows a channel that stayed unreachable longer than
    ``health.down_after`` as down (``/healthz``, ``/status``) and restarts nothing for it. A
    connection that is gone for good (a revoked token) is ``on_channel_down``'s instead.
    Without a listener (tests, ``botd doctor``) both do nothing.
    """

    def __init__(self, report: Callable[[str | None], None] | None = None) -> None:
        self._report = report

    def unreachable(self, error: str) -> None:
        if self._report is not None:
            self._report(error)

    def reachable(self) -> None:
        if self._report is not None:
            self._report(None)


@runtime_checkable
class LeasedInput(Protocol):
    """An adapter whose input one node of several takes at a time, each part under a lease
    (a Telegram bot's poller, a Discord shard): on the other nodes it is on standby."""

    def input_leases(self) -> list[str]:
        """The names of those leases (none when this node takes its input by itself: alone,
        or a webhook every node serves)."""
        ...


@runtime_checkable
class DraftStreams(Protocol):
    """An adapter whose platform shows an answer being written as a draft that is no
    message (Telegram's ``sendMessageDraft``): temporary, gone once a message is posted."""

    def can_draft(self, target: Target) -> bool:
        """Whether ``target``'s chat takes drafts at all (Telegram: private chats only)."""
        ...

    async def draft(self, target: Target, draft_id: int, markdown: str) -> None:
        """Show ``markdown`` (one message's worth) as the draft ``draft_id`` in ``target``'s
        chat; raises ``ChannelError`` in the platform's words when it refuses."""
        ...


@runtime_checkable
class MessageStreams(Protocol):
    """An adapter whose platform streams an answer into one message (Slack's
    ``chat.startStream`` / ``appendStream`` / ``stopStream``): the message stays."""

    def can_stream(self, target: Target) -> bool:
        """Whether an answer to ``target`` can stream (Slack: in a thread, where its
        recipient is known)."""
        ...

    async def stream_start(self, target: Target, markdown: str) -> MessageRef:
        """Start a streamed message showing ``markdown``; its ref."""
        ...

    async def stream_append(self, ref: MessageRef, markdown: str) -> None:
        """Add ``markdown`` at the end of the streamed message."""
        ...

    async def stream_stop(self, ref: MessageRef, markdown: str = "") -> None:
        """End the stream, ``markdown`` added at its end first; it is a plain message now."""
        ...


class ChannelAdapter(Protocol):
    """One platform connection. Raw SDK objects never leave the adapter.

    ``send`` takes Markdown as the agent wrote it; the adapter renders it for its platform,
    splits it under its limits (``Capabilities``) and returns one ref per message posted.

    Failures are ``ChannelError``s (``botd.channels.errors``) in the platform's own words,
    marked ``retryable`` when trying again may help (a 5xx, a 429 with its ``retry_after``, a
    lost connection) and ``maybe_delivered`` when the request may have landed; a failed
    ``start`` raises ``ChannelStartError`` with a one-line reason. Once started, an adapter
    whose SDK reconnects by itself says through its ``PlatformLink`` whether the platform
    answers.
    """

    name: str
    capabilities: Capabilities

    async def start(self, sink: InboundSink) -> None:
        """Connect and begin delivering inbound messages to ``sink``; returns once running.

        Raises ``ChannelStartError`` when the platform refuses (a rejected token, refused
        permissions) or cannot be reached; nothing is left running then.
        """
        ...

    async def stop_inbound(self) -> None:
        """Stop receiving, keep sending: shutdown lets running answers finish after this.

        What has not been received stays with the platform where it can (Telegram's queue),
        so a restart picks it up instead of it being taken in and dropped.
        """
        ...

    async def stop(self) -> None: ...

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]: ...

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """Make ``ref``'s message show ``markdown``, rendered and split as ``send`` does.

        The first part replaces the message's text; text that outgrows one message is
        never dropped: the rest is posted as new messages right after it, in the same chat
        and thread. Returns ``ref`` first, then a ref per new message. An empty text leaves
        the message as it is (and returns ``[ref]``). An adapter whose platform cannot edit
        (``capabilities.can_edit`` false) posts the text anew and returns what ``send`` does.
        """
        ...

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        """Delete ``ref``'s message; one that is already gone counts as deleted.

        A platform without deletion (the console) does nothing.
        """
        ...

    async def send_file(
        self,
        target: Target,
        file: OutboundFile,
        caption: str = "",
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """Upload ``file`` to ``target`` with ``caption`` (Markdown, at most
        ``capabilities.caption_limit`` once rendered; empty: none); one ref per message.

        Fails like ``send``; a file too large for the platform is a refusal (not retryable).
        An adapter that cannot upload raises a ``ChannelError`` saying so.
        """
        raise ChannelError(f"{self.name}: file uploads are not supported")

    async def react(self, ref: MessageRef, emoji: str) -> None: ...

    async def typing(self, target: Target) -> None: ...

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The bytes of ``attachment`` (one of an inbound message of this adapter's).

        Reads no more than ``max_bytes``: a file declared or found larger raises
        ``TooLarge``; any other failure raises ``DownloadError``. This default is for
        adapters whose platform sends no files (the console).
        """
        raise DownloadError(f"files cannot be fetched from {self.name}")


@runtime_checkable
class AssistantStatus(Protocol):
    """An adapter whose platform shows a status under the bot's name in a thread (Slack's
    assistant threads): delivery shows a run's tool status there rather than as a message."""

    async def set_assistant_status(self, target: Target, status: str) -> None:
        """Show ``status`` in ``target``'s thread ('' clears it). A platform that refuses
        (not such a thread, a missing scope) raises a ``ChannelError`` that is not
        retryable, in its own words."""
        ...


@runtime_checkable
class ChatAdmins(Protocol):
    """An adapter that can tell whether a user is one of a chat's admins, for the channels
    whose chat admins count as the bot's owners (``admins_are_owners``, ``botd.owners``).

    What an admin is follows the platform: Telegram's chat administrators of that group,
    Slack's workspace admins and owners (whatever the chat), Discord's members with Manage
    Server in the chat's server, and its owner. A direct chat has no admins on Telegram and
    Discord. A lookup the platform refuses raises (a ``ChannelError`` in its words): the
    caller counts it as "not an admin"."""

    async def is_chat_admin(self, chat_id: str, user_id: str) -> bool: ...


@runtime_checkable
class ReactionSetter(Protocol):
    """An adapter whose platform shows the bot's own reaction on a message, which botd sets
    as the message's status (taken, done, failed: ``botd.conversation.reactions``).

    ``set_reaction`` makes the bot's reaction on ``ref``'s message ``emoji`` (None: none),
    in place of ``replacing``, the one botd set before (None: none): Telegram replaces the
    set in one call, Slack and Discord remove the old one and add the new. A reaction that
    is already there, or already gone, counts as done. A refusal (a missing permission or
    scope, an emoji the platform does not have) is a ``ChannelError`` in the platform's
    words; nothing is retried here.
    """

    async def set_reaction(
        self, ref: MessageRef, emoji: str | None, *, replacing: str | None = None
    ) -> None: ...


def thoughts_followed(reasoning: str) -> bool:
    """Whether a ``RunFollower`` is shown the model's thinking under ``agent.reasoning:
    reasoning``: unless it is ``off`` (its client shows thoughts itself, whatever the
    chats' delivery does with reasoning). The one rule for the live stream and for what a
    client is shown again later (an ACP ``session/load``)."""
    return reasoning != "off"


@runtime_checkable
class RunFollower(Protocol):
    """An adapter whose client follows a run step by step, not only through its replies (an
    ACP editor: tool calls with their states, thoughts, and the turn's stop reason).

    The run's replies still reach it as sends, through the subscriber and the delivery like
    any channel's (block and dedupe rules hold); this hears the rest: every event, the
    model's thinking only when ``thoughts_followed``."""

    def run_event(self, target: Target, event: AgentEvent) -> None:
        """One event of the run answering in ``target``'s chat, as it happens; never blocks."""
        ...

    async def run_over(self, target: Target, outcome: str) -> None:
        """The run answering in ``target``'s chat is over and every reply of it is out:
        ``outcome`` is the run's stop reason (``end_turn``, ``cancelled``…) or
        ``exception`` when it failed."""
        ...


@runtime_checkable
class ButtonAdapter(Protocol):
    """An adapter whose platform shows buttons under a message (Telegram, Slack, Discord).

    A press of one comes in through the sink as an ``InboundMessage`` with ``press`` set; the
    sink's result has an ``answer`` (a ``PressAnswer``, or None when the press was not
    decided) that the adapter acknowledges the press with, within the platform's deadline.
    """

    async def send_buttons(
        self,
        target: Target,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """Post ``markdown`` like ``send``, with ``rows`` of buttons under its last message."""
        ...

    async def edit_buttons(
        self,
        ref: MessageRef,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> None:
        """Make ``ref``'s message show ``markdown`` (one message's worth) with ``rows`` of
        buttons under it (none: its buttons removed)."""
        ...
