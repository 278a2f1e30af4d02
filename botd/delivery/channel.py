"""``ChannelDelivery``: replies to the adapter of their platform.

It finds the adapter for a target's channel and hands it the Markdown (each adapter renders
and splits it for its platform). Media the agent attached are named after the text, since
uploads come later. A platform's refusal is logged in its own words and raised to the
caller: a run's outbox logs it and carries on; nothing is dropped silently.

How a run reaches a chat is chosen per channel (``DeliveryMode``):

* ``blocks`` (the default): each block the agent finishes is its own message.
* ``final``: only the run's final answer is posted; the sessions stream no blocks.
* ``edit``: one preview per run, posted at the first partial reply and edited in place at
  most every ``min_edit_interval`` seconds, then finished in place with the final text (see
  ``preview.py``). A channel whose adapter cannot edit falls back to ``blocks``.

The typing indicator is cosmetic: a failure is logged and never reaches the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from ..channels.base import ChannelAdapter
from ..chat import MessageRef, Target
from ..subscriber import BlockReply, PartialReply
from .base import DEFAULT_DELIVERY_MODE, DeliveryMode, ReplyKind, RunOptions
from .outbox import RunOutbox
from .preview import Preview, pieces, with_media

log = logging.getLogger(__name__)

_DEFAULT_OPTIONS = RunOptions()


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._adapters = dict(adapters)
        self._modes = dict(modes or {})
        self._min_edit_interval = min_edit_interval
        self._clock = clock
        # Keyed by target: sessions never run two runs for one conversation at once.
        self._previews: dict[Target, Preview] = {}

    def set_channels(
        self, adapters: Mapping[str, ChannelAdapter], modes: Mapping[str, DeliveryMode]
    ) -> None:
        """Serve these adapters with these modes from now on (a reload changed them)."""
        self._adapters = dict(adapters)
        self._modes = dict(modes)

    def open_run(
        self,
        target: Target,
        options: RunOptions = _DEFAULT_OPTIONS,
        *,
        on_first_reply: Callable[[], None] | None = None,
    ) -> RunOutbox:
        return RunOutbox(self, target, options, on_first_reply=on_first_reply)

    def adapter_for(self, target: Target) -> ChannelAdapter:
        adapter = self._adapters.get(target.channel)
        if adapter is None:
            known = ", ".join(sorted(self._adapters)) or "none"
            raise UnknownChannelError(f"no adapter for channel {target.channel!r} (have: {known})")
        return adapter

    def delivery_mode(self, target: Target) -> DeliveryMode:
        mode = self._modes.get(target.channel, DEFAULT_DELIVERY_MODE)
        if mode == "edit":
            adapter = self._adapters.get(target.channel)
            if adapter is None or not adapter.capabilities.can_edit:
                return "blocks"
        return mode

    async def deliver(
        self, target: Target, reply: BlockReply, *, kind: ReplyKind = "block"
    ) -> list[MessageRef]:
        """Post ``reply``; the run's first final reply finishes an ``edit`` preview instead."""
        if kind == "final" and self._previews:
            preview = self._previews.get(target)
            if preview is not None and not preview.finished:
                # The run's first final reply takes over the preview; any further ones are new.
                preview.finished = True
                await self._show(target, preview, with_media(reply), final=True)
                return list(preview.refs)
        return await self.send_text(target, with_media(reply), reply_to=reply.reply_to_id)

    async def preview(self, target: Target, partial: PartialReply) -> None:
        """Show the answer so far (``edit`` mode); throttled, and a failure only logged."""
        if self.delivery_mode(target) != "edit":
            return
        now = self._clock()
        preview = self._previews.get(target)
        if preview is None:
            preview = self._previews[target] = Preview()
        elif preview.finished or now - preview.edited_at < self._min_edit_interval:
            return  # skipped text is not lost: the next edit or the final shows it
        preview.edited_at = now
        try:
            await self._show(target, preview, partial.text, final=False)
        except Exception as exc:
            log.warning("%s preview in %s failed: %s", target.channel, target.chat_id, exc)

    async def end_run(self, target: Target) -> None:
        """The run's replies are out: the next run starts a new preview."""
        self._previews.pop(target, None)

    async def typing(self, target: Target) -> None:
        try:
            await self.adapter_for(target).typing(target)
        except Exception as exc:
            log.warning("%s typing in %s failed: %s", target.channel, target.chat_id, exc)

    async def send_text(
        self, target: Target, markdown: str, *, reply_to: str | None = None
    ) -> list[MessageRef]:
        adapter = self.adapter_for(target)
        if reply_to is not None and target.reply_to_id is None:
            target = Target(
                target.channel, target.chat_id, target.account_id, target.thread_id, reply_to
            )
        try:
            return await adapter.send(target, markdown)
        except Exception as exc:
            log.error("%s refused a reply to %s: %s", target.channel, target.chat_id, exc)
            raise

    async def _show(self, target: Target, preview: Preview, markdown: str, *, final: bool) -> None:
        """Make the preview's messages show ``markdown``: edit what changed, post what is new."""
        adapter = self.adapter_for(target)
        for index, piece in enumerate(pieces(markdown, adapter.capabilities, preview.fits)):
            if index < len(preview.refs):
                if preview.shown[index] == piece:
                    continue
                try:
                    await adapter.edit(preview.refs[index], piece)
                except Exception as exc:
                    if not final:
                        raise
                    # The answer must arrive: post it anew rather than leave a stale preview.
                    log.warning("%s final edit failed (%s); posting it", target.channel, exc)
                    refs = await self.send_text(target, piece)
                    if refs:
                        preview.refs[index] = refs[0]
                preview.shown[index] = piece
            else:
                refs = await self.send_text(target, piece)
                if not refs:
                    return
                # Pieces are fitted to one message each, so one ref stands for the piece.
                preview.refs.append(refs[0])
                preview.shown.append(piece)


__all__ = ["ChannelDelivery", "UnknownChannelError"]
