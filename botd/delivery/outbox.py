"""One run's output: an ordered outbox, block coalescing, "typing…", the first-reply signal.

``RunOutbox`` is the ``RunOutput`` every delivery hands out. The run pushes pieces without
waiting; one sender task takes them in order and passes each to the ``Outlet`` (the channel
side), so a slow platform never holds up the agent and replies never overtake each other.

* Partial replies coalesce: while one waits in line, a newer one takes its place, so a slow
  preview edit skips to the latest text instead of working through every delta.
* With ``CoalesceSettings``, blocks are joined by a ``BlockCoalescer`` and sent when it says
  so: when the joined text is long enough, after its idle window, at a tool start
  (``flush``), before a final reply, and at the end.
* "typing…" is shown only when the run is visibly slow: once ``typing_delay`` seconds went
  by with no piece out, then renewed every ``typing_interval`` seconds until the first piece
  goes out. A quick answer sends no typing call at all, and an indicator that outlives the
  start of the answer reads as a second answer coming. A failing typing call is only logged.

Every piece goes through ``RunOutbox._post`` with its kind and its number in the run; a reply
naming several files is one piece per file (``per_file``), so each upload is written down and
confirmed on its own and a restart never uploads a confirmed file again; a text too long to
be the first file's caption there (``Outlet.fits_caption``) is a piece of its own before
them. With a ``RunJournal`` in the options, each block and final reply is written down there
before it is sent and marked sent (with the platform's message refs) or failed after; a
journal that cannot write is logged and the piece still goes out, except under a lease
(cluster mode): there the piece is not sent and the lease is given up, so the conversation's
next holder resumes the run from what the store has (a piece sent without its row would be
sent again by it). A piece the store refuses for its content (``ContentRefused``) is no lost
lease: it is logged and skipped, the run goes on. A piece's text is made ``storable`` before
it is written (a NUL becomes U+FFFD), so the chat shows what the store keeps, on either
backend. A piece the platform refuses is logged and skipped; the rest of the run still goes
out.

A reply to be spoken (``BlockReply.tts``, or every reply of a run with ``RunOptions.voice``)
is spoken by ``RunOptions.speech`` when its turn comes, before it is cut into pieces and
written (``botd.delivery.voice``): its voice note is a piece like any file, written down by
its reference before the upload, and its audio file is deleted once the piece is confirmed.

``close(then)`` waits until every piece is out; ``then`` is called right after the last
piece's confirmation, in the same step, so what it records commits together with that
piece's sent mark (a run's messages marked answered, with its reply marked sent).

``cancel()`` is for a run that was stopped (``/stop``, an interrupt, shutdown): from then on
nothing more is posted. A piece already handed to the platform stays; whatever still waits
(in line, in the coalescer, the pending preview) and whatever the run pushes while it winds
down is dropped (and never journaled), so the user sees nothing after the stop but its
confirmation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal

from ..chat import MessageRef, PieceKey, Target, storable
from ..cluster.leases import LeaseLost
from ..store.errors import ContentRefused
from ..subscriber import BlockReply, PartialReply
from .base import DeliveryMode, Outgoing, Outlet, RunOptions
from .coalesce import BlockCoalescer
from .scope import RunScope, fence_of

log = logging.getLogger(__name__)

_Queued = (
    tuple[Literal["block", "final", "flush"], BlockReply]
    | tuple[Literal["partial"], PartialReply]
    | None
)
_NO_REPLY = BlockReply(text="")
_DEFAULT_OPTIONS = RunOptions()


class RunOutbox:
    """A ``RunOutput`` over an ``Outlet``; see the module docstring.

    Open it inside a running event loop: it starts its sender task and typing timer at once.
    """

    def __init__(
        self,
        outlet: Outlet,
        target: Target,
        options: RunOptions = _DEFAULT_OPTIONS,
        *,
        on_first_reply: Callable[[], None] | None = None,
        scope: RunScope | None = None,
    ) -> None:
        """``scope``: the conversation the run is of, whose lease fences each piece (None:
        unfenced)."""
        self.target = target
        self._scope = scope
        self._mode = options.mode or outlet.delivery_mode(target)
        self._outlet = outlet
        self._queue: asyncio.Queue[_Queued] = asyncio.Queue()
        self._partial: PartialReply | None = None
        self._sent = 0
        self._on_first_reply = on_first_reply
        self._closed = False
        self._then: Callable[[], None] | None = None
        self._cancelled = False
        coalesce = options.coalesce
        self._coalescer = (
            BlockCoalescer(
                coalesce.min_chars, coalesce.max_chars, coalesce.idle_ms, coalesce.joiner
            )
            if coalesce is not None
            else None
        )
        self._name = f"{target.channel}:{target.chat_id}"
        self._loop = asyncio.get_running_loop()
        self._typing_interval = options.typing_interval
        self._journal = options.journal
        self._speech = options.speech
        self._voice = options.voice
        self._typing_call: asyncio.Task[None] | None = None
        self._typing_timer: asyncio.TimerHandle | None = None
        self._typing = options.typing
        if options.typing and options.typing_delay > 0:
            self._typing_timer = self._loop.call_later(options.typing_delay, self._type)
        elif options.typing:
            self._type()
        self._sender = asyncio.create_task(self._send_all(), name=f"outbox:{self._name}")

    @property
    def mode(self) -> DeliveryMode:
        return self._mode

    # -- the run's side: never blocks ----------------------------------------------------

    def block(self, reply: BlockReply) -> None:
        self._queue.put_nowait(("block", reply))

    def partial(self, reply: PartialReply) -> None:
        if self._partial is None:
            self._queue.put_nowait(("partial", reply))  # a place in line; the latest fills it
        self._partial = reply

    def flush(self) -> None:
        self._queue.put_nowait(("flush", _NO_REPLY))

    def final(self, reply: BlockReply) -> None:
        self._queue.put_nowait(("final", reply))

    def cancel(self) -> None:
        """The run was stopped: post nothing more (see the module docstring)."""
        self._cancelled = True
        self._partial = None
        self._typing = False  # "typing…" would read as more to come
        if self._typing_timer is not None:
            self._typing_timer.cancel()
            self._typing_timer = None

    async def close(self, then: Callable[[], None] | None = None) -> None:
        if not self._closed:
            self._closed = True
            self._then = then
            self._queue.put_nowait(None)
        try:
            await self._sender
        finally:
            await self._stop_typing()  # normally done already by the sender

    # -- the sender ----------------------------------------------------------------------

    async def _next(self) -> _Queued:
        item = await self._queue.get()
        if item is not None and item[0] == "partial" and self._partial is not None:
            item, self._partial = ("partial", self._partial), None
        return item

    async def _send_all(self) -> None:
        coalescer = self._coalescer
        loop = asyncio.get_running_loop()
        while True:
            deadline = coalescer.deadline if coalescer is not None else None
            if deadline is None:
                item = await self._next()
            else:
                try:
                    wait = max(0.0, (deadline - loop.time() * 1000) / 1000)
                    item = await asyncio.wait_for(self._next(), wait)
                except TimeoutError:
                    assert coalescer is not None
                    await self._post_blocks(coalescer.poll(loop.time() * 1000))
                    continue
            if item is None:
                break
            kind, reply = item
            if coalescer is not None:
                if kind == "block":
                    assert isinstance(reply, BlockReply)
                    await self._post_blocks(coalescer.add(reply, loop.time() * 1000))
                    continue
                # A tool start or the final answer: what waits goes out first, in order.
                await self._post_blocks(coalescer.flush())
            if kind == "partial":
                await self._post(Outgoing(0, "partial", reply))
            elif kind != "flush":
                assert isinstance(reply, BlockReply)
                for part in self._pieces(await self._spoken(reply)):
                    self._sent += 1
                    await self._post(Outgoing(self._sent, kind, part))
        if coalescer is not None:
            await self._post_blocks(coalescer.flush())
        self._delivered()
        await self._stop_typing()
        try:
            await self._outlet.end_run(self.target, scope=self._scope)
        except Exception:
            log.exception(
                "ending delivery to %s:%s failed", self.target.channel, self.target.chat_id
            )

    def _delivered(self) -> None:
        """Everything is out: ``close``'s ``then``, in the step of the last confirmation."""
        then, self._then = self._then, None
        if then is None:
            return
        try:
            then()
        except Exception:
            log.exception("after delivering to %s:%s", self.target.channel, self.target.chat_id)

    async def _post_blocks(self, replies: list[BlockReply]) -> None:
        for reply in replies:
            for part in self._pieces(await self._spoken(reply)):
                self._sent += 1
                await self._post(Outgoing(self._sent, "block", part))

    async def _spoken(self, reply: BlockReply) -> BlockReply:
        """``reply`` spoken if it is to be (see the module docstring)."""
        if self._voice and reply.text.strip() and not reply.tts:
            reply = replace(reply, tts=True)
        if not reply.tts:
            return reply
        if self._speech is None or self._cancelled:
            return replace(reply, tts=False)
        return await self._speech.spoken(reply, self._name)

    def _spoken_done(self, reply: BlockReply | PartialReply) -> None:
        """The piece ``reply`` is confirmed or dropped: the audio it names is deleted."""
        if self._speech is not None and isinstance(reply, BlockReply):
            self._speech.done(reply)

    def _pieces(self, reply: BlockReply) -> list[BlockReply]:
        if not reply.media_urls:
            return [reply]
        if reply.buttons:
            # The files first, each a piece; the text with its buttons last.
            files = [BlockReply("", [url], reply.audio_as_voice) for url in reply.media_urls]
            return [*files, replace(reply, media_urls=[])]
        return per_file(reply, lambda text: self._outlet.fits_caption(self.target, text))

    async def _post(self, piece: Outgoing) -> None:
        """Send one piece; a refusal is logged, not fatal to the run's other pieces."""
        if self._cancelled:
            self._spoken_done(piece.reply)  # a voice note spoken before the stop is not kept
            return  # a stopped run posts nothing more: the piece is dropped, not sent
        if self._typing:
            await self._stop_typing()  # the answer has started: no more "typing…"
        target, reply = self.target, piece.reply
        if isinstance(reply, BlockReply) and (clean := storable(reply.text)) is not reply.text:
            # Written and posted as every store keeps it (a NUL as U+FFFD): the chat shows
            # what a resumed run would send again, whichever backend journals it.
            reply = replace(reply, text=clean)
            piece = piece._replace(reply=reply)
        journal = self._journal if not isinstance(reply, PartialReply) else None
        key: int | None = None
        if journal is not None:
            try:
                key = await journal.written(piece, reply.text)
            except LeaseLost as exc:
                # Another node may own the conversation now: nothing more is posted (the
                # dispatcher tells the lost lease, once).
                log.debug("a reply to %s is not sent: %s", target.chat_id, exc)
                self.cancel()
                return
            except ContentRefused as exc:
                # The store holds nothing of this piece, and would refuse it again: the
                # piece is skipped (no lost lease, nothing to resume), the run goes on.
                log.error("a reply to %s is not sent: %s", target.chat_id, exc)
                self._spoken_done(reply)
                return
            except Exception as exc:
                fence = fence_of(self._scope)
                if fence is None:
                    log.exception("writing a reply to the outbox failed; sending it anyway")
                else:
                    # Sent without its journal row, the piece would be sent again by whoever
                    # resumes the run: the lease is given up and the run resumed instead.
                    log.debug("a reply to %s is not sent: %s", target.chat_id, exc)
                    fence.give_up(f"a reply could not be journaled: {exc}")
                    self.cancel()
                    return
            if self._cancelled:  # stopped while the piece was written: it is not sent
                self._note(key, None)
                self._spoken_done(reply)
                return
        shown = True
        try:
            if isinstance(reply, PartialReply):
                shown = await self._outlet.preview(target, reply, scope=self._scope)
            else:
                refs = await self._outlet.deliver(
                    target,
                    reply,
                    kind="final" if piece.kind == "final" else "block",
                    piece=None if key is None else PieceKey.of(key, reply.text),
                    scope=self._scope,
                )
        except LeaseLost as exc:
            log.debug("a reply to %s is not sent: %s", target.chat_id, exc)
            self.cancel()
            return
        except Exception:
            log.exception("delivery to %s:%s failed", target.channel, target.chat_id)
            self._note(key, None)
            self._spoken_done(reply)
            return
        if not isinstance(reply, PartialReply):
            self._note(key, refs)
            self._spoken_done(reply)
        if shown and self._on_first_reply is not None:
            # The first piece the chat shows (a preview that failed shows nothing yet).
            first_reply, self._on_first_reply = self._on_first_reply, None
            first_reply()

    def _note(self, key: int | None, refs: Sequence[MessageRef] | None) -> None:
        """Tell the journal how the written piece ``key`` went (sent with ``refs``, or not)."""
        if self._journal is None or key is None:
            return
        try:
            if refs is None:
                self._journal.failed(key)
            else:
                self._journal.sent(key, refs)
        except Exception:
            log.exception("marking a reply in the outbox failed")

    # -- typing --------------------------------------------------------------------------

    def _type(self) -> None:
        """Show "typing…" now; the call, once done, arms the next one ``interval`` later.

        A timer between calls rather than a sleeping task: most runs end long before the
        first renewal, and a timer costs far less to cancel than a task.
        """
        self._typing_timer = None
        self._typing_call = asyncio.create_task(self._type_once(), name=f"typing:{self._name}")

    async def _type_once(self) -> None:
        try:
            await self._outlet.typing(self.target)
        except Exception as exc:
            log.warning("typing in %s failed: %s", self.target.chat_id, exc)
        if self._typing:
            self._typing_timer = self._loop.call_later(self._typing_interval, self._type)

    async def _stop_typing(self) -> None:
        self._typing = False
        if self._typing_timer is not None:
            self._typing_timer.cancel()
            self._typing_timer = None
        call, self._typing_call = self._typing_call, None
        if call is not None and not call.done():
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)


def per_file(
    reply: BlockReply, fits_caption: Callable[[str], bool] = lambda text: True
) -> list[BlockReply]:
    """``reply`` as the pieces it is sent in: one per file it names, the text (and the reply
    id) with the first, so each upload is written down and confirmed on its own. A text that
    ``fits_caption`` says cannot be the first file's caption is a piece of its own before the
    files, so a crash between its post and an upload never posts it again."""
    if not reply.media_urls:
        return [reply]
    apart: list[BlockReply] = []
    if reply.text.strip() and not fits_caption(reply.text):
        apart.append(replace(reply, media_urls=[]))
        reply = replace(reply, text="", reply_to_id=None)
    first, *rest = reply.media_urls
    later = [replace(reply, text="", media_urls=[url], reply_to_id=None) for url in rest]
    return [*apart, replace(reply, media_urls=[first]), *later]


__all__ = ["RunOutbox", "per_file"]
