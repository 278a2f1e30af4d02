"""How many earlier images a run shows the model again.

Images stay in the transcript as their user turn had them (base64 in the stored message),
so the model can still look at a photo in later turns and a run resumed after a restart
has it. Sending every image of a long conversation again with each request would grow the
requests without bound, so a run's history keeps only the newest ``KEPT_IMAGES`` image
blocks; older ones are shown as a one-line placeholder.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..events import ImageContent, Message, TextContent

KEPT_IMAGES = 4
"""Images of earlier turns sent again with a request (the newest ones)."""

EARLIER_IMAGE = "[an image sent earlier, no longer shown]"


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


__all__ = ["EARLIER_IMAGE", "KEPT_IMAGES", "with_recent_images"]
