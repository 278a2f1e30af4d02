"""How a reply's Markdown is cut into messages of its platform.

Each channel cuts replies as its ``ChunkSettings`` say (``chunk_mode``, ``text_chunk_limit``):
under its limit, which is the platform's own unless set lower (``ChannelRoutes.capabilities``),
and in ``newline`` mode one message per paragraph. The cut applies to every text delivery
posts: blocks, finals, captions and the pieces of a preview.

Pieces are cut in Markdown but must fit once rendered for the platform (markup and escapes add
length), so each piece is checked against the platform's renderer and cut smaller when it
would not fit. A preview is cut the same way on every update, so its earlier pieces recur and
their fit is remembered (``fits``).
"""

from __future__ import annotations

from ..chat import Capabilities
from ..subscriber import chunk_by_line, chunk_text
from .base import ChunkMode


def messages(markdown: str, caps: Capabilities, mode: ChunkMode = "length") -> list[str]:
    """``markdown`` cut into parts that each render as one message of the platform.

    A short text is one part as it is (rendering cannot make it outgrow a message); a longer
    one is rendered to see whether it fits, and cut when it does not. In ``newline`` mode each
    paragraph is cut so on its own.
    """
    if mode == "newline":
        return [part for each in paragraphs(markdown, caps, mode) for part in messages(each, caps)]
    lines = caps.line_limit
    if len(markdown) * 8 <= caps.text_limit and (lines is None or markdown.count("\n") * 2 < lines):
        return [markdown]
    rendered = caps.markup.chunks(markdown, caps.text_limit, line_limit=lines)
    if len(rendered) <= 1:
        return [markdown]
    return pieces(markdown, caps, {})


def pieces(
    markdown: str, caps: Capabilities, fits: dict[str, bool], mode: ChunkMode = "length"
) -> list[str]:
    """``markdown`` as Markdown pieces that each render as one message of the platform;
    in ``newline`` mode a piece per paragraph (see ``paragraphs``). ``fits`` remembers
    whether a piece renders as one message."""
    found: list[str] = []
    for paragraph in paragraphs(markdown, caps, mode):
        for piece in chunk_text(paragraph, caps.text_limit):
            found.extend(_fit(piece, caps, fits))
    return found


def paragraphs(markdown: str, caps: Capabilities, mode: ChunkMode) -> list[str]:
    """``markdown`` as the messages ``mode`` asks for before any cut by length: the whole
    text (``length``), or one per paragraph outside code fences (``newline``; one per line on
    a plain-text channel, where a line is what reads as a message)."""
    if mode == "length":
        return [markdown]
    if caps.markup.is_plain:
        return chunk_by_line(markdown, caps.text_limit)
    return chunk_text(markdown, caps.text_limit, mode="newline")


def _fit(piece: str, caps: Capabilities, fits: dict[str, bool]) -> list[str]:
    fit = fits.get(piece)
    if fit is None:
        rendered = caps.markup.chunks(piece, caps.text_limit, line_limit=caps.line_limit)
        fit = fits[piece] = len(rendered) <= 1
    if fit:
        return [piece]
    # Rendering made it longer (markup, escapes, lines): cut the Markdown smaller.
    smaller = chunk_text(piece, max(1, len(piece) * 3 // 4))
    if any(len(part) >= len(piece) for part in smaller):
        return [piece]  # cannot shrink further; the adapter splits it
    return [fitted for part in smaller for fitted in _fit(part, caps, fits)]


__all__ = ["messages", "paragraphs", "pieces"]
