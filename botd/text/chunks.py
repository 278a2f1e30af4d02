"""Outbound splitting of a reply under a platform's text limit.

A reply longer than the platform allows is cut into chunks no longer than ``limit``:

* ``chunk_text(..., markdown=False)`` is the plain, parenthesis-aware split: in each window
  of ``limit`` characters it breaks at the last newline, else at the last other whitespace
  outside parentheses, else hard at the limit.
* ``chunk_text(..., markdown=True)`` does the same but breaks only
  outside code fences; when a fence has to be cut, the chunk closes it and the next chunk
  reopens it, so every chunk renders on its own.
* ``mode="newline"`` splits at blank lines outside fences, one chunk per paragraph
  (paragraphs are not packed together), and cuts an over-long paragraph by length.
* ``chunk_by_line`` sends one chunk per line.

Delivery cuts every reply with these (``botd.delivery``): by length under each channel's
limit, which ``resolve_text_chunk_limit`` finds (a channel's ``text_chunk_limit``, else the
platform's own); with ``chunk_mode: newline`` first by paragraph (``mode="newline"``), or by
line on the plain-text console (``chunk_by_line``).

Each function is linear in the text: fence spans are parsed once and looked up by bisection,
and every step looks only at the window it is about to emit.

The Markdown split keeps these guarantees:

* Markdown chunks never exceed the limit, have balanced fences and never hold an empty fence
  made by the split (both sides of a cut keep some code). A text whose last fence never closes
  gets the closing line too.
* A cut inside a fence keeps the code verbatim: no separator character is dropped there.
* A mid-line cut never leaves the next chunk starting with what would read as a fence line
  (``foo ```bar`` cut before the backticks) or, inside a fence, as its closing line: the cut
  moves back instead.
* An opening line longer than half the limit is not repeated: later chunks reopen the fence
  with the bare marker. One that cannot share a chunk with the closing line at all is replaced
  by the bare marker, its info text becoming the first code line. A closing line longer than
  its marker may be replaced by the bare marker.
* Balance can be impossible: a marker so long that two of them and one character exceed the
  limit, or a run of marker characters inside code longer than the room a chunk leaves. Such a
  fence is cut like plain text (nothing is lost) or may end early.
* Whitespace-only chunks are never produced; a whitespace-only text gives no chunks. Leading
  blank lines are dropped at a break, but a line's indentation is kept.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from typing import Literal

from botd.text.fences import FENCE_LINE, FenceSpan, fences_balanced, parse_fence_spans

DEFAULT_TEXT_CHUNK_LIMIT = 4000

ChunkMode = Literal["length", "newline"]

_PAREN = re.compile(r"[()]")
# Greedy ``.*`` runs to the end of the range and backs off: the match ends just past the last
# whitespace character that is not a newline.
_LAST_SPACE = re.compile(r"(?s:.*)[^\S\n]")
_NON_SPACE = re.compile(r"\S")
# A blank line: a newline, optional spaces or tabs, then one or more newlines.
_PARAGRAPH_BREAK = re.compile(r"\n[\t ]*\n+")


def resolve_text_chunk_limit(channel_limit: int | None, configured: int | None = None) -> int:
    """The configured limit when positive, else the channel's own limit, else 4000."""
    if configured is not None and configured > 0:
        return configured
    if channel_limit is not None and channel_limit > 0:
        return channel_limit
    return DEFAULT_TEXT_CHUNK_LIMIT


def chunk_text(
    text: str, limit: int, *, markdown: bool = True, mode: ChunkMode = "length"
) -> list[str]:
    """Split ``text`` into chunks of at most ``limit`` characters (``limit <= 0``: no limit).

    ``markdown`` keeps code fences whole or closes and reopens them across chunks; ``mode``
    ``"newline"`` first splits at blank lines outside fences. A text that fits is returned as
    it is (markdown: when its fences are balanced).
    """
    if mode not in ("length", "newline"):
        raise ValueError(f"unknown chunk mode: {mode!r}")
    if not text:
        return []
    if limit <= 0:
        return [text]
    if mode == "newline":
        return _chunk_paragraphs(text, limit, markdown=markdown)
    if _NON_SPACE.search(text) is None:
        return []
    if len(text) <= limit and (not markdown or fences_balanced(text)):
        return [text]
    return _chunk_markdown(text, limit) if markdown else _chunk_plain(text, limit)


def chunk_by_line(
    text: str, limit: int, *, trim_lines: bool = True, split_long_lines: bool = True
) -> list[str]:
    """One chunk per non-blank line.

    Blank lines become leading newlines of the next chunk (at most ``limit - 1``); blank lines at
    the end go onto the last chunk as far as the limit allows. A line longer than the limit is
    split by plain length chunking unless ``split_long_lines`` is false. ``limit <= 0`` means
    no length limit.
    """
    chunks: list[str] = []
    pending_blank = 0
    for line in text.split("\n") if text else ():
        stripped = line.strip()
        if not stripped:
            pending_blank += 1
            continue
        if limit > 0:
            pending_blank = min(pending_blank, limit - 1)
        prefix = "\n" * pending_blank
        pending_blank = 0
        value = stripped if trim_lines else line
        if limit <= 0 or not split_long_lines or len(prefix) + len(value) <= limit:
            chunks.append(prefix + value)
            continue
        pieces = _chunk_plain(value, limit, first_limit=limit - len(prefix))
        pieces[0] = prefix + pieces[0]
        chunks.extend(pieces)
    if pending_blank and chunks:
        room = pending_blank if limit <= 0 else min(pending_blank, limit - len(chunks[-1]))
        chunks[-1] += "\n" * max(0, room)
    return chunks


# --- plain length chunking ----------------------------------------------------------------


def _chunk_plain(text: str, limit: int, *, first_limit: int | None = None) -> list[str]:
    """The plain split (see the module docstring); the first chunk may get a smaller budget."""
    chunks: list[str] = []
    pos = 0
    # The smaller first budget holds until a chunk is actually emitted.
    budget = limit if first_limit is None else first_limit
    while len(text) - pos > budget:
        window_end = pos + budget
        cut = _find_break(text, pos, window_end, [(pos, window_end)])
        if cut < 0:
            cut = window_end
        _append_nonblank(chunks, text[pos:cut].rstrip())
        pos = _next_start(text, cut, keep_indent=False)
        if chunks:
            budget = limit
    _append_nonblank(chunks, text[pos:].rstrip())
    return chunks


def _append_nonblank(chunks: list[str], chunk: str) -> None:
    if chunk and not chunk.isspace():
        chunks.append(chunk)


def _find_break(
    text: str,
    lo: int,
    hi: int,
    allowed: Iterable[tuple[int, int]],
    accept: Callable[[int], bool] | None = None,
) -> int:
    """Where to break ``text[lo:hi]``, or -1 for none.

    Only positions inside the ``allowed`` ranges count, and only at parenthesis depth zero
    (depth counted from ``lo`` over allowed positions; an unmatched ``)`` is ignored). The last
    newline after ``lo`` wins; else the last other whitespace after ``lo`` that ``accept``
    takes.
    """
    depth_zero: list[tuple[int, int]] = []
    depth = 0
    for start, end in allowed:
        free_from = start
        for match in _PAREN.finditer(text, start, end):
            at = match.start()
            if text[at] == "(":
                if depth == 0:
                    depth_zero.append((free_from, at))
                depth += 1
            elif depth > 0:
                depth -= 1
                if depth == 0:
                    free_from = at + 1
        if depth == 0:
            depth_zero.append((free_from, end))

    first = lo + 1
    for start, end in reversed(depth_zero):
        newline = text.rfind("\n", max(start, first), end)
        if newline >= 0:
            return newline
    for start, end in reversed(depth_zero):
        begin = max(start, first)
        search_end = end
        while search_end > begin:
            last_space = _LAST_SPACE.match(text, begin, search_end)
            if last_space is None:
                break
            space = last_space.end() - 1
            if accept is None or accept(space):
                return space
            search_end = space
    return -1


def _next_start(text: str, cut: int, *, keep_indent: bool) -> int:
    """Where the next chunk starts after a break at ``cut``: past the whitespace there.

    With ``keep_indent`` (markdown), a run of whitespace that holds a newline is skipped only
    up to that newline, so the next line keeps its indentation.
    """
    match = _NON_SPACE.search(text, cut)
    start = len(text) if match is None else match.start()
    if keep_indent:
        newline = text.rfind("\n", cut, start)
        if newline >= 0:
            return newline + 1
    return start


# --- markdown length chunking -------------------------------------------------------------


class _Fences:
    """The fence spans of one text, with lookups by position in O(log spans)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.spans = parse_fence_spans(text)
        self._starts = [span.start for span in self.spans]
        self._last_text: dict[int, int] = {}

    def at(self, index: int) -> FenceSpan | None:
        """Same rule as ``fences.fence_at``, by bisection instead of a scan from the start."""
        before = bisect_left(self._starts, index) - 1
        if before < 0:
            return None
        span = self.spans[before]
        if index < span.end or (not span.closed and index == span.end):
            return span
        return None

    def starting_at(self, index: int) -> FenceSpan | None:
        found = bisect_left(self._starts, index)
        if found < len(self.spans) and self._starts[found] == index:
            return self.spans[found]
        return None

    def content_end(self, span: FenceSpan) -> int:
        """Where a fence's content ends: its closing line's start, or the text's end."""
        if not span.closed:
            return len(self.text)
        return self.text.rfind("\n", span.start, span.end) + 1

    def last_text(self, span: FenceSpan) -> int:
        """The offset of the last non-whitespace character before the fence's content end."""
        found = self._last_text.get(span.start)
        if found is None:
            found = self.content_end(span)
            while found > span.start and self.text[found - 1].isspace():
                found -= 1
            found -= 1
            self._last_text[span.start] = found
        return found

    def safe_ranges(self, lo: int, hi: int) -> Iterator[tuple[int, int]]:
        """The ranges of ``[lo, hi)`` where a break falls outside every fence."""
        cursor = lo
        first = max(0, bisect_left(self._starts, lo) - 1)
        last = bisect_left(self._starts, hi)
        for index in range(first, last):
            span = self.spans[index]
            if span.start + 1 > cursor:
                yield cursor, span.start + 1
            # A closed span's end (its closing line's newline) is outside it; an open one's isn't.
            cursor = max(cursor, span.end if span.closed else span.end + 1)
            if cursor >= hi:
                return
        if cursor < hi:
            yield cursor, hi


def _open_line_fits(span: FenceSpan, limit: int) -> bool:
    """Whether the opening line, one character and the closing line fit in one chunk."""
    return len(span.open_line) + len(span.close_line) + 3 <= limit


def _reopen_line(span: FenceSpan, limit: int) -> str:
    """The line that reopens a split fence: the opening line, unless it would take so much of
    each chunk that little code fits (then the bare marker, which keeps the fence's meaning)."""
    if len(span.open_line) <= limit // 2 and _open_line_fits(span, limit):
        return span.open_line
    return span.close_line


def _can_split(text: str, span: FenceSpan, limit: int) -> bool:
    """Whether the fence can be cut into balanced chunks at all.

    A chunk must hold the bare marker, one character and the closing line; an opening line
    too long to share a chunk with the closing line must leave its text movable into the
    content (see ``_bare_content_start``). Otherwise the fence is cut like plain text.
    """
    if 2 * len(span.close_line) + 3 > limit:
        return False
    return _open_line_fits(span, limit) or _bare_content_start(text, span) >= 0


def _bare_content_start(text: str, span: FenceSpan) -> int:
    """Where the content starts when ``span`` is opened with its bare marker instead.

    The opening line's info text becomes the first content line, so no text is lost; blank
    info is dropped. -1 when the info text would read as the closing line there.
    """
    after_marker = span.start + len(span.close_line)
    info = _NON_SPACE.search(text, after_marker, span.start + len(span.open_line))
    if info is None:
        return min(len(text), span.start + len(span.open_line) + 1)
    if _reads_as_fence_line(text, info.start(), closing=span):
        return -1
    return info.start()


def _trim_blank_edges(text: str) -> str:
    """Drop leading blank lines (keeping the first line's indent) and trailing whitespace."""
    match = _NON_SPACE.search(text)
    if match is None:
        return ""
    return text[text.rfind("\n", 0, match.start()) + 1 :].rstrip()


def _reads_as_fence_line(text: str, start: int, closing: FenceSpan | None = None) -> bool:
    """Whether a chunk starting at ``start`` mid-line would begin with a fence line.

    With ``closing``, only a line that would close that fence counts.
    """
    if not 0 < start < len(text) or text[start - 1] == "\n":
        return False
    match = FENCE_LINE.match(text, start)
    if match is None:
        return False
    marker = match.group(2)
    return closing is None or (
        marker[0] == closing.marker[0] and len(marker) >= len(closing.marker)
    )


def _before_fence_like_run(text: str, start: int, lo: int, *, spaces_kept: bool) -> int:
    """The latest cut that keeps the fence-like run at ``start`` off the next chunk's first line.

    ``lo`` or less means there is none. Outside a fence the next chunk's leading spaces are
    trimmed, so the cut goes before all of them; inside one (``spaces_kept``) they stay, and
    four spaces ahead of the run already stop it from being a fence line.
    """
    match = FENCE_LINE.match(text, start)
    assert match is not None, "called only where a fence-like run starts"
    run_char = match.group(2)[0]
    at = start + len(match.group(1))
    while at > lo and text[at - 1] == run_char:
        at -= 1
    if not spaces_kept:
        while at > lo and text[at - 1] in " \t":
            at -= 1
        return at - 1
    spaces = 0
    while spaces < 4 and at - spaces > lo and text[at - spaces - 1] == " ":
        spaces += 1
    return at - 4 if spaces == 4 else at - spaces - 1


def _chunk_markdown(text: str, limit: int) -> list[str]:
    """The Markdown split, with the guarantees in the module docstring."""
    text = _trim_blank_edges(text)
    fences = _Fences(text)
    length = len(text)
    chunks: list[str] = []

    def whitespace_break_ok(space: int) -> bool:
        return not _reads_as_fence_line(text, _next_start(text, space, keep_indent=True))

    # A fence left open at the end is closed in the last chunk.
    open_at_end = fences.at(length)
    closing_at_end = ""
    if open_at_end is not None and _can_split(text, open_at_end, limit):
        closing_at_end = "\n" + open_at_end.close_line

    pos = 0
    # The fence this chunk continues, and the line that reopens it.
    reopened: FenceSpan | None = None
    reopen_line = ""
    while pos < length:
        if reopened is None:
            starting = fences.starting_at(pos)
            if (
                starting
                and not _open_line_fits(starting, limit)
                and _can_split(text, starting, limit)
            ):
                # The opening line cannot share a chunk with the closing line: open every chunk
                # of this fence with the bare marker instead.
                reopened, reopen_line = starting, starting.close_line
                pos = _bare_content_start(text, starting)
                continue
        head = reopen_line + "\n" if reopened else ""
        budget = limit - len(head)
        if length - pos + len(closing_at_end) <= budget:
            chunks.append(head + text[pos:] + closing_at_end)
            break

        window_end = min(length, pos + budget)
        cut = _find_break(
            text, pos, window_end, fences.safe_ranges(pos, window_end), whitespace_break_ok
        )
        if cut > pos:
            _append_nonblank(chunks, head + text[pos:cut].rstrip())
            pos = _next_start(text, cut, keep_indent=True)
            reopened = None
            continue

        span = fences.at(window_end)
        if span is None or not _can_split(text, span, limit):
            cut = window_end
            if span is None:
                start = _next_start(text, cut, keep_indent=True)
                if _reads_as_fence_line(text, start):
                    earlier = _before_fence_like_run(text, start, pos, spaces_kept=False)
                    if earlier > pos:
                        cut = earlier
            _append_nonblank(chunks, head + text[pos:cut].rstrip())
            pos = _next_start(text, cut, keep_indent=True)
            reopened = None
            continue

        # The cut falls inside ``span``: close it in this chunk and reopen it in the next.
        close_line = span.close_line
        content_start = pos if span is reopened else span.start + len(span.open_line) + 1
        content_end = fences.content_end(span)
        if span.closed and len(head) + content_end - pos + len(close_line) <= limit:
            # Only a closing line longer than its marker overflows: close with the bare marker.
            # Text after the closing line's marker run is kept, on that line when it fits.
            chunks.extend(
                _close_with_marker(text, span, head + text[pos:content_end], content_end, limit)
            )
            pos = _next_start(text, span.end, keep_indent=True)
            reopened = None
            continue
        # The latest cut that leaves room for "\n" + the closing line.
        last_cut = pos + budget - len(close_line) - 1
        # A reopened fence, or one starting at ``pos``, always has room for some content
        # (``_can_split``, ``_open_line_fits``); one starting after ``pos`` (the newline before
        # it sat inside parentheses) may not.
        cut, clean = -1, False
        if content_start + 1 <= last_cut:
            cut, clean = _cut_inside_fence(fences, span, content_start, last_cut)
        if not clean:
            if span.start > pos:
                # End this chunk before the fence instead.
                _append_nonblank(chunks, head + text[pos : span.start - 1].rstrip())
                pos = span.start
                reopened = None
                continue
            if (reopen_line if span is reopened else span.open_line) != close_line:
                # Retry with the bare marker as the opening line: it leaves more room.
                bare_start = pos if span is reopened else _bare_content_start(text, span)
                if bare_start >= 0:
                    reopened, reopen_line, pos = span, close_line, bare_start
                    continue
        ending = close_line if text[cut - 1] == "\n" else "\n" + close_line
        chunks.append(head + text[pos:cut] + ending)
        reopened = span
        reopen_line = _reopen_line(span, limit)
        pos = cut
    return chunks


def _close_with_marker(
    text: str, span: FenceSpan, body: str, close_start: int, limit: int
) -> list[str]:
    """``body`` closed by the bare marker, then the closing line's own text after its run.

    That text stays on the closing line when it fits; otherwise it follows as a text of its own
    (where a leading fence-like run would open a fence, which that chunking then closes).
    """
    run = FENCE_LINE.match(text, close_start)
    assert run is not None, "a closed fence ends with a fence line"
    trailing = text[run.end() : span.end].rstrip()
    chunk = body + span.close_line
    if len(chunk) + len(trailing) <= limit:
        return [chunk + trailing]
    return [chunk, *_chunk_markdown(trailing.lstrip(), limit)]


def _cut_inside_fence(
    fences: _Fences, span: FenceSpan, content_start: int, last_cut: int
) -> tuple[int, bool]:
    """Where to cut a fence's content so both sides keep some of it, and whether it is clean.

    ``content_start < cut < content_end`` always holds (the caller makes sure the rest of the
    content does not fit); when the content allows, both sides also get a non-whitespace
    character. A line end up to ``last_cut + 1`` is preferred; otherwise the cut is as late as
    ``last_cut`` allows. The cut is not clean when every cut in reach would start the next
    chunk with a line that closes the fence (a long run of its marker character mid-line).
    """
    text = fences.text
    last_text = fences.last_text(span)
    # Only whether the first text comes before the cut matters: search the window alone.
    found = _NON_SPACE.search(text, content_start, last_cut + 1)
    first_text = last_cut + 1 if found is None else found.start()
    newline = text.rfind("\n", content_start, min(last_cut + 1, last_text))
    if newline > first_text:
        return newline + 1, True
    cut = last_cut
    if last_text > first_text:
        cut = min(cut, last_text)
    if not _reads_as_fence_line(text, cut, closing=span):
        return cut, True
    earlier = _before_fence_like_run(text, cut, content_start, spaces_kept=True)
    if earlier > content_start:
        return earlier, True
    return cut, False


# --- paragraph (newline mode) chunking ----------------------------------------------------


def _chunk_paragraphs(text: str, limit: int, *, markdown: bool) -> list[str]:
    """One chunk per paragraph (split at blank lines outside fences); long ones by length."""
    fences = _Fences(text)
    chunks: list[str] = []
    start = 0
    for match in _PARAGRAPH_BREAK.finditer(text):
        if fences.at(match.start()) is None:
            chunks.extend(_chunk_paragraph(text[start : match.start()], limit, markdown))
            start = match.end()
    chunks.extend(_chunk_paragraph(text[start:], limit, markdown))
    return chunks


def _chunk_paragraph(paragraph: str, limit: int, markdown: bool) -> list[str]:
    paragraph = _trim_blank_edges(paragraph)
    if not paragraph:
        return []
    if len(paragraph) <= limit and (not markdown or fences_balanced(paragraph)):
        return [paragraph]
    return _chunk_markdown(paragraph, limit) if markdown else _chunk_plain(paragraph, limit)
