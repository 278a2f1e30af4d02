"""Markdown code fences: where they open and close in a piece of text.

A fence line is 0-3 spaces of indent, then three or more backticks or tildes. An open fence
is closed by a fence line of the same character whose marker is at least as long. Everything
between is content, including other fence lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FENCE_LINE = re.compile(r"( {0,3})(`{3,}|~{3,})")
# A line start that more text could still turn into a fence line (or lengthen its marker).
_UNDECIDED_LINE = re.compile(r" {0,3}(?:`*|~*)")


@dataclass(frozen=True, slots=True)
class FenceSpan:
    """One fenced block: ``text[start:end]`` from its opening line to its closing line."""

    start: int
    """Offset of the opening line's first character."""
    end: int
    """Offset just past the closing line (its newline's position), or the text's length."""
    open_line: str
    """The whole opening line, without its newline (``"```python"``)."""
    marker: str
    """The backtick or tilde run that opened it (``"```"``, ``"~~~~"``)."""
    indent: str
    closed: bool
    close_start: int
    """Offset of the closing line's first character (``end`` when the fence is unclosed)."""

    @property
    def close_line(self) -> str:
        return self.indent + self.marker


def match_fence_line(line: str) -> tuple[str, str] | None:
    """``(indent, marker)`` when ``line`` is a fence line, else None."""
    m = FENCE_LINE.match(line)
    if m is None:
        return None
    return m.group(1), m.group(2)


def undecided_line_start(
    text: str, *, at_line_start: bool = True, hold_fence_lines: bool = False
) -> int:
    """Where a trailing partial line that may still become a fence line begins.

    ``len(text)`` when there is none. ``at_line_start`` says whether ``text`` itself begins
    a line (a stream fed in pieces may be in the middle of one). With ``hold_fence_lines``
    a partial line that already is a fence line is held too (its info string is still
    streaming, and cutting it would break the fence).
    """
    newline = text.rfind("\n")
    line_begin = newline + 1 if newline >= 0 else (0 if at_line_start else -1)
    if 0 <= line_begin < len(text) and (
        _UNDECIDED_LINE.fullmatch(text, line_begin)
        or (hold_fence_lines and FENCE_LINE.match(text, line_begin))
    ):
        return line_begin
    return len(text)


def parse_fence_spans(text: str) -> list[FenceSpan]:
    """Every fenced block of ``text``, in order. A fence still open at the end runs to the end."""
    spans: list[FenceSpan] = []
    if "```" not in text and "~~~" not in text:
        return spans
    open_start = -1
    open_line = marker = indent = ""
    offset = 0
    length = len(text)
    while offset <= length:
        newline = text.find("\n", offset)
        line_end = length if newline == -1 else newline
        line = text[offset:line_end]
        found = match_fence_line(line)
        if found is not None:
            line_indent, line_marker = found
            if open_start < 0:
                open_start, open_line, marker, indent = offset, line, line_marker, line_indent
            elif line_marker[0] == marker[0] and len(line_marker) >= len(marker):
                spans.append(
                    FenceSpan(open_start, line_end, open_line, marker, indent, True, offset)
                )
                open_start = -1
        if newline == -1:
            break
        offset = newline + 1
    if open_start >= 0:
        spans.append(FenceSpan(open_start, length, open_line, marker, indent, False, length))
    return spans


def fence_at(spans: list[FenceSpan], index: int) -> FenceSpan | None:
    """The fence a break at ``index`` would fall inside, if any.

    A break exactly at a span's start, or exactly at a closed span's end (the closing line's
    newline), is outside it. A fence that has not closed yet also holds a break at the very
    end of the text: its closing line is still to come, and no block may end inside an open
    fence.
    """
    for span in spans:
        if span.start < index < span.end or (not span.closed and index == span.end > span.start):
            return span
        if span.start >= index:
            break
    return None


def open_fence_at_end(text: str) -> FenceSpan | None:
    """The fence left open at the end of ``text``, if any."""
    spans = parse_fence_spans(text)
    if spans and not spans[-1].closed:
        return spans[-1]
    return None


def fences_balanced(text: str) -> bool:
    """True when no fence is left open at the end of ``text``."""
    return open_fence_at_end(text) is None
