"""Edit-mode (and stream-mode) previews: one run's live messages, and how a text is cut to
fit them.

A preview is posted at the first partial reply and edited as the answer grows. A text that
outgrows one message is cut at a chunk boundary and continues in further messages, each
edited the same way, so the answer is never posted twice. Pieces are cut in Markdown but must
fit once rendered for the platform (markup and escapes add length), so each piece is checked
against the platform's renderer and cut smaller when it would not fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..chat import Capabilities, MessageRef
from ..subscriber import chunk_by_line, chunk_text
from .base import ChunkMode, PreviewJournal

Native = Literal["draft", "stream"]
"""How a ``stream`` preview shows the answer natively: a Telegram draft (its growing last
piece, no message), or a Slack stream (its first message, streamed)."""


@dataclass(eq=False)
class Preview:
    """One run's live messages in ``edit`` or ``stream`` mode: each message's ref and the
    Markdown it shows ("" when not known: a preview an earlier process left)."""

    refs: list[MessageRef] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)
    edited_at: float = 0.0
    finished: bool = False
    fits: dict[str, bool] = field(default_factory=dict)
    """Whether a piece renders as one message; earlier pieces recur on every edit."""
    native: Native | None = None
    """Shown natively (``stream`` mode where the platform can), else as an ``edit`` preview."""
    draft_id: int = 0
    drafted: bool = False
    """A draft shows the answer's last piece now."""
    streaming: bool = False
    """``refs[0]`` is a stream still open (possibly one an earlier process left)."""
    journal: PreviewJournal | None = None
    kept: tuple[tuple[MessageRef, ...], bool] = ((), False)
    """What the journal holds of this preview: its refs and whether it streams."""

    @property
    def showing(self) -> bool:
        """Whether the chat shows anything of this preview."""
        return bool(self.refs) or self.drafted


def pieces(
    markdown: str, caps: Capabilities, fits: dict[str, bool], mode: ChunkMode = "length"
) -> list[str]:
    """``markdown`` as Markdown pieces that each render as one message of the platform;
    in ``newline`` mode a piece per paragraph (see ``paragraphs``)."""
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


__all__ = ["Native", "Preview", "paragraphs", "pieces"]
