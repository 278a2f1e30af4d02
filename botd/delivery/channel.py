"""``ChannelDelivery``: replies to the adapter of their platform.

It finds the adapter for a target's channel and hands it the Markdown (each adapter renders
and splits it for its platform). Media the agent attached are uploaded as files, the text as
the first one's caption when it fits (``media.py``). A platform's refusal is logged in its
own words and raised to the caller: a run's outbox logs it and carries on; nothing is
dropped silently.

Every send, final edit and delete passes through a ``Retrier`` (``retrying.py``), per
conversation: a failure that may pass (a 5xx, a 429, a lost connection) is tried again with
backoff, respecting the platform's ``retry_after``, for the channel's retry budget (five
minutes unless configured); later pieces of the conversation wait behind it, and other
conversations are not held up. A refusal (a 4xx) is not retried. When the budget is spent
the piece is given up, logged, and the chat is told once, if it can be reached, that a reply
could not be delivered. A text longer than one message is sent message by message, so a
retry never posts again a part that already went out.

How a run reaches a chat is chosen per channel (``DeliveryMode``):

* ``blocks`` (the default): each block the agent finishes is its own message.
* ``final``: only the run's final answer is posted; the sessions stream no blocks.
* ``edit``: one preview per run, posted at the first partial reply and edited in place at
  most every ``min_edit_interval`` seconds, then finished in place with the final text (see
  ``preview.py``). A channel whose adapter cannot edit falls back to ``blocks``. A preview
  edit that fails is only logged (the next one or the final shows the text). A final edit
  that fails, after its retries, must neither lose the answer nor show it twice beside the
  stale preview, so the preview message is deleted and the final text posted anew; when the
  delete fails too, the final text is posted anew only if the failed edit certainly did not
  land (a refusal, a 5xx): then the stale preview shows an outdated part and the answer is
  shown once. If the edit may have landed (it timed out after it was sent), nothing new is
  posted, since the preview most likely shows the answer already.

Each channel cuts replies into messages as its ``ChunkSettings`` say (``chunk_mode``,
``text_chunk_limit``): under its limit, which is the platform's own unless set lower, and in
``newline`` mode one message per paragraph. The cut applies to every text it posts: blocks,
finals, captions and the pieces of an ``edit`` preview.

Each message a platform confirmed is counted (``counts``, the daemon's metrics) where it is
sent: a text (each part of a long one), an upload, the give-up notice, an ``edit`` preview's
message when it is posted (its edits are not counted again). Each failed attempt that is
retried counts as a ``send_retry``, each reply refused or given up as a ``send_failed``.

A run's tool status (``agent.tool_progress``) is opened here too (``open_status``,
``status.py``): the assistant status of a thread where the adapter has one (Slack), else a
status line message; "typing…" is not sent while a thread's assistant status shows a tool.

The typing indicator is cosmetic: a failure is logged and never reaches the run. It is
sent at most once per conversation every ``typing_interval`` seconds (the platforms keep it
showing about that long), across runs too, unless a message was sent there since (which
clears it on the platforms).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from functools import partial
from typing import Literal, TypeVar

from ..bounded import Recent
from ..channels.base import (
    AssistantStatus,
    ButtonAdapter,
    ChannelAdapter,
    DraftStreams,
    MessageStreams,
    OutboundFile,
    sending,
)
from ..channels.errors import ChannelError
from ..chat import Button, Capabilities, MessageKey, MessageRef, PieceKey, Target
from ..cluster import fencing
from ..store import ButtonLedger, PostedButtons
from ..subscriber import BlockReply, PartialReply, resolve_text_chunk_limit
from .base import (
    DEFAULT_DELIVERY_MODE,
    ChunkMode,
    ChunkSettings,
    DeliveryCounts,
    DeliveryMode,
    PreviewJournal,
    ReplyKind,
    RunOptions,
    StatusJournal,
    StatusKind,
)
from .media import MediaSettings, can_upload, fits_caption, send_with_media, upload_file
from .outbox import RunOutbox
from .preview import Native, Preview, paragraphs, pieces
from .retrying import DeliveryGivenUp, Retrier, RetrySettings
from .status import ChatStatus

log = logging.getLogger(__name__)

_DEFAULT_OPTIONS = RunOptions()
_DEFAULT_CHUNKING = ChunkSettings()
_T = TypeVar("_T")
ButtonRows = Sequence[Sequence[Button]]
_ONE_ATTEMPT = RetrySettings(budget=0.0)

GIVE_UP_NOTICE = "⚠️ A reply could not be delivered: this chat could not be reached for a while."
"""Told once per outage, when a piece was given up (if the chat can be reached by then)."""


CHOOSE = "Choose:"
"""The text of buttons the agent sent without any."""

_TYPED_KEPT = 1024
"""Past this many remembered typing times, the expired ones are dropped."""
_REFUSED_KEPT = 4096
"""How many conversations are remembered as refusing a native stream, or the assistant status
(each kind apart; the oldest forgotten, then refused and logged again at most once)."""


class _PieceMessages:
    """Numbers the messages of one piece in the order they are posted (``MessageKey``)."""

    def __init__(self, piece: PieceKey) -> None:
        self.piece = piece
        self.count = 0

    def next(self) -> MessageKey:
        key = self.piece.message(self.count)
        self.count += 1
        return key


_piece: ContextVar[_PieceMessages | None] = ContextVar("_piece", default=None)
"""The piece ``send_text`` is posting, if it was given one: its messages get their keys."""


class UnknownChannelError(LookupError):
    """A reply for a channel no adapter serves."""


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
        against), stamped with ``wall_clock``."""
        self.media = media or MediaSettings()
        self._buttons = buttons
        self._wall_clock = wall_clock
        self._counts = counts
        self._adapters = dict(adapters)
        self._modes = dict(modes or {})
        self._group_modes = {name: dict(chats) for name, chats in (group_modes or {}).items()}
        self._chunking = dict(chunking or {})
        self._min_edit_interval = min_edit_interval
        self._typing_interval = typing_interval
        self._typed_at: dict[_Key, float] = {}
        self._clock = clock
        self._retrier = retrier or Retrier()
        self._retry: dict[str, RetrySettings] = {}
        self._set_retry(retry)
        # Keyed by target: sessions never run two runs for one conversation at once.
        self._previews: dict[Target, Preview] = {}
        self._no_assistant_status: Recent[_Key, None] = Recent(_REFUSED_KEPT)
        """Conversations whose platform refused the assistant status (a status line instead)."""
        self._assistant_showing: set[_Key] = set()
        """Conversations showing a run's tool status as their assistant status."""
        self._journals: dict[Target, PreviewJournal] = {}
        # Conversations whose platform refused a native stream: edit previews from then on.
        self._fell_back: Recent[_Key, None] = Recent(_REFUSED_KEPT)

    def set_channels(
        self,
        adapters: Mapping[str, ChannelAdapter],
        modes: Mapping[str, DeliveryMode],
        retry: RetrySettings | Mapping[str, RetrySettings] | None = None,
        chunking: Mapping[str, ChunkSettings] | None = None,
        group_modes: Mapping[str, Mapping[str, DeliveryMode]] | None = None,
    ) -> None:
        """Serve these adapters with these modes from now on (a reload changed them)."""
        self._adapters = dict(adapters)
        self._modes = dict(modes)
        self._group_modes = {name: dict(chats) for name, chats in (group_modes or {}).items()}
        if chunking is not None:
            self._chunking = dict(chunking)
        if retry is not None:
            self._set_retry(retry)

    def _set_retry(self, retry: RetrySettings | Mapping[str, RetrySettings] | None) -> None:
        if isinstance(retry, RetrySettings):
            self._retrier.settings, self._retry = retry, {}
        else:
            self._retry = dict(retry or {})

    def open_run(
        self,
        target: Target,
        options: RunOptions = _DEFAULT_OPTIONS,
        *,
        on_first_reply: Callable[[], None] | None = None,
    ) -> RunOutbox:
        if options.previews is not None:
            self._journals[target] = options.previews
        return RunOutbox(self, target, options, on_first_reply=on_first_reply)

    def adapter_for(self, target: Target) -> ChannelAdapter:
        adapter = self._adapters.get(target.channel)
        if adapter is None:
            known = ", ".join(sorted(self._adapters)) or "none"
            raise UnknownChannelError(f"no adapter for channel {target.channel!r} (have: {known})")
        return adapter

    def capabilities(self, channel: str, adapter: ChannelAdapter) -> Capabilities:
        """What ``adapter``'s platform allows, held to the channel's ``text_chunk_limit``."""
        caps = adapter.capabilities
        configured = self._chunking.get(channel, _DEFAULT_CHUNKING).limit
        if configured is None or configured >= caps.text_limit:
            return caps
        limit = resolve_text_chunk_limit(caps.text_limit, configured)
        caption = caps.caption_limit
        return replace(
            caps, text_limit=limit, caption_limit=None if caption is None else min(caption, limit)
        )

    def _chunk_mode(self, channel: str) -> ChunkMode:
        return self._chunking.get(channel, _DEFAULT_CHUNKING).mode

    def delivery_mode(self, target: Target) -> DeliveryMode:
        """How replies appear in ``target``'s chat: its group's mode if it sets one, else
        its channel's, held to what the platform can do."""
        mode = self._group_modes.get(target.channel, {}).get(target.chat_id) or self._modes.get(
            target.channel, DEFAULT_DELIVERY_MODE
        )
        if mode in ("edit", "stream"):
            adapter = self._adapters.get(target.channel)
            if adapter is None or not adapter.capabilities.can_edit:
                return "blocks"
            if mode == "stream" and not isinstance(adapter, DraftStreams | MessageStreams):
                return "edit"  # no native streaming on this platform: the edit preview
        return mode

    def resends_safely(self, target: Target, written_at: float, now: float) -> bool:
        """Whether a piece written at ``written_at`` (wall clock) and sent again ``now`` with its
        ``PieceKey`` is recognised by ``target``'s platform instead of shown twice."""
        adapter = self._adapters.get(target.channel)
        if adapter is None:
            return False
        return now - written_at < adapter.capabilities.resend_window

    async def deliver(
        self,
        target: Target,
        reply: BlockReply,
        *,
        kind: ReplyKind = "block",
        piece: PieceKey | None = None,
    ) -> list[MessageRef]:
        """Post ``reply``; the run's first final reply finishes an ``edit`` preview instead.
        ``piece`` keys the messages it posts (``send_text``)."""
        fencing.check_send()
        if kind == "final" and (self._previews or self._journals):
            preview = self._previews.get(target)
            if preview is None and target in self._journals:
                # No partial reply came, but an interrupted attempt may have left a preview.
                preview = await self._left_preview(target)
            if preview is not None and not preview.finished:
                # The run's first final reply takes over the preview; any further ones are new.
                preview.finished = True
                await self._show(target, preview, reply.text, final=True)
                if reply.buttons and preview.refs:
                    await self._add_buttons(target, preview.refs[-1], preview.shown[-1], reply)
                refs = list(preview.refs)
                if reply.media_urls:
                    refs.extend(
                        await self.send_text(
                            target,
                            "",
                            media=reply.media_urls,
                            audio_as_voice=reply.audio_as_voice,
                            piece=piece,
                        )
                    )
                return refs
        return await self.send_text(
            target,
            reply.text,
            reply_to=reply.reply_to_id,
            media=reply.media_urls,
            audio_as_voice=reply.audio_as_voice,
            piece=piece,
            buttons=reply.buttons,
        )

    async def _add_buttons(
        self, target: Target, ref: MessageRef, shown: str, reply: BlockReply
    ) -> None:
        """Put the final reply's buttons under the last message of the finished preview."""
        adapter = self.adapter_for(target)
        edit: Callable[[], Awaitable[object]]
        if isinstance(adapter, ButtonAdapter):
            edit = partial(adapter.edit_buttons, ref, shown, reply.buttons)
        else:  # no buttons there: the choices are listed in the text
            edit = partial(adapter.edit, ref, with_choices_listed(shown, reply.buttons))
        what = f"{target.channel} edit in {target.chat_id}"
        await self._retried(_conversation(target), what, edit)
        if isinstance(adapter, ButtonAdapter):
            self._buttons_shown(ref, reply.buttons)

    def _buttons_shown(self, ref: MessageRef, rows: ButtonRows) -> None:
        """Record that ``ref``'s message shows ``rows``: the only presses it takes."""
        if self._buttons is None or not ref.message_id:
            return
        shown = tuple(tuple(row) for row in rows)
        try:
            self._buttons.buttons_posted_soon(PostedButtons(ref, shown, self._wall_clock()))
        except Exception as exc:  # its presses are refused: the answer itself stands
            log.warning("the buttons of message %s were not recorded: %s", ref.message_id, exc)

    def fits_caption(self, target: Target, text: str) -> bool:
        adapter = self._adapters.get(target.channel)
        if adapter is None or not can_upload(adapter):
            return True  # no uploads: the references are named after the text, in one message
        return fits_caption(text, self.capabilities(target.channel, adapter))

    async def preview(self, target: Target, partial: PartialReply) -> bool:
        """Show the answer so far (``edit`` and ``stream`` modes); throttled (one update per
        ``min_edit_interval``, a native stream's too), and a failure only logged.

        True when the chat shows a preview of the run (this one or an earlier one)."""
        mode = self.delivery_mode(target)
        if mode not in ("edit", "stream"):
            return False
        fencing.check_send()
        now = self._clock()
        preview = self._previews.get(target)
        if preview is None:
            preview = await self._left_preview(target) or self._new_preview(target, mode)
        elif preview.finished or now - preview.edited_at < self._min_edit_interval:
            return preview.showing  # skipped text is not lost: the next update or the final
        preview.edited_at = now
        try:
            await self._show(target, preview, partial.text, final=False)
        except Exception as exc:
            log.warning("%s preview in %s failed: %s", target.channel, target.chat_id, exc)
        return preview.showing

    def _new_preview(self, target: Target, mode: DeliveryMode) -> Preview:
        preview = self._previews[target] = Preview(journal=self._journals.get(target))
        if mode == "stream":
            preview.native = self._native(target)
            preview.draft_id = random.randrange(1, 2**31)
        return preview

    async def _left_preview(self, target: Target) -> Preview | None:
        """The preview an interrupted attempt of this run left (its journal says), taken
        over as an edit preview whose texts are not known; None when there is none."""
        journal = self._journals.get(target)
        if journal is None or target in self._previews:
            return self._previews.get(target)
        try:
            left = await journal.preview_left()
        except Exception as exc:
            log.warning("reading the preview left in %s failed: %s", target.chat_id, exc)
            left = None
        if left is None or not left.refs:
            return None
        preview = self._previews[target] = Preview(
            refs=list(left.refs),
            shown=[""] * len(left.refs),
            streaming=left.streaming,
            journal=journal,
            kept=(left.refs, left.streaming),
        )
        return preview

    def _native(self, target: Target) -> Native | None:
        """How ``target``'s chat can show a streamed answer natively, if it can: else the
        edit preview, said once per conversation."""
        adapter = self._adapters.get(target.channel)
        if _conversation(target) in self._fell_back:
            return None
        if isinstance(adapter, DraftStreams):
            if adapter.can_draft(target):
                return "draft"
            self._fall_back(target, "drafts are for private chats only")
        elif isinstance(adapter, MessageStreams):
            if adapter.can_stream(target):
                return "stream"
            self._fall_back(target, "a stream needs a thread, and outside a DM its recipient")
        return None

    def _fall_back(self, target: Target, why: object) -> None:
        """From now on this conversation is shown as an edit preview; logged once."""
        self._fell_back.remember(_conversation(target), None)
        log.warning(
            "%s: no native streaming in %s (%s); showing answers there as an edited preview",
            target.channel,
            target.route(),
            why,
        )

    def open_status(self, target: Target, journal: StatusJournal | None = None) -> ChatStatus:
        """A run's tool status in ``target``'s chat (``status.py``), edited at most every
        ``min_edit_interval`` seconds."""
        return ChatStatus(self, target, journal, self._min_edit_interval)

    def assistant_status(self, target: Target) -> AssistantStatus | None:
        adapter = self._adapters.get(target.channel)
        if not isinstance(adapter, AssistantStatus) or target.thread_id is None:
            return None
        if _conversation(target) in self._no_assistant_status:
            return None
        return adapter

    def assistant_refused(self, target: Target, error: Exception) -> None:
        """Log once per conversation that its tool status shows as a status line instead."""
        key = _conversation(target)
        if key in self._no_assistant_status:
            return
        self._no_assistant_status.remember(key, None)
        log.info(
            "%s: no assistant status in %s (%s); tool progress shows as a status line there",
            target.channel,
            target.route(),
            error,
        )

    def status_showing(self, target: Target, showing: bool) -> None:
        if showing:
            self._assistant_showing.add(_conversation(target))
        else:
            self._assistant_showing.discard(_conversation(target))

    async def delete_status_line(self, ref: MessageRef) -> None:
        target = ref.target
        adapter = self.adapter_for(target)
        await self._retried(
            _conversation(target),
            f"{target.channel} delete in {target.chat_id}",
            lambda: adapter.delete(ref),
        )

    async def remove_status(self, kind: StatusKind, ref: MessageRef) -> None:
        """Remove a tool status an earlier process left: delete its status line, or clear
        the thread's assistant status."""
        if kind == "message":
            await self.delete_status_line(ref)
            return
        adapter = self._adapters.get(ref.target.channel)
        if isinstance(adapter, AssistantStatus):
            await adapter.set_assistant_status(ref.target, "")

    async def end_run(self, target: Target) -> None:
        """The run's replies are out: the next run starts a new preview. A stream no final
        took over (a stopped run, an answer the messaging tool sent) is stopped with what it
        shows, so it never stays open."""
        self._journals.pop(target, None)
        preview = self._previews.pop(target, None)
        if preview is not None and preview.streaming and preview.refs:
            adapter = self._adapters.get(target.channel)
            if isinstance(adapter, MessageStreams):
                try:
                    fencing.check_send()
                    await adapter.stream_stop(preview.refs[0])
                except Exception as exc:
                    log.warning(
                        "%s stream in %s not stopped: %s", target.channel, target.route(), exc
                    )

    async def typing(self, target: Target) -> None:
        now = self._clock()
        key = _conversation(target)
        if key in self._assistant_showing:
            return  # the thread's status says which tool runs: "typing…" must not replace it
        last = self._typed_at.get(key)
        if last is not None and now - last < self._typing_interval:
            return  # the last one still shows
        if len(self._typed_at) >= _TYPED_KEPT:
            self._typed_at = {
                k: t for k, t in self._typed_at.items() if now - t < self._typing_interval
            }
        self._typed_at[key] = now
        try:
            await self.adapter_for(target).typing(target)
        except Exception as exc:
            log.warning("%s typing in %s failed: %s", target.channel, target.chat_id, exc)

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
    ) -> list[MessageRef]:
        """Post ``markdown`` now, retried while it fails for a passing reason.

        ``media`` (URLs or local paths) are uploaded with it, ``markdown`` as the first one's
        caption when it fits; a file that cannot be sent is posted as text (``media.py``).
        With ``piece``, each message it posts (each part of a long text, each upload) is
        keyed for the adapter (``channels.base.sending``), the same key in every retry.
        Raises the platform's refusal, or ``DeliveryGivenUp`` once the retry budget is spent
        (after telling the chat, if it can be reached, that a reply was lost).
        """
        token = _piece.set(None if piece is None else _PieceMessages(piece))
        try:
            return await self._send_text(target, markdown, reply_to, media, audio_as_voice, buttons)
        finally:
            _piece.reset(token)

    async def send_buttons(
        self, target: Target, markdown: str, rows: ButtonRows
    ) -> list[MessageRef]:
        """Post ``markdown`` with ``rows`` of buttons under its last message, retried like
        ``send_text``. A platform without buttons gets the labels listed after the text."""
        return await self.send_text(target, markdown, buttons=rows)

    async def clear_buttons(self, ref: MessageRef, markdown: str) -> None:
        """Edit ``ref``'s message to show ``markdown`` (one message's worth), its buttons
        removed; retried like an edit. A platform without buttons edits the text only."""
        target = ref.target
        adapter = self.adapter_for(target)
        what = f"{target.channel} edit in {target.chat_id}"
        if isinstance(adapter, ButtonAdapter):
            await self._retried(
                _conversation(target), what, partial(adapter.edit_buttons, ref, markdown, ())
            )
        else:
            await self._retried(_conversation(target), what, partial(adapter.edit, ref, markdown))

    async def _send_text(
        self,
        target: Target,
        markdown: str,
        reply_to: str | None,
        media: Sequence[str],
        audio_as_voice: bool,
        buttons: ButtonRows = (),
    ) -> list[MessageRef]:
        adapter = self.adapter_for(target)
        if self._typed_at:
            # A message sent clears "typing…" there: a slow run after it may show it again.
            self._typed_at.pop(_conversation(target), None)
        if reply_to is not None and target.reply_to_id is None:
            target = Target(
                target.channel, target.chat_id, target.account_id, target.thread_id, reply_to
            )
        if buttons and not markdown.strip():
            markdown = CHOOSE  # a message with buttons needs a text on every platform
        if buttons and not isinstance(adapter, ButtonAdapter):
            markdown = with_choices_listed(markdown, buttons)
            buttons = ()
        try:
            refs: list[MessageRef] = []
            if buttons:
                # The files first, then the text with the buttons: the choices come last.
                if media:
                    refs = await self._send_text(target, "", None, media, audio_as_voice)
                return refs + await self._post(adapter, target, markdown, buttons)
            if media:
                return await send_with_media(
                    adapter,
                    target,
                    markdown,
                    media,
                    as_voice=audio_as_voice,
                    settings=self.media,
                    post_text=partial(self._post, adapter),
                    upload=partial(self._upload, adapter),
                    caps=self.capabilities(target.channel, adapter),
                )
            return await self._post(adapter, target, markdown)
        except DeliveryGivenUp as exc:
            log.error("%s: a reply to %s was given up: %s", target.channel, target.chat_id, exc)
            self._count_error(target.channel, "send_failed")
            await self._tell_given_up(adapter, target)
            raise
        except Exception as exc:
            log.error("%s refused a reply to %s: %s", target.channel, target.chat_id, exc)
            self._count_error(target.channel, "send_failed")
            raise

    async def _post(
        self, adapter: ChannelAdapter, target: Target, markdown: str, buttons: ButtonRows = ()
    ) -> list[MessageRef]:
        """Send ``markdown`` one message at a time, each retried on its own; ``buttons`` go
        under the last one (the adapter is a ``ButtonAdapter`` then)."""
        key = _conversation(target)
        what = f"{target.channel} send to {target.chat_id}"
        caps = self.capabilities(target.channel, adapter)
        parts = _messages(markdown, caps, self._chunk_mode(target.channel))

        def send(
            target: Target, part: str, last: bool
        ) -> Callable[[], Awaitable[list[MessageRef]]]:
            if buttons and last and isinstance(adapter, ButtonAdapter):
                return partial(adapter.send_buttons, target, part, buttons)
            return partial(adapter.send, target, part)

        refs: list[MessageRef] = []
        if len(parts) == 1:
            refs = await self._sent(key, what, _keyed(send(target, markdown, True)))
        else:
            for number, part in enumerate(parts, 1):
                last = number == len(parts)
                posted = await self._sent(key, what, _keyed(send(target, part, last)))
                refs.extend(posted)
                if posted:
                    # Later parts follow the first, in its thread, and reply to nothing.
                    target = replace(posted[0].target, reply_to_id=None)
        if buttons and refs and isinstance(adapter, ButtonAdapter):
            self._buttons_shown(refs[-1], buttons)
        return refs

    async def _upload(
        self, adapter: ChannelAdapter, target: Target, file: OutboundFile, caption: str
    ) -> list[MessageRef]:
        """Upload one file, retried on its own like a message."""
        what = f"{target.channel} upload to {target.chat_id}"
        return await self._sent(
            _conversation(target),
            what,
            _keyed(partial(upload_file, adapter, target, file, caption)),
        )

    async def _sent(
        self, key: _Key, what: str, attempt: Callable[[], Awaitable[list[MessageRef]]]
    ) -> list[MessageRef]:
        """A send or an upload, retried; each message it made is counted once it is confirmed."""
        refs = await self._retried(key, what, attempt)
        self._count_sent(key[0], refs)
        return refs

    async def _retried(self, key: _Key, what: str, attempt: Callable[[], Awaitable[_T]]) -> _T:
        # Each message, upload or edit of a conversation owned by lease starts only while
        # the lease has its margin left (``LeaseLost`` otherwise: the run stops), checked
        # again before each retry (a backoff may outlast it) and by the platform's HTTP client
        # as the request is written.
        async def checked() -> _T:
            fencing.check_send()
            try:
                return await attempt()
            except ChannelError as exc:
                lost = fencing.lost_in(exc)
                if lost is not None:
                    raise lost from exc
                raise

        channel = key[0]
        return await self._retrier.call(
            key,
            what,
            checked,
            settings=self._retry.get(channel),
            on_retry=None if self._counts is None else partial(self._count_error, channel),
        )

    def _count_sent(self, channel: str, refs: Sequence[MessageRef]) -> None:
        """Count a confirmed send: one per message it made (one if the adapter names none)."""
        if self._counts is not None:
            self._counts.message_out(channel, len(refs) or 1)

    def _count_error(
        self, channel: str, kind: Literal["send_retry", "send_failed"] = "send_retry"
    ) -> None:
        if self._counts is not None:
            self._counts.error(channel, kind)

    async def _tell_given_up(self, adapter: ChannelAdapter, target: Target) -> None:
        """Say once per outage, with a single attempt, that a reply could not be delivered."""
        key = _conversation(target)
        if not self._retrier.first_give_up(key):
            return
        plain = Target(target.channel, target.chat_id, target.account_id, target.thread_id)
        try:
            refs = await self._retrier.call(
                key,
                "the undelivered-reply notice",
                lambda: adapter.send(plain, GIVE_UP_NOTICE),
                settings=_ONE_ATTEMPT,
            )
        except Exception as exc:
            self._retrier.unreport(key)
            log.warning("telling %s about the lost reply failed too: %s", target.chat_id, exc)
            return
        self._count_sent(target.channel, refs)

    async def _show(self, target: Target, preview: Preview, markdown: str, *, final: bool) -> None:
        """Make the preview's messages show ``markdown``: edit what changed, post what is new.

        A preview is tried once (the next one or the final shows its text); the final is
        retried, and a final edit that fails replaces the preview (module docstring). A
        native preview drafts its last piece or streams its first (``_draft``, ``_stream``).
        Messages of a preview an earlier process left that the final no longer needs are
        deleted.
        """
        adapter = self.adapter_for(target)
        caps = self.capabilities(target.channel, adapter)
        shown = pieces(markdown, caps, preview.fits, self._chunk_mode(target.channel))
        if preview.streaming and (preview.native != "stream" or final):
            await self._stop_stream(adapter, target, preview, shown[0] if shown else "")
        if preview.native == "draft" and not final and shown:
            shown = await self._draft(adapter, target, preview, shown)
        elif preview.native == "stream" and not final and shown:
            await self._stream(adapter, target, preview, shown)
            if preview.streaming:
                return  # the stream shows the whole text
        await self._show_pieces(adapter, target, preview, shown, final=final)
        await self._journal(target, preview)
        if final and len(preview.refs) > len(shown):
            await self._drop_stale(adapter, target, preview, len(shown))

    async def _show_pieces(
        self,
        adapter: ChannelAdapter,
        target: Target,
        preview: Preview,
        shown: list[str],
        *,
        final: bool,
    ) -> None:
        key = _conversation(target)
        what = f"{target.channel} edit in {target.chat_id}"
        for index, piece in enumerate(shown):
            if index < len(preview.refs):
                if preview.shown[index] == piece:
                    continue
                ref = preview.refs[index]
                if not final:
                    await adapter.edit(ref, piece)
                else:
                    try:
                        await self._retried(key, what, partial(adapter.edit, ref, piece))
                    except Exception as exc:
                        refs = await self._replace(adapter, target, ref, piece, exc)
                        if refs:
                            preview.refs[index] = refs[0]
                preview.shown[index] = piece
            else:
                if final:
                    refs = await self.send_text(target, piece)
                else:
                    refs = await adapter.send(target, piece)  # tried once, like every preview
                    self._count_sent(target.channel, refs)
                if not refs:
                    return
                # Pieces are fitted to one message each, so one ref stands for the piece.
                preview.refs.append(refs[0])
                preview.shown.append(piece)
                await self._journal(target, preview)

    async def _draft(
        self, adapter: ChannelAdapter, target: Target, preview: Preview, shown: list[str]
    ) -> list[str]:
        """Show the growing last piece as a draft; the pieces before it (the text outgrew
        one message) are the messages to show as in an edit preview. A refusal makes this
        conversation an edit preview from now on (all pieces to show as messages)."""
        assert isinstance(adapter, DraftStreams)
        try:
            await adapter.draft(target, preview.draft_id, shown[-1])
        except ChannelError as exc:
            if exc.retryable:
                raise
            self._fall_back(target, exc)
            preview.native, preview.drafted = None, False
            return shown
        preview.drafted = True
        return shown[:-1]

    async def _stream(
        self, adapter: ChannelAdapter, target: Target, preview: Preview, shown: list[str]
    ) -> None:
        """Show the answer in the stream while it fits its first message: start it, append
        what is new. Once the text outgrows that message, the stream ends with its piece and
        the rest follows as an edit preview. A refused start makes this conversation an
        edit preview; a failed append ends the stream (its message is then edited)."""
        assert isinstance(adapter, MessageStreams)
        first = shown[0]
        if not preview.refs:
            try:
                ref = await adapter.stream_start(target, first)
            except ChannelError as exc:
                if exc.retryable:
                    raise
                self._fall_back(target, exc)
                preview.native = None
                return
            self._count_sent(target.channel, [ref])
            preview.refs, preview.shown, preview.streaming = [ref], [first], True
            await self._journal(target, preview)
            return
        if not preview.streaming:
            return
        if len(shown) > 1:
            await self._stop_stream(adapter, target, preview, first)
            return
        done = preview.shown[0]
        if len(first) <= len(done) or not first.startswith(done):
            return  # nothing new, or earlier text changed: a stream cannot take it back
        try:
            await adapter.stream_append(preview.refs[0], first[len(done) :])
        except Exception as exc:
            log.warning("%s stream in %s failed: %s", target.channel, target.route(), exc)
            preview.shown[0] = ""  # not known now: the message is edited from here on
            await self._stop_stream(adapter, target, preview, "")
            return
        preview.shown[0] = first

    async def _stop_stream(
        self, adapter: ChannelAdapter, target: Target, preview: Preview, first: str
    ) -> None:
        """End the open stream with what ``first`` adds to what it shows (when it only
        adds); otherwise the message is edited to ``first`` next, like any preview message.
        Tried once: a stream that cannot be stopped (it expired, an earlier process's) is
        logged and edited all the same."""
        preview.streaming = False
        done = preview.shown[0] if preview.shown else ""
        rest = first[len(done) :] if done and first.startswith(done) else ""
        try:
            if not isinstance(adapter, MessageStreams):
                raise ChannelError(f"{target.channel} has no streams")
            await adapter.stream_stop(preview.refs[0], rest)
        except Exception as exc:
            log.warning("%s stream in %s not stopped: %s", target.channel, target.route(), exc)
            rest = ""
        if rest:
            preview.shown[0] = first
        await self._journal(target, preview)

    async def _journal(self, target: Target, preview: Preview) -> None:
        """Keep the preview's messages where a resumed run finds them, when they changed."""
        state = (tuple(preview.refs), preview.streaming)
        if preview.journal is None or state == preview.kept or not preview.refs:
            return
        try:
            await preview.journal.preview_posted(preview.refs, streaming=preview.streaming)
        except Exception as exc:
            log.warning("keeping the preview in %s failed: %s", target.chat_id, exc)
            return
        preview.kept = state

    async def _drop_stale(
        self, adapter: ChannelAdapter, target: Target, preview: Preview, keep: int
    ) -> None:
        """Delete the messages past ``keep`` of a preview an earlier process left: the
        answer now fits in fewer, and they show an outdated part of it."""
        key = _conversation(target)
        for ref in preview.refs[keep:]:
            try:
                await self._retried(
                    key,
                    f"{target.channel} delete in {target.chat_id}",
                    partial(adapter.delete, ref),
                )
            except Exception as exc:
                log.warning("%s stale preview in %s left: %s", target.channel, target.chat_id, exc)
        del preview.refs[keep:], preview.shown[keep:]

    async def _replace(
        self,
        adapter: ChannelAdapter,
        target: Target,
        stale: MessageRef,
        piece: str,
        failure: Exception,
    ) -> list[MessageRef]:
        """The final edit of ``stale`` failed: delete it and post ``piece``, or leave it."""
        landed = isinstance(failure, ChannelError) and failure.maybe_delivered
        key = _conversation(target)
        try:
            await self._retried(
                key, f"{target.channel} delete in {target.chat_id}", lambda: adapter.delete(stale)
            )
        except Exception as exc:
            if landed:
                log.warning(
                    "%s final edit in %s may have landed (%s) and the preview could not be "
                    "deleted (%s); leaving it as it is",
                    target.channel,
                    target.chat_id,
                    failure,
                    exc,
                )
                return []
            log.warning(
                "%s final edit in %s failed (%s) and the preview could not be deleted (%s); "
                "posting the answer beside it",
                target.channel,
                target.chat_id,
                failure,
                exc,
            )
        else:
            log.warning(
                "%s final edit in %s failed (%s); the preview was deleted, posting the answer",
                target.channel,
                target.chat_id,
                failure,
            )
        return await self.send_text(target, piece)


_Key = tuple[str, str, str, str | None]


def _keyed(
    attempt: Callable[[], Awaitable[list[MessageRef]]],
) -> Callable[[], Awaitable[list[MessageRef]]]:
    """``attempt`` (one message of the piece being sent, if any) with that message's key set
    for the adapter around each try: numbered once, so every retry carries the same key. A
    retry's key says the piece is unconfirmed (the try before may have landed), written when
    the first try began, so an adapter that looks before posting again does so."""
    messages = _piece.get()
    if messages is None:
        return attempt
    first = messages.next()
    began: float | None = None

    async def keyed() -> list[MessageRef]:
        nonlocal began
        key = first
        if began is None:
            began = time.time()
        elif not first.piece.unconfirmed:
            written = first.piece.written_at or began
            key = replace(first.piece, unconfirmed=True, written_at=written).message(first.index)
        with _sending(key):
            return await attempt()

    return keyed


@contextmanager
def _sending(key: MessageKey) -> Iterator[None]:
    token = sending.set(key)
    try:
        yield
    finally:
        sending.reset(token)


def with_choices_listed(markdown: str, rows: ButtonRows) -> str:
    """``markdown`` with the buttons' labels listed after it, for a platform that shows no
    buttons (the console): the choices are still seen, and can be answered by typing one."""
    labels = " · ".join(f"[{button.label}]" for row in rows for button in row)
    return f"{markdown}\n\n{labels}" if markdown else labels


def _conversation(target: Target) -> _Key:
    """What retries (and typing) are kept apart by: one chat, or one thread of it."""
    return (target.channel, target.account_id, target.chat_id, target.thread_id)


def _messages(markdown: str, caps: Capabilities, mode: ChunkMode = "length") -> list[str]:
    """``markdown`` cut into parts that each render as one message of the platform.

    A short text is one part as it is (rendering cannot make it outgrow a message); a longer
    one is rendered to see whether it fits, and cut when it does not. In ``newline`` mode each
    paragraph is cut so on its own.
    """
    if mode == "newline":
        return [part for each in paragraphs(markdown, caps, mode) for part in _messages(each, caps)]
    lines = caps.line_limit
    if len(markdown) * 8 <= caps.text_limit and (lines is None or markdown.count("\n") * 2 < lines):
        return [markdown]
    rendered = caps.markup.chunks(markdown, caps.text_limit, line_limit=lines)
    if len(rendered) <= 1:
        return [markdown]
    return pieces(markdown, caps, {})


__all__ = ["ChannelDelivery", "UnknownChannelError"]
