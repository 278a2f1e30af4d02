"""The one-line notices a run posts about itself, and ``NoticeFirst``, which puts one before
the run's first piece."""

from __future__ import annotations

from ..delivery import RunOutput
from ..subscriber import BlockReply, PartialReply

INTERRUPTED_NOTICE = "(The answer was interrupted by a restart; continuing.)"
"""Posted once before a resumed answer goes on, when the interrupted one had shown something."""
NOT_HANDLED_NOTICE = (
    "Sorry, I could not handle your message: botd's storage is failing. Please try again later."
)
"""Told when the store fails before the run could answer."""
UNSAVED_NOTICE = (
    "Note: botd could not save this exchange (its storage is failing), so I will not remember it."
)
"""Told after an answer whose transcript the store could not take."""


class NoticeFirst:
    """A run's output with a one-line notice going out before its first piece.

    The notice (None: none) says why the answer is what it is: a resumed run's that it was
    interrupted (only when the interrupted attempt had shown something), a run in a
    conversation the reset policy just started over that it starts over. It goes out only if
    the run has something to add: an answer the chat already shows in full gets no notice.
    """

    def __init__(self, output: RunOutput, notice: str | None) -> None:
        self._output = output
        self._notice_text = notice

    def _notice(self) -> None:
        if self._notice_text is not None:
            text, self._notice_text = self._notice_text, None
            self._output.block(BlockReply(text=text))
            self._output.flush()  # alone, not joined to the answer's first block

    def block(self, reply: BlockReply) -> None:
        self._notice()
        self._output.block(reply)

    def partial(self, reply: PartialReply) -> None:
        self._notice()
        self._output.partial(reply)

    def final(self, reply: BlockReply) -> None:
        self._notice()
        self._output.final(reply)


__all__ = ["INTERRUPTED_NOTICE", "NOT_HANDLED_NOTICE", "UNSAVED_NOTICE", "NoticeFirst"]
