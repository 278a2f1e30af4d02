"""One run's preview (``edit`` and ``stream`` modes): the messages that show the answer so
far, how it shows natively, and what its journal holds.

A preview is posted at the first partial reply and edited as the answer grows; a text that
outgrows one message continues in further messages (``previews.py`` shows it, ``native.py``
drafts or streams it). Its messages are kept in the run's ``PreviewJournal`` whenever they
change (``keep``), so a run resumed after a crash finishes the preview it left instead of
posting the answer beside it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Literal

from ..chat import MessageRef, Target
from .base import PreviewJournal

log = logging.getLogger(__name__)

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

    async def keep(self, target: Target) -> None:
        """Keep the preview's messages where a resumed run finds them, when they changed; a
        failure is only logged."""
        state = (tuple(self.refs), self.streaming)
        if self.journal is None or state == self.kept or not self.refs:
            return
        try:
            await self.journal.preview_posted(self.refs, streaming=self.streaming)
        except Exception as exc:
            log.warning("keeping the preview in %s failed: %s", target.chat_id, exc)
            return
        self.kept = state


__all__ = ["Native", "Preview"]
