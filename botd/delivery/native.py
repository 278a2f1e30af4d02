"""The ``stream`` mode's native previews: a Telegram draft, or a Slack message stream.

Where the platform has one, a ``stream`` preview shows the answer natively, and falls back to
the ``edit`` preview (``previews.py``) where it cannot:

* a draft (``DraftStreams``, private chats only) shows the answer's growing last piece with
  no message; the pieces before it, once the text outgrew one message, are messages edited
  as in an ``edit`` preview, and the final answer is posted (a draft is never a message);
* a stream (``MessageStreams``, in a thread, and outside a DM with its recipient) shows the
  answer in its first message while it fits there, appending what is new; once the text
  outgrows that message or changes what it showed, the stream ends and the rest follows as
  an ``edit`` preview. A stream no final took over is stopped at the end of the run.

A platform that refuses a draft or a stream start (or a chat where there can be none) makes
that conversation an ``edit`` preview from then on, logged once (remembered for the newest
``_REFUSED_KEPT`` conversations). A failure that may pass is raised: the preview update is
then only logged, like any. Every native call is tried once; none is retried.
"""

from __future__ import annotations

import logging

from ..bounded import Recent
from ..channels.base import ChannelAdapter, DraftStreams, MessageStreams
from ..channels.errors import ChannelError
from ..chat import Target
from .preview import Native, Preview
from .routing import ChannelRoutes, ChatKey, chat_key
from .scope import RunScope, check_fence
from .sender import Sender

log = logging.getLogger(__name__)

_REFUSED_KEPT = 4096
"""How many conversations are remembered as refusing a native stream (the oldest
forgotten, then refused and logged again at most once)."""


class NativePreviews:
    """Drafts and message streams for the previews of every conversation."""

    def __init__(self, routes: ChannelRoutes, sender: Sender) -> None:
        self._routes = routes
        self._sender = sender
        self._fell_back: Recent[ChatKey, None] = Recent(_REFUSED_KEPT)
        """Conversations whose platform refused a native stream: edit previews from then on."""

    def choose(self, target: Target) -> Native | None:
        """How ``target``'s chat can show a streamed answer natively, if it can: else the
        edit preview, said once per conversation."""
        adapter = self._routes.adapter(target.channel)
        if chat_key(target) in self._fell_back:
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

    async def show(
        self,
        adapter: ChannelAdapter,
        target: Target,
        preview: Preview,
        shown: list[str],
        *,
        final: bool,
    ) -> list[str] | None:
        """Show what ``preview`` shows natively of ``shown`` (the answer's pieces); return the
        pieces left to show as messages, or None when the stream shows the whole text. An open
        stream is ended first when the preview no longer streams, or for the final."""
        if preview.streaming and (preview.native != "stream" or final):
            await self.stop_stream(adapter, target, preview, shown[0] if shown else "")
        if preview.native == "draft" and not final and shown:
            return await self._draft(adapter, target, preview, shown)
        if preview.native == "stream" and not final and shown:
            await self._stream(adapter, target, preview, shown)
            if preview.streaming:
                return None
        return shown

    async def end(self, target: Target, preview: Preview, scope: RunScope | None = None) -> None:
        """The run is over: a stream no final took over (a stopped run, an answer the
        messaging tool sent) is stopped with what it shows, so it never stays open."""
        if not preview.streaming or not preview.refs:
            return
        adapter = self._routes.adapter(target.channel)
        if isinstance(adapter, MessageStreams):
            try:
                check_fence(scope)
                await adapter.stream_stop(preview.refs[0])
            except Exception as exc:
                log.warning("%s stream in %s not stopped: %s", target.channel, target.route(), exc)

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
            self._sender.count_sent(target.channel, [ref])
            preview.refs, preview.shown, preview.streaming = [ref], [first], True
            await preview.keep(target)
            return
        if not preview.streaming:
            return
        if len(shown) > 1:
            await self.stop_stream(adapter, target, preview, first)
            return
        done = preview.shown[0]
        if len(first) <= len(done) or not first.startswith(done):
            return  # nothing new, or earlier text changed: a stream cannot take it back
        try:
            await adapter.stream_append(preview.refs[0], first[len(done) :])
        except Exception as exc:
            log.warning("%s stream in %s failed: %s", target.channel, target.route(), exc)
            preview.shown[0] = ""  # not known now: the message is edited from here on
            await self.stop_stream(adapter, target, preview, "")
            return
        preview.shown[0] = first

    async def stop_stream(
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
        await preview.keep(target)

    def _fall_back(self, target: Target, why: object) -> None:
        """From now on this conversation is shown as an edit preview; logged once."""
        self._fell_back.remember(chat_key(target), None)
        log.warning(
            "%s: no native streaming in %s (%s); showing answers there as an edited preview",
            target.channel,
            target.route(),
            why,
        )


__all__ = ["NativePreviews"]
