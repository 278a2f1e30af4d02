"""What crosses between a channel adapter and the core: inbound messages and targets."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol


@dataclass(frozen=True, slots=True)
class Target:
    """Where to post: a chat on a channel account, optionally a thread, optionally a reply."""

    channel: str
    """The platform: ``telegram``, ``slack``, ``discord``, ``console``."""
    chat_id: str
    account_id: str = "default"
    thread_id: str | None = None
    reply_to_id: str | None = None

    def route(self) -> str:
        """The messaging-tool route string of this target (``chat`` or ``chat:thread:T``)."""
        return self.chat_id if self.thread_id is None else f"{self.chat_id}:thread:{self.thread_id}"


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A chat message addressed to the bot, already mapped to its conversation."""

    channel: str
    chat_id: str
    sender_id: str
    text: str
    message_id: str
    conversation_key: str
    """Decided by the adapter: a DM per peer, a group, or a thread/topic of it."""
    account_id: str = "default"
    thread_id: str | None = None
    sender_name: str = ""
    is_direct: bool = False
    mentions_bot: bool = False
    reply_to_message_id: str | None = None
    target: Target | None = None
    """Where answers go, when the adapter decides it (Slack's ``reply_to_mode``)."""

    def reply_target(self) -> Target:
        """Where an answer to this message goes."""
        if self.target is not None:
            return self.target
        return Target(self.channel, self.chat_id, self.account_id, self.thread_id)


@dataclass(frozen=True, slots=True)
class MessageRef:
    """A message the bot posted, so it can be edited or reacted to."""

    target: Target
    message_id: str


Flavour = Literal["slack", "telegram_html", "discord", "plain"]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a platform allows: limits apply to the text as the platform receives it."""

    text_limit: int
    markdown: Flavour
    line_limit: int | None = None
    can_edit: bool = True
    threads: bool = True


InboundSink = Callable[[InboundMessage], Awaitable[None]]
"""Where an adapter hands each inbound message (the router)."""


class ChannelAdapter(Protocol):
    """One platform connection. Raw SDK objects never leave the adapter.

    ``send`` takes Markdown as the agent wrote it; the adapter renders it for its platform,
    splits it under its limits (``Capabilities``) and returns one ref per message posted.
    """

    name: str
    capabilities: Capabilities

    async def start(self, sink: InboundSink) -> None:
        """Connect and begin delivering inbound messages to ``sink``; returns once running."""
        ...

    async def stop_inbound(self) -> None:
        """Stop receiving, keep sending: shutdown lets running answers finish after this.

        What has not been received stays with the platform where it can (Telegram's queue),
        so a restart picks it up instead of it being taken in and dropped.
        """
        ...

    async def stop(self) -> None: ...

    async def send(self, target: Target, markdown: str) -> list[MessageRef]: ...

    async def edit(self, ref: MessageRef, markdown: str) -> None: ...

    async def react(self, ref: MessageRef, emoji: str) -> None: ...

    async def typing(self, target: Target) -> None: ...
