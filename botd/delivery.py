"""Outbound: a session's replies to the adapter of their platform.

Sessions already deliver one run's replies in order; this layer finds the adapter for the
target's channel and hands it the Markdown (each adapter renders and splits it for its
platform). Media the agent attached are named after the text, since uploads come later.
A platform's refusal is logged in its own words and re-raised to the session, which
reports it; nothing is dropped silently.

How a run reaches a chat is chosen per channel (``DeliveryMode``):

* ``blocks`` (the default): each block the agent finishes is its own message.
* ``final``: only the run's final answer is posted; sessions stream no blocks.
* ``edit``: one preview message per run, posted at the first partial reply and edited in
  place at most every ``min_edit_interval`` seconds, then finished in place with the final
  text. Text beyond one message is cut at a chunk boundary and continues in new messages,
  which are edited the same way, so the answer is never posted twice. A channel whose
  adapter cannot edit falls back to ``blocks``.

The typing indicator is cosmetic: a failure is logged and never reaches the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from .channels.base import ChannelAdapter
from .channels.markdown import render_chunks
from .chat import Capabilities, MessageRef, Target
from .subscriber import BlockReply, PartialReply, chunk_text

log = logging.getLogger(__name__)

DeliveryMode = Literal["blocks", "edit", "final"]
ReplyKind = Literal["block", "final"]
"""What a delivered reply is: a block streamed during the run, or a final reply after it."""
DEFAULT_DELIVERY_MODE: DeliveryMode = "blocks"


class UnknownChannelError(LookupError):
    """A reply for a channel no adapter serves."""


@dataclass(eq=False)
class _Preview:
    """One run's live messages in ``edit`` mode: each message's ref and the Markdown it shows."""

    refs: list[MessageRef] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)
    edited_at: float = 0.0
    finished: bool = False
    fits: dict[str, bool] = field(default_factory=dict)
    """Whether a piece renders as one message; earlier pieces recur on every edit."""


class ChannelDelivery:
    """A session ``ReplySink`` that posts through the channel adapters."""

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
        self._previews: dict[Target, _Preview] = {}

    def set_channels(
        self, adapters: Mapping[str, ChannelAdapter], modes: Mapping[str, DeliveryMode]
    ) -> None:
        """Serve these adapters with these delivery modes from now on (a config reload)."""
        self._adapters = dict(adapters)
        self._modes = dict(modes)

    def adapter_for(self, target: Target) -> ChannelAdapter:
        adapter = self._adapters.get(target.channel)
        if adapter is None:
            known = ", ".join(sorted(self._adapters)) or "none"
            raise UnknownChannelError(f"no adapter for channel {target.channel!r} (have: {known})")
        return adapter

    def delivery_mode(self, target: Target) -> DeliveryMode:
        mode = self._modes.get(target.channel, DEFAULT_DELIVERY_MODE)
        adapter = self._adapters.get(target.channel)
        if mode == "edit" and (adapter is None or not adapter.capabilities.can_edit):
            return "blocks"
        return mode

    async def deliver(
        self, target: Target, reply: BlockReply, *, kind: ReplyKind = "block"
    ) -> None:
        preview = self._previews.get(target)
        if kind == "final" and preview is not None and not preview.finished:
            # The run's first final reply takes over the preview; any further ones are new.
            preview.finished = True
            await self._show(target, preview, _with_media(reply), final=True)
            return
        await self.send_text(target, _with_media(reply), reply_to=reply.reply_to_id)

    async def preview(self, target: Target, partial: PartialReply) -> None:
        """Show the answer so far (``edit`` mode); throttled, and a failure only logged."""
        if self.delivery_mode(target) != "edit":
            return
        now = self._clock()
        preview = self._previews.get(target)
        if preview is None:
            preview = self._previews[target] = _Preview()
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

    async def _show(self, target: Target, preview: _Preview, markdown: str, *, final: bool) -> None:
        """Make the preview's messages show ``markdown``: edit what changed, post what is new."""
        adapter = self.adapter_for(target)
        pieces = _pieces(markdown, adapter.capabilities, preview.fits)
        for index, piece in enumerate(pieces):
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


def _pieces(markdown: str, caps: Capabilities, fits: dict[str, bool]) -> list[str]:
    """``markdown`` as Markdown pieces that each render as one message of the platform."""
    pieces: list[str] = []
    for piece in chunk_text(markdown, caps.text_limit):
        pieces.extend(_fit(piece, caps, fits))
    return pieces


def _fit(piece: str, caps: Capabilities, fits: dict[str, bool]) -> list[str]:
    fit = fits.get(piece)
    if fit is None:
        rendered = render_chunks(piece, caps.markdown, caps.text_limit, line_limit=caps.line_limit)
        fit = fits[piece] = len(rendered) <= 1
    if fit:
        return [piece]
    # Rendering made it longer (markup, escapes, lines): cut the Markdown smaller.
    smaller = chunk_text(piece, max(1, len(piece) * 3 // 4))
    if any(len(part) >= len(piece) for part in smaller):
        return [piece]  # cannot shrink further; the adapter splits it
    return [fitted for part in smaller for fitted in _fit(part, caps, fits)]


def _with_media(reply: BlockReply) -> str:
    if not reply.media_urls:
        return reply.text
    listed = "\n".join(reply.media_urls)
    return f"{reply.text}\n\n{listed}" if reply.text else listed


__all__ = [
    "DEFAULT_DELIVERY_MODE",
    "ChannelDelivery",
    "DeliveryMode",
    "ReplyKind",
    "UnknownChannelError",
]
