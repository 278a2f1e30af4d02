"""``Previews``: the answer so far, shown in place while a run works (``edit`` and ``stream``).

In ``edit`` mode a run has one preview, posted at the first partial reply and edited in place
at most every ``min_edit_interval`` seconds, then finished in place with the final text. A
text that outgrows one message is cut into pieces that each fit one (``fitting.py``) and
continues in further messages, each edited the same way, so the answer is never posted twice.
The preview's first message notifies like an answer's (the final edit that completes it
cannot: an edit notifies no one); the further messages a preview posts are silent
(``SendScope.silent``), so an answer rings once.
In ``stream`` mode the preview shows natively where the platform can (``native.py``), else as
an ``edit`` preview.

A preview update is tried once, and one that fails is only logged (the next one or the final
shows the text). The final is retried (``Sender``). A final edit that fails, after its
retries, must neither lose the answer nor show it twice beside the stale preview, so the
preview message is deleted and the final text posted anew; when the delete fails too, the
final text is posted anew only if the failed edit certainly did not land (a refusal, a 5xx):
then the stale preview shows an outdated part and the answer is shown once. If the edit may
have landed (it timed out after it was sent), nothing new is posted, since the preview most
likely shows the answer already. The final reply's buttons go under the preview's last
message; its files are posted after it.

With the run's ``PreviewJournal`` (``begin``) each preview's messages are kept as they change,
and a resumed run takes over the preview an interrupted attempt left, as an ``edit`` preview
whose texts are not known; messages of it the final no longer needs are deleted.

Previews are kept by target: the sessions never run two runs for one conversation at once.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from ..channels.base import ChannelAdapter
from ..channels.errors import ChannelError
from ..chat import MessageRef, PieceKey, Target
from ..subscriber import BlockReply, PartialReply
from .base import DeliveryMode, PreviewJournal
from .fitting import pieces
from .native import NativePreviews
from .preview import Preview
from .routing import ChannelRoutes
from .scope import RunScope, check_fence, send_scope
from .sender import Sender

log = logging.getLogger(__name__)


class Previews:
    """The previews of every run that shows one (see the module docstring)."""

    def __init__(
        self,
        routes: ChannelRoutes,
        sender: Sender,
        *,
        min_edit_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._routes = routes
        self._sender = sender
        self._native = NativePreviews(routes, sender)
        self._min_edit_interval = min_edit_interval
        self._clock = clock
        self._previews: dict[Target, Preview] = {}
        self._journals: dict[Target, PreviewJournal] = {}

    def begin(self, target: Target, journal: PreviewJournal | None) -> None:
        """A run to ``target`` starts; its preview is kept in ``journal`` (None: nowhere)."""
        if journal is not None:
            self._journals[target] = journal

    async def show(
        self, target: Target, partial: PartialReply, scope: RunScope | None = None
    ) -> bool:
        """Show the answer so far; throttled (one update per ``min_edit_interval``, a native
        stream's too), and a failure only logged.

        True when the chat shows a preview of the run (this one or an earlier one)."""
        mode = self._routes.delivery_mode(target)
        if mode not in ("edit", "stream"):
            return False
        check_fence(scope)
        now = self._clock()
        preview = self._previews.get(target)
        if preview is None:
            preview = await self._left_preview(target) or self._new_preview(target, mode)
        elif preview.finished or now - preview.edited_at < self._min_edit_interval:
            return preview.showing  # skipped text is not lost: the next update or the final
        preview.edited_at = now
        try:
            await self._show(target, preview, partial.text, final=False, scope=scope)
        except Exception as exc:
            log.warning("%s preview in %s failed: %s", target.channel, target.chat_id, exc)
        return preview.showing

    async def finish(
        self,
        target: Target,
        reply: BlockReply,
        piece: PieceKey | None,
        scope: RunScope | None = None,
    ) -> list[MessageRef] | None:
        """Finish the run's preview with its first final ``reply`` (its files, keyed as
        ``piece``, after it); None when there is no preview to finish (then ``reply`` is
        posted like any)."""
        if not self._previews and not self._journals:
            return None
        preview = self._previews.get(target)
        if preview is None and target in self._journals:
            # No partial reply came, but an interrupted attempt may have left a preview.
            preview = await self._left_preview(target)
        if preview is None or preview.finished:
            return None  # the run's first final reply takes over the preview; others are new
        preview.finished = True
        await self._show(target, preview, reply.text, final=True, scope=scope)
        if reply.buttons and preview.refs:
            last, shown = preview.refs[-1], preview.shown[-1]
            await self._sender.edit_buttons(target, last, shown, reply.buttons, scope=scope)
        refs = list(preview.refs)
        if reply.media_urls:
            refs.extend(
                await self._sender.send_text(
                    target,
                    "",
                    media=reply.media_urls,
                    audio_as_voice=reply.audio_as_voice,
                    piece=piece,
                    scope=scope,
                )
            )
        return refs

    async def end(self, target: Target, scope: RunScope | None = None) -> None:
        """The run's replies are out: the next run starts a new preview (an open stream is
        stopped, ``NativePreviews.end``)."""
        self._journals.pop(target, None)
        preview = self._previews.pop(target, None)
        if preview is not None:
            await self._native.end(target, preview, scope)

    def _new_preview(self, target: Target, mode: DeliveryMode) -> Preview:
        preview = self._previews[target] = Preview(journal=self._journals.get(target))
        if mode == "stream":
            preview.native = self._native.choose(target)
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

    async def _show(
        self,
        target: Target,
        preview: Preview,
        markdown: str,
        *,
        final: bool,
        scope: RunScope | None,
    ) -> None:
        """Make the preview's messages show ``markdown``: edit what changed, post what is new.

        A native preview shows what it can first (``NativePreviews.show``). Messages of a
        preview an earlier process left that the final no longer needs are deleted.
        """
        adapter = self._routes.adapter_for(target)
        caps = self._routes.capabilities(target.channel, adapter)
        shown = pieces(markdown, caps, preview.fits, self._routes.chunk_mode(target.channel))
        rest = await self._native.show(adapter, target, preview, shown, final=final)
        if rest is None:
            return  # the stream shows the whole text
        await self._show_pieces(adapter, target, preview, rest, final=final, scope=scope)
        await preview.keep(target)
        if final and len(preview.refs) > len(rest):
            await self._drop_stale(adapter, target, preview, len(rest), scope)

    async def _show_pieces(
        self,
        adapter: ChannelAdapter,
        target: Target,
        preview: Preview,
        shown: list[str],
        *,
        final: bool,
        scope: RunScope | None,
    ) -> None:
        for index, piece in enumerate(shown):
            if index < len(preview.refs):
                if preview.shown[index] == piece:
                    continue
                ref = preview.refs[index]
                if not final:
                    await adapter.edit(ref, piece, scope=send_scope(scope))
                else:
                    try:
                        await self._sender.edit(adapter, target, ref, piece, scope=scope)
                    except Exception as exc:
                        refs = await self._replace(adapter, target, ref, piece, exc, scope)
                        if refs:
                            preview.refs[index] = refs[0]
                preview.shown[index] = piece
            else:
                if final:
                    refs = await self._sender.send_text(target, piece, scope=scope)
                else:
                    # The preview's first message becomes the answer's: it notifies, as
                    # the answer would (its final edit cannot). Those after it are silent.
                    silent = bool(preview.refs)
                    refs = await adapter.send(
                        target, piece, scope=send_scope(scope, silent=silent)
                    )  # once
                    self._sender.count_sent(target.channel, refs)
                if not refs:
                    return
                # Pieces are fitted to one message each, so one ref stands for the piece.
                preview.refs.append(refs[0])
                preview.shown.append(piece)
                await preview.keep(target)

    async def _drop_stale(
        self,
        adapter: ChannelAdapter,
        target: Target,
        preview: Preview,
        keep: int,
        scope: RunScope | None,
    ) -> None:
        """Delete the messages past ``keep`` of a preview an earlier process left: the
        answer now fits in fewer, and they show an outdated part of it."""
        for ref in preview.refs[keep:]:
            try:
                await self._sender.delete(adapter, target, ref, scope=scope)
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
        scope: RunScope | None,
    ) -> list[MessageRef]:
        """The final edit of ``stale`` failed: delete it and post ``piece``, or leave it."""
        landed = isinstance(failure, ChannelError) and failure.maybe_delivered
        try:
            await self._sender.delete(adapter, target, stale, scope=scope)
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
        return await self._sender.send_text(target, piece, scope=scope)


__all__ = ["Previews"]
