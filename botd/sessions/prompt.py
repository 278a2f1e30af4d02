"""How inbound chat messages become the user turn the model reads.

In a group conversation each message is labelled with its sender's display name and id
(``[Alice (id 123)] text``, see ``botd.speakers``), so the model can tell who asks; a
direct chat has one peer and stays unlabelled, and so do scheduled jobs' prompts (they
arrive as direct). The context an adapter or the router attached to a message (kept
chatter, earlier thread messages, labelled the same way) comes first.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..chat import InboundMessage
from ..events import Message, TextContent
from ..speakers import labelled


def turn_text(message: InboundMessage) -> str:
    """The text one inbound message contributes to a user turn."""
    text = message.text
    if not message.is_direct:
        text = labelled(message.sender_name, message.sender_id, text)
    if message.context:
        return f"{message.context}\n\n{text}"
    return text


def user_turn(batch: Sequence[InboundMessage]) -> Message:
    """One user message for ``batch`` (messages collected while a run was busy are joined
    into one turn, blank line apart)."""
    text = "\n\n".join(turn_text(message) for message in batch)
    return Message(role="user", content=[TextContent(text=text)])


__all__ = ["turn_text", "user_turn"]
