"""Outbound: a session's replies to the adapter of their platform.

Sessions already deliver one run's replies in order; this layer finds the adapter for the
target's channel and hands it the Markdown (each adapter renders and splits it for its
platform). Media the agent attached are named after the text, since uploads come later.
A platform's refusal is logged in its own words and re-raised to the session, which
reports it; nothing is dropped silently.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from .channels.base import ChannelAdapter, MessageRef, Target
from .subscriber import BlockReply

log = logging.getLogger(__name__)


class UnknownChannelError(LookupError):
    """A reply for a channel no adapter serves."""


class ChannelDelivery:
    """A session ``ReplySink`` that posts through the channel adapters."""

    def __init__(self, adapters: Mapping[str, ChannelAdapter]) -> None:
        self._adapters = dict(adapters)

    def adapter_for(self, target: Target) -> ChannelAdapter:
        adapter = self._adapters.get(target.channel)
        if adapter is None:
            known = ", ".join(sorted(self._adapters)) or "none"
            raise UnknownChannelError(f"no adapter for channel {target.channel!r} (have: {known})")
        return adapter

    async def deliver(self, target: Target, reply: BlockReply) -> None:
        await self.send_text(target, _with_media(reply), reply_to=reply.reply_to_id)

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


def _with_media(reply: BlockReply) -> str:
    if not reply.media_urls:
        return reply.text
    listed = "\n".join(reply.media_urls)
    return f"{reply.text}\n\n{listed}" if reply.text else listed
