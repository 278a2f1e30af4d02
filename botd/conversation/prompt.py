"""How inbound chat messages become the user turn the model reads.

In a group conversation each message is labelled with its sender's display name and id
(``[Alice (id 123)] text``, see ``botd.speakers``), so the model can tell who asks; a
direct chat has one peer and stays unlabelled, and so do scheduled jobs' prompts (they
arrive as direct). The context an adapter or the router attached to a message (kept
chatter, earlier thread messages, labelled the same way) comes first, then the message it
replies to, as a quote block (``botd.speakers.quote_block``), then its text. Messages of one
post (the files of an album) that reply to the same message show the quote once.

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
from ..speakers import labelled, quote_block


def turn_text(message: InboundMessage, *, quote: bool = True) -> str:
    """The text one inbound message contributes to a user turn (``quote``: with the message
    it replies to, if any)."""
    text = message.text
    if not message.is_direct:
        text = labelled(message.sender_name, message.sender_id, text)
    quoted = message.quoted
    if quote and quoted is not None:
        text = f"{quote_block(quoted.speaker, quoted.text, from_bot=quoted.from_bot)}\n{text}"
    if message.context:
        return f"{message.context}\n\n{text}"
    return text


def _quotes_shown(batch: Sequence[InboundMessage]) -> list[bool]:
    """For each message of ``batch``, whether its quote is shown: not when the message
    before it is of the same post (album) and quotes the same."""
    shown: list[bool] = []
    before: InboundMessage | None = None
    for message in batch:
        repeat = (
            before is not None
            and message.album is not None
            and message.album == before.album
            and message.quoted == before.quoted
        )
        shown.append(not repeat)
        before = message
    return shown


def user_turn(batch: Sequence[InboundMessage]) -> Message:
    """One user message for ``batch`` (messages collected while a run was busy are joined
    into one turn, blank line apart)."""
    texts = (
        turn_text(message, quote=quote)
        for message, quote in zip(batch, _quotes_shown(batch), strict=True)
    )
    return Message(role="user", content=[TextContent(text="\n\n".join(texts))])


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
    for message, quote in zip(batch, _quotes_shown(batch), strict=True):
        text = turn_text(message, quote=quote)
        quoted = quote and message.quoted is not None
        parts: list[TextContent | ImageContent] = []
        if message.attachments:
            resolved = await media.resolve(message)
            problems.extend(resolved.problems)
            parts.extend(resolved.blocks)
            parts.extend(resolved.notes)
            substance = substance or bool(resolved.blocks)
        if message.text or message.context or not message.attachments:
            parts.append(TextContent(text=text))
            substance = True
        elif parts and (quoted or not message.is_direct):
            # A file sent without a caption: who sent it, and what it replies to, come first.
            parts.insert(0, TextContent(text=text.strip()))
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
