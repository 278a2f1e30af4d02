"""The block chunker: cuts a growing reply into chat-sized blocks at natural breaks.

Text is appended as it streams in; ``drain`` hands out blocks of at least ``min_chars`` and at
most ``max_chars``, preferring a paragraph break, then a line break, then the end of a
sentence, then any whitespace, and cutting hard only when the buffer reaches ``max_chars``.
No break falls inside a fenced code block unless the fence alone is longer than
``max_chars``; then the block is cut there, the fence is closed at the end of the block and
reopened at the start of the next, so every block renders as valid Markdown.

Three rules keep blocks from being cut badly:

* while text is still streaming, no block is cut at arbitrary whitespace before the buffer
  reaches ``max_chars``: cutting as soon as it holds ``min_chars`` would cut mid-sentence
  when a paragraph break is a few characters away;
* a sentence ends at ``.``, ``!`` or ``?`` followed by whitespace that has arrived, or by the
  end of the text on a forced drain, never by the end of what has streamed so far (``3.`` may
  become ``3.14``);
* a fence whose closing line has not streamed in yet holds a break at the very end of the
  buffer, so no block ends inside it, and a forced drain that must emit a block with an
  unclosed fence closes it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ..text.fences import (
    FenceSpan,
    fence_at,
    match_fence_line,
    parse_fence_spans,
    undecided_line_start,
)

BreakPreference = Literal["paragraph", "newline", "sentence"]

_SENTENCE_END = re.compile(r"[.!?](?=\s)")
_NON_SPACE = re.compile(r"\S")
_BREAK_HINT = re.compile(r"[\n.!?]")


@dataclass(frozen=True, slots=True)
class _Break:
    index: int
    fence: FenceSpan | None = None
    """Set when the cut falls inside this fence: close it here and reopen it after."""


_NO_BREAK = _Break(-1)


def _fence_view(buffer: str, limit: int) -> list[FenceSpan]:
    """Fence spans that matter for breaks up to ``limit``.

    Scanning the whole buffer for every block would make a long forced drain quadratic;
    the lines up to and including the one holding ``limit`` decide every break before it.
    """
    if limit >= len(buffer):
        return parse_fence_spans(buffer)
    newline = buffer.find("\n", limit)
    return parse_fence_spans(buffer if newline == -1 else buffer[:newline])


def _closing_line_after(buffer: str, index: int, fence: FenceSpan) -> int:
    """End of ``fence``'s closing line when only whitespace precedes it from ``index``; else -1."""
    found = _NON_SPACE.search(buffer, index)
    if found is None:
        return -1
    line_start = buffer.rfind("\n", 0, found.start()) + 1
    line_end = buffer.find("\n", found.start())
    line_end = len(buffer) if line_end == -1 else line_end
    marker = match_fence_line(buffer[line_start:line_end])
    if marker is None or line_start < fence.start + len(fence.open_line) + 1:
        return -1
    closes = marker[1][0] == fence.marker[0] and len(marker[1]) >= len(fence.marker)
    return line_end if closes else -1


def _close_fence(text: str, span: FenceSpan) -> str:
    joiner = "" if text.endswith("\n") else "\n"
    return f"{text}{joiner}{span.close_line}\n"


class BlockChunker:
    """Buffers streamed text and drains it as blocks (see the module docstring)."""

    def __init__(
        self,
        min_chars: int,
        max_chars: int,
        break_preference: BreakPreference = "paragraph",
    ) -> None:
        self.min_chars = max(1, int(min_chars))
        self.max_chars = max(self.min_chars, int(max_chars))
        self.break_preference: BreakPreference = break_preference
        # Appended pieces, joined only when a drain needs the text: growing one string
        # delta by delta would copy the whole buffer every time.
        self._pieces: list[str] = []
        self._length = 0
        # Length of the buffer when a non-forced drain last found no break (-1: none since).
        self._no_break_at = -1
        # A drain cut a block and left nothing: newlines arriving next belong to that break.
        self._after_break = False

    @property
    def buffer(self) -> str:
        if len(self._pieces) > 1:
            self._pieces = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    def __len__(self) -> int:
        return self._length

    def append(self, text: str) -> None:
        if self._after_break:
            text = text.lstrip("\n")
            self._after_break = not text
        if text:
            self._pieces.append(text)
            self._length += len(text)

    def reset(self) -> None:
        self._pieces = []
        self._length = 0
        self._no_break_at = -1
        self._after_break = False

    def has_buffered(self) -> bool:
        return self._length > 0

    def _set_buffer(self, text: str) -> None:
        self._pieces = [text] if text else []
        self._length = len(text)
        self._no_break_at = -1

    def _nothing_new_to_break_at(self, buffer: str) -> bool:
        """True when the text since the last fruitless search cannot hold a break.

        Breaks come from newlines, sentence ends (punctuation, then whitespace) and the
        buffer reaching ``max_chars``; without one of those, searching again is wasted work
        on every delta while a block waits for its paragraph to end.
        """
        since = self._no_break_at
        if since < 0 or self._length >= self.max_chars:
            return False
        new_text = buffer[since:]
        if _BREAK_HINT.search(new_text):
            return False
        return not (since and buffer[since - 1] in ".!?" and new_text[:1].isspace())

    def drain(self, force: bool, emit: Callable[[str], None]) -> None:
        """Emit the blocks that are ready; with ``force``, everything that is buffered."""
        minimum, maximum = self.min_chars, self.max_chars
        if not force and self._length < minimum:
            return
        buffer = self.buffer
        held = ""
        if not force and self._nothing_new_to_break_at(buffer):
            return
        if not force:
            # A partial last line may still become a fence line: no block may split it. A
            # trailing newline is not held back: it is the best line break there is, and
            # holding it would cut at an earlier one (should it become a paragraph break,
            # the newline that completes it is dropped after the cut all the same).
            cut = undecided_line_start(buffer, hold_fence_lines=True)
            if cut < len(buffer):
                buffer, held = buffer[:cut], buffer[cut:]
        if force and len(buffer) <= maximum:
            # Short content is never split on a forced flush.
            self.reset()
            if buffer.strip():
                emit(self._closed_if_open(buffer))
            return
        while len(buffer) >= minimum or (force and buffer):
            if force and len(buffer) <= maximum:
                found = self._soft_break(buffer)
            else:
                found = self._full_break(buffer, 1 if force else minimum, force)
            if found.index <= 0:
                if force:
                    self.reset()
                    if buffer.strip():
                        emit(self._closed_if_open(buffer))
                    return
                self._set_buffer(buffer + held)
                # What was held back counts as new: it may hold a break once more arrives.
                self._no_break_at = len(buffer)
                return
            index = found.index
            raw = buffer[:index]
            if not raw.strip():
                buffer = buffer[index:].lstrip("\n").lstrip()
                continue
            if found.fence is not None:
                emit(_close_fence(raw, found.fence))
                closing_end = _closing_line_after(buffer, index, found.fence)
                if closing_end >= 0:
                    # Only the fence's own closing line was left: the close above replaces it.
                    buffer = buffer[closing_end:].lstrip("\n")
                else:
                    rest = buffer[index:]
                    # Reopened even when only the next line's indentation has streamed: the
                    # fence's code is still to come (dropping it left that code unfenced).
                    reopen = rest.strip() or (not force and not found.fence.closed)
                    buffer = found.fence.open_line + "\n" + rest if reopen else ""
            else:
                emit(raw)
                if index < len(buffer) and buffer[index].isspace():
                    index += 1
                buffer = buffer[index:].lstrip("\n")
            if not force and len(buffer) < maximum:
                break
        self._set_buffer(buffer + held)
        self._after_break = not buffer and not held

    # -- break picking ---------------------------------------------------------------------

    def _full_break(self, buffer: str, minimum: int, force: bool) -> _Break:
        """The best break in the first ``max_chars``, searching from the right."""
        maximum = self.max_chars
        if len(buffer) < minimum:
            return _NO_BREAK
        window = buffer[:maximum]
        spans = _fence_view(buffer, len(window))
        # One character past the window tells whether a final "." ends a sentence.
        lookahead = buffer[: maximum + 1]
        text_ends = force and len(buffer) <= maximum
        preference = self.break_preference

        if preference == "paragraph":
            pos = window.rfind("\n\n")
            while pos >= minimum:
                for candidate in (pos, pos + 1):
                    if candidate >= minimum and fence_at(spans, candidate) is None:
                        return _Break(candidate)
                pos = window.rfind("\n\n", 0, pos)
        if preference in ("paragraph", "newline"):
            pos = window.rfind("\n")
            while pos >= minimum:
                span = fence_at(spans, pos)
                if span is None:
                    return _Break(pos)
                pos = window.rfind("\n", 0, min(pos, span.start))
        if preference != "newline":
            found = self._last_sentence_end(lookahead, len(window), spans, minimum, text_ends)
            if found > 0:
                return _Break(found)
        if len(buffer) < maximum:
            return _NO_BREAK  # wait for a natural break rather than cut mid-sentence
        pos = len(window) - 1
        while pos >= minimum:
            span = fence_at(spans, pos)
            if span is not None:
                pos = span.start  # a break at a fence's first character is outside it
            elif window[pos].isspace():
                return _Break(pos)
            else:
                pos -= 1
        if len(buffer) >= maximum:
            return self._hard_cut(buffer, maximum, fence_at(spans, maximum))
        return _NO_BREAK

    @staticmethod
    def _hard_cut(buffer: str, index: int, fence: FenceSpan | None) -> _Break:
        """A cut at ``index``; inside a fence it is closed there and reopened after.

        The cut goes after the last complete line inside the fence, so code lines stay whole;
        only a single line longer than a block is cut mid-line. It must not split the
        fence's opening line: it moves to just before the fence,
        or, when the fence starts the buffer, past the opening line and one character of
        content (so reopening it always consumes more than it adds); with no content after
        the opening line yet there is no cut.
        """
        if fence is None:
            return _Break(index)
        if fence.closed and index > fence.close_start:
            index = fence.close_start  # never inside the closing line
        opener_end = fence.start + len(fence.open_line) + 1
        if index <= opener_end:
            if fence.start > 0:
                return _Break(fence.start)
            if opener_end >= len(buffer):
                # Only the opening line so far: a cut would consume nothing and reopen it.
                return _NO_BREAK
            index = opener_end + 1
        else:
            # Keep code lines whole: cut after the last complete line that fits.
            newline = buffer.rfind("\n", opener_end, index)
            if newline >= opener_end:
                index = newline + 1
        return _Break(index, fence)

    def _soft_break(self, buffer: str) -> _Break:
        """For a forced drain that fits: the earliest natural break, else none."""
        spans = _fence_view(buffer, len(buffer))
        preference = self.break_preference
        if preference == "paragraph":
            pos = buffer.find("\n\n", 1)
            while pos != -1:
                for candidate in (pos, pos + 1):
                    if fence_at(spans, candidate) is None:
                        return _Break(candidate)
                pos = buffer.find("\n\n", pos + 1)
        if preference in ("paragraph", "newline"):
            pos = buffer.find("\n", 1)
            while pos != -1:
                if fence_at(spans, pos) is None:
                    return _Break(pos)
                pos = buffer.find("\n", pos + 1)
        if preference != "newline":
            found = self._last_sentence_end(buffer, len(buffer), spans, 1, True)
            if found > 0:
                return _Break(found)
        return _NO_BREAK

    @staticmethod
    def _last_sentence_end(
        text: str, limit: int, spans: list[FenceSpan], minimum: int, text_ends: bool
    ) -> int:
        """The last break after a sentence's end, at or after ``minimum``, up to ``limit``."""
        best = -1
        for match in _SENTENCE_END.finditer(text, minimum, limit + 1):
            cut = match.start() + 1
            if cut <= limit and fence_at(spans, cut) is None:
                best = cut
        ends_text = text_ends and limit > minimum and text[limit - 1] in ".!?"
        if ends_text and fence_at(spans, limit) is None:
            best = limit
        return best

    @staticmethod
    def _closed_if_open(text: str) -> str:
        spans = parse_fence_spans(text)
        if spans and not spans[-1].closed:
            return _close_fence(text.rstrip("\n"), spans[-1])
        return text
