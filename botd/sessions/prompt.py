"""How inbound chat messages become the user turn the model reads."""

from __future__ import annotations

from collections.abc import Sequence

from ..chat import InboundMessage
from ..events import Message, TextContent


def turn_text(message: InboundMessage) -> str:
    """The text one inbound message contributes to a user turn."""
    return message.text


def user_turn(batch: Sequence[InboundMessage]) -> Message:
    """One user message for ``batch`` (messages collected while a run was busy are joined
    into one turn, blank line apart)."""
    text = "\n\n".join(turn_text(message) for message in batch)
    return Message(role="user", content=[TextContent(text=text)])


__all__ = ["turn_text", "user_turn"]
