"""Routing a reply to its channel: the adapter of a target's channel instance, and how
replies appear there.

``ChannelRoutes`` holds what the configuration says per channel (its name, the instance a
``Target`` names): the live adapter, the delivery mode (and the modes of groups that set their
own), and how replies are cut into messages (``ChunkSettings``). Every part of delivery asks
it; a reload replaces what it holds (``update``).

The mode of a chat is its group's if the group sets one, else its channel's, held to what the
platform can do: ``edit`` and ``stream`` need an adapter that edits (else ``blocks``), and
``stream`` one with native streaming, a draft or a message stream (else the ``edit`` preview).

``chat_key`` is what the parts keep a conversation's state apart by (retries, "typing…",
refusals of a native stream or of an assistant status): one chat, or one thread of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ..channels.base import ChannelAdapter, DraftStreams, MessageStreams
from ..chat import Capabilities, Target
from ..subscriber import resolve_text_chunk_limit
from .base import DEFAULT_DELIVERY_MODE, ChunkMode, ChunkSettings, DeliveryMode

_DEFAULT_CHUNKING = ChunkSettings()

ChatKey = tuple[str, str, str, str | None]
"""A conversation's place: channel, account, chat and thread."""


def chat_key(target: Target) -> ChatKey:
    """What retries, typing and refusals are kept apart by: one chat, or one thread of it."""
    return (target.channel, target.account_id, target.chat_id, target.thread_id)


class UnknownChannelError(LookupError):
    """A reply for a channel no adapter serves."""


class ChannelRoutes:
    """The channels delivery serves, by name: their adapters, modes and chunking."""

    def __init__(
        self,
        adapters: Mapping[str, ChannelAdapter],
        modes: Mapping[str, DeliveryMode] | None = None,
        chunking: Mapping[str, ChunkSettings] | None = None,
        group_modes: Mapping[str, Mapping[str, DeliveryMode]] | None = None,
    ) -> None:
        """``modes`` is each channel's delivery mode, ``group_modes`` the modes of the groups
        that set their own (by channel, then chat id); ``chunking`` how each channel's replies
        are cut into messages (a channel not named: by length, at the platform's limit)."""
        self._adapters: dict[str, ChannelAdapter] = {}
        self._modes: dict[str, DeliveryMode] = {}
        self._group_modes: dict[str, dict[str, DeliveryMode]] = {}
        self._chunking = dict(chunking or {})
        self.update(adapters, modes or {}, group_modes=group_modes)

    def update(
        self,
        adapters: Mapping[str, ChannelAdapter],
        modes: Mapping[str, DeliveryMode],
        chunking: Mapping[str, ChunkSettings] | None = None,
        group_modes: Mapping[str, Mapping[str, DeliveryMode]] | None = None,
    ) -> None:
        """Serve these adapters with these modes from now on (``chunking``: None keeps it)."""
        self._adapters = dict(adapters)
        self._modes = dict(modes)
        self._group_modes = {name: dict(chats) for name, chats in (group_modes or {}).items()}
        if chunking is not None:
            self._chunking = dict(chunking)

    def adapter(self, channel: str) -> ChannelAdapter | None:
        """The adapter serving ``channel`` (None: none does)."""
        return self._adapters.get(channel)

    def adapter_for(self, target: Target) -> ChannelAdapter:
        """The adapter of ``target``'s channel; ``UnknownChannelError`` when none serves it."""
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

    def chunk_mode(self, channel: str) -> ChunkMode:
        """How ``channel`` cuts replies: by length only, or at every paragraph too."""
        return self._chunking.get(channel, _DEFAULT_CHUNKING).mode

    def delivery_mode(self, target: Target) -> DeliveryMode:
        """How replies appear in ``target``'s chat (see the module docstring)."""
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


__all__ = ["ChannelRoutes", "ChatKey", "UnknownChannelError", "chat_key"]
