"""How many earlier images a run shows the model again.

Images stay in the transcript as their user turn had them (base64 in the stored message),
so the model can still look at a photo in later turns and a run resumed after a restart
has it. Sending every image of a long conversation again with each request would grow the
requests without bound, so a run's history keeps only the newest ``KEPT_IMAGES`` image
blocks; older ones are shown as a one-line placeholder.

An image the model refused (too large, unreadable, not for this model) would make every
later request fail the same way, since it is sent again with each one: such an image
leaves the conversation for good, replaced by ``LEFT_OUT_IMAGE`` (``without_images``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..events import ImageContent, Message, TextContent

KEPT_IMAGES = 4
"""Images of earlier turns sent again with a request (the newest ones)."""

EARLIER_IMAGE = "[an image sent earlier, no longer shown]"

LEFT_OUT_IMAGE = "[an image was left out: the model could not take it]"
"""What stands where an image the model refused was."""


def with_recent_images(history: Sequence[Message], keep: int = KEPT_IMAGES) -> list[Message]:
    """``history`` with all but its newest ``keep`` image blocks replaced by a placeholder
    (the messages themselves untouched: changed ones are copies)."""
    seen = 0
    out: list[Message] = []
    for message in reversed(history):
        if isinstance(message.content, str) or not any(
            isinstance(block, ImageContent) for block in message.content
        ):
            out.append(message)
            continue
        blocks: list[object] = []
        replaced = False
        for block in reversed(message.content):
            if isinstance(block, ImageContent):
                seen += 1
                if seen > keep:
                    blocks.append(TextContent(text=EARLIER_IMAGE))
                    replaced = True
                    continue
            blocks.append(block)
        blocks.reverse()
        out.append(message.model_copy(update={"content": blocks}) if replaced else message)
    out.reverse()
    return out


def without_image(message: Message, refused: Collection[str]) -> Message | None:
    """A copy of ``message`` with each image whose data is in ``refused`` replaced by
    ``LEFT_OUT_IMAGE``; None when it holds none of them."""
    if isinstance(message.content, str) or not any(
        isinstance(block, ImageContent) and block.data in refused for block in message.content
    ):
        return None
    content = [
        TextContent(text=LEFT_OUT_IMAGE)
        if isinstance(block, ImageContent) and block.data in refused
        else block
        for block in message.content
    ]
    return message.model_copy(update={"content": content})


def without_images(messages: Sequence[Message], refused: Collection[str]) -> list[Message]:
    """``messages`` with the images in ``refused`` left out (``without_image``); the
    messages holding none of them are the same objects."""
    return [without_image(message, refused) or message for message in messages]


__all__ = [
    "EARLIER_IMAGE",
    "KEPT_IMAGES",
    "LEFT_OUT_IMAGE",
    "with_recent_images",
    "without_image",
    "without_images",
]
