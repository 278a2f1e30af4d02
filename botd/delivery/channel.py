"""``ChannelDelivery``: the sessions' ``Delivery`` over the channel adapters, and each run's
``Outlet``, put together from its parts.

Each part does one thing for every conversation, and finds the adapter of a target's channel
through the same ``ChannelRoutes`` (``routing.py``: adapters, delivery modes and chunking by
channel instance):

* ``Sender`` (``sender.py``): texts, files and buttons posted, edits and deletes, each retried
  per conversation, with keyed resends of outbox pieces and the counts;
* ``Previews`` (``previews.py``, ``native.py``): the ``edit`` and ``stream`` previews and
  their journal, the final reply taking one over;
* ``TypingIndicator`` (``presence.py``): "typing…", throttled per conversation;
* ``ToolStatuses`` (``status.py``): a run's tool status, as an assistant status or a status
  line.

This class only routes each call to its part (with the ``RunScope`` of the conversation it is
made for), checks the conversation's lease before a reply goes out (``scope.check_fence``),
and opens each run's ``RunOutbox`` over itself. A surface
that is not a chat of one of the adapters (a web page, an ACP session) needs none of this: it
implements the ``Outlet`` protocol and opens a ``RunOutbox`` over it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from ..channels.base import ChannelAdapter, RunFollower
from ..chat import Capabilities, MessageRef, PieceKey, Target
from ..store import ButtonLedger
from ..subscriber import BlockReply, PartialReply
from .base import (
    ChunkSettings,
    DeliveryCounts,
    DeliveryMode,
    ReplyKind,
    RunOptions,
    StatusJournal,
    StatusKind,
)
from .media import MediaSettings, can_upload, fits_caption
from .outbox import RunOutbox
from .presence import TypingIndicator
from .previews import Previews
from .retrying import Retrier, RetrySettings
from .routing import ChannelRoutes, UnknownChannelError
from .scope import RunScope, check_fence
from .sender import ButtonRows, Sender
from .status import ChatStatus, ToolStatuses

_DEFAULT_OPTIONS = RunOptions()


class ChannelDelivery:
    """The sessions' ``Delivery`` over the channel adapters, and each run's ``Outlet``."""

    def __init__(
        self,
        adapters: Mapping[str, ChannelAdapter],
        modes: Mapping[str, DeliveryMode] | None = None,
        *,
        min_edit_interval: float = 1.0,
        typing_interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        retry: RetrySettings | Mapping[str, RetrySettings] | None = None,
        retrier: Retrier | None = None,
        media: MediaSettings | None = None,
        counts: DeliveryCounts | None = None,
        chunking: Mapping[str, ChunkSettings] | None = None,
        group_modes: Mapping[str, Mapping[str, DeliveryMode]] | None = None,
        buttons: ButtonLedger | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``modes`` is each channel's delivery mode, ``group_modes`` the modes of the groups
        that set their own (by channel, then chat id). ``retry`` is how failed sends are
        retried, for every channel or per channel name
        (a channel not named gets the defaults); ``chunking`` how each channel's replies are
        cut into messages (a channel not named: by length, at the platform's limit);
        ``retrier`` replaces the one made here;
        ``media`` is where uploaded files may come from (``media`` may be replaced later);
        ``counts`` hears of every message posted and every failed send (the metrics);
        ``buttons`` records the buttons put under each message (what a press is checked
        against), stamped with ``wall_clock``. Previews and tool statuses change at most
        every ``min_edit_interval`` seconds, "typing…" is sent at most every
        ``typing_interval`` seconds, both measured on ``clock``."""
        self._routes = ChannelRoutes(adapters, modes, chunking, group_modes)
        self._typing = TypingIndicator(self._routes, interval=typing_interval, clock=clock)
        self._sender = Sender(
            self._routes,
            retry=retry,
            retrier=retrier,
            media=media,
            counts=counts,
            buttons=buttons,
            wall_clock=wall_clock,
            message_sent=self._typing.message_sent,
        )
        self._previews = Previews(
            self._routes, self._sender, min_edit_interval=min_edit_interval, clock=clock
        )
        self._statuses = ToolStatuses(
            self._routes, self._sender, self._typing, interval=min_edit_interval
        )

    @property
    def media(self) -> MediaSettings:
        """Where uploaded files may come from (replaced at a reload)."""
        return self._sender.media

    @media.setter
    def media(self, settings: MediaSettings) -> None:
        self._sender.media = settings

    def platform_back(self, channel: str) -> None:
        """``channel``'s platform answers again after failing (its poller, gateway or socket
        got through): its replies waiting out a retry backoff are tried at once."""
        self._sender.platform_back(channel)

    def set_channels(
        self,
        adapters: Mapping[str, ChannelAdapter],
        modes: Mapping[str, DeliveryMode],
        retry: RetrySettings | Mapping[str, RetrySettings] | None = None,
        chunking: Mapping[str, ChunkSettings] | None = None,
        group_modes: Mapping[str, Mapping[str, DeliveryMode]] | None = None,
    ) -> None:
        """Serve these adapters with these modes from now on (a reload changed them)."""
        self._routes.update(adapters, modes, chunking, group_modes)
        if retry is not None:
            self._sender.set_retry(retry)

    # -- routing -------------------------------------------------------------------------

    def adapter_for(self, target: Target) -> ChannelAdapter:
        """The adapter of ``target``'s channel; ``UnknownChannelError`` when none serves it."""
        return self._routes.adapter_for(target)

    def capabilities(self, channel: str, adapter: ChannelAdapter) -> Capabilities:
        """What ``adapter``'s platform allows, held to the channel's ``text_chunk_limit``."""
        return self._routes.capabilities(channel, adapter)

    def delivery_mode(self, target: Target) -> DeliveryMode:
        """How replies appear in ``target``'s chat: its group's mode if it sets one, else
        its channel's, held to what the platform can do."""
        return self._routes.delivery_mode(target)

    def resends_safely(self, target: Target, written_at: float, now: float) -> bool:
        """Whether a piece written at ``written_at`` (wall clock) and sent again ``now`` with its
        ``PieceKey`` is recognised by ``target``'s platform instead of shown twice."""
        adapter = self._routes.adapter(target.channel)
        if adapter is None:
            return False
        return now - written_at < adapter.capabilities.resend_window

    def fits_caption(self, target: Target, text: str) -> bool:
        adapter = self._routes.adapter(target.channel)
        if adapter is None or not can_upload(adapter):
            return True  # no uploads: the references are named after the text, in one message
        return fits_caption(text, self._routes.capabilities(target.channel, adapter))

    # -- a run's output ------------------------------------------------------------------

    def open_run(
        self,
        target: Target,
        options: RunOptions = _DEFAULT_OPTIONS,
        *,
        on_first_reply: Callable[[], None] | None = None,
        scope: RunScope | None = None,
    ) -> RunOutbox:
        self._previews.begin(target, options.previews)
        return RunOutbox(self, target, options, on_first_reply=on_first_reply, scope=scope)

    async def deliver(
        self,
        target: Target,
        reply: BlockReply,
        *,
        kind: ReplyKind = "block",
        piece: PieceKey | None = None,
        scope: RunScope | None = None,
    ) -> list[MessageRef]:
        """Post ``reply``; the run's first final reply finishes an ``edit`` preview instead.
        ``piece`` keys the messages it posts (``send_text``)."""
        check_fence(scope)
        if kind == "final":
            refs = await self._previews.finish(target, reply, piece, scope)
            if refs is not None:
                return refs
        return await self._sender.send_text(
            target,
            reply.text,
            reply_to=reply.reply_to_id,
            media=reply.media_urls,
            audio_as_voice=reply.audio_as_voice,
            piece=piece,
            buttons=reply.buttons,
            scope=scope,
        )

    async def preview(
        self, target: Target, partial: PartialReply, scope: RunScope | None = None
    ) -> bool:
        """Show the answer so far (``edit`` and ``stream`` modes; ``Previews.show``)."""
        return await self._previews.show(target, partial, scope)

    async def typing(self, target: Target) -> None:
        await self._typing.typing(target)

    async def end_run(self, target: Target, scope: RunScope | None = None) -> None:
        """The run's replies are out: the next run starts a new preview, and a stream no
        final took over is stopped."""
        await self._previews.end(target, scope)

    # -- one-shot sends ------------------------------------------------------------------

    async def send_text(
        self,
        target: Target,
        markdown: str,
        *,
        reply_to: str | None = None,
        media: Sequence[str] = (),
        audio_as_voice: bool = False,
        piece: PieceKey | None = None,
        buttons: ButtonRows = (),
        scope: RunScope | None = None,
    ) -> list[MessageRef]:
        """Post ``markdown`` now, retried while it fails for a passing reason
        (``Sender.send_text``)."""
        return await self._sender.send_text(
            target,
            markdown,
            reply_to=reply_to,
            media=media,
            audio_as_voice=audio_as_voice,
            piece=piece,
            buttons=buttons,
            scope=scope,
        )

    async def send_buttons(
        self, target: Target, markdown: str, rows: ButtonRows, *, scope: RunScope | None = None
    ) -> list[MessageRef]:
        """Post ``markdown`` with ``rows`` of buttons under its last message, retried like
        ``send_text``. A platform without buttons gets the labels listed after the text."""
        return await self.send_text(target, markdown, buttons=rows, scope=scope)

    async def clear_buttons(
        self, ref: MessageRef, markdown: str, *, scope: RunScope | None = None
    ) -> None:
        """Edit ``ref``'s message to show ``markdown`` (one message's worth), its buttons
        removed; retried like an edit. A platform without buttons edits the text only."""
        await self._sender.edit_buttons(ref.target, ref, markdown, (), scope=scope)

    def follower(self, target: Target) -> RunFollower | None:
        """``target``'s adapter when it follows runs itself (``RunFollower``), else None."""
        adapter = self._routes.adapter(target.channel)
        return adapter if isinstance(adapter, RunFollower) else None

    # -- tool status ---------------------------------------------------------------------

    def open_status(
        self,
        target: Target,
        journal: StatusJournal | None = None,
        *,
        scope: RunScope | None = None,
    ) -> ChatStatus:
        """A run's tool status in ``target``'s chat (``status.py``), edited at most every
        ``min_edit_interval`` seconds."""
        return self._statuses.open(target, journal, scope)

    async def remove_status(
        self, kind: StatusKind, ref: MessageRef, *, scope: RunScope | None = None
    ) -> None:
        """Remove a tool status an earlier process left: delete its status line, or clear
        the thread's assistant status."""
        await self._statuses.remove(kind, ref, scope)


__all__ = ["ChannelDelivery", "UnknownChannelError"]
