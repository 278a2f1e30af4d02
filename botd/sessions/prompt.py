"""How inbound chat messages become the user turn the model reads.

``user_turn`` joins the texts of a batch; ``media_user_turn`` also reads the messages'
attachments (``botd.media``): each message's files (images, transcripts, document text)
come right before its text, and a note for each file that could not be read. The lines
for the user about those files are returned beside the turn, for the caller to send.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..chat import InboundMessage
from ..events import ContentBlock, ImageContent, Message, TextContent
from ..media import MediaResolver


def turn_text(message: InboundMessage) -> str:
    """The text one inbound message contributes to a user turn."""
    return message.text


def user_turn(batch: Sequence[InboundMessage]) -> Message:
    """One user message for ``batch`` (messages collected while a run was busy are joined
    into one turn, blank line apart)."""
    text = "\n\n".join(turn_text(message) for message in batch)
    return Message(role="user", content=[TextContent(text=text)])


async def media_user_turn(
    batch: Sequence[InboundMessage], media: MediaResolver
) -> tuple[Message | None, list[str]]:
    """The user turn for ``batch`` with its attachments read, and a line for the user per
    file that could not be read.

    The turn is None when nothing is left for the model: no message has text and no file
    could be read (then the lines are the whole answer).
    """
    blocks: list[TextContent | ImageContent] = []
    problems: list[str] = []
    substance = False
    for message in batch:
        text = turn_text(message)
        parts: list[TextContent | ImageContent] = []
        if message.attachments:
            resolved = await media.resolve(message)
            problems.extend(resolved.problems)
            parts.extend(resolved.blocks)
            parts.extend(resolved.notes)
            substance = substance or bool(resolved.blocks)
        if text or not message.attachments:
            parts.append(TextContent(text=text))
            substance = True
        blocks.extend(parts)
    if not substance:
        return None, problems
    return Message(role="user", content=_joined(blocks)), problems


def _joined(blocks: Sequence[TextContent | ImageContent]) -> list[ContentBlock]:
    """``blocks`` with each run of text blocks joined into one, blank line apart."""
    joined: list[ContentBlock] = []
    for block in blocks:
        last = joined[-1] if joined else None
        if isinstance(block, TextContent) and isinstance(last, TextContent):
            joined[-1] = TextContent(text=f"{last.text}\n\n{block.text}")
        else:
            joined.append(block)
    return joined


__all__ = ["media_user_turn", "turn_text", "user_turn"]
