"""Partial replies: the visible answer so far, updated as deltas arrive, in linear time.

Recomputing the whole cleaned text (tags stripped, directives parsed) on every delta would
make a long reply quadratic. Instead the tag stripper runs once over each delta,
the visible text only grows, and a partial reply carries just its ``delta`` plus a way to
build the full text on demand. Text that carries reply directives or ``MEDIA:`` lines needs
the whole-text parse (a directive can rewrite what came before it), so that path is taken
only when such markers appear, and for long texts is re-run only after the text has grown by
an eighth, which keeps the total work linear.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .directives import SILENT_TOKEN, parse_reply_directives
from .payloads import PartialReply
from .tags import StreamingTagStripper

# Below this length the directive path is recomputed on every delta.
_ALWAYS_RECOMPUTE_BELOW = 4096
_PIECES_PER_RUN = 256
_DIRECTIVE_MARKERS = ("[[", "MEDIA:")
_MARKER_OVERLAP = max(len(m) for m in _DIRECTIVE_MARKERS) - 1
_SILENT_ONLY = re.compile(rf"(?:{re.escape(SILENT_TOKEN)}\s*)+")


def _without_open_directive(text: str) -> str:
    """``text`` minus a trailing ``[[`` that has not closed yet (or a lone trailing ``[``).

    Shown as it streams, ``[[reply_`` would later vanish into a directive, and a preview
    must never have to take back what it showed.
    """
    opening = text.rfind("[[")
    if opening >= 0 and "]]" not in text[opening:]:
        return text[:opening].rstrip()
    return text[:-1].rstrip() if text.endswith("[") else text


def _may_become_silent(text: str) -> bool:
    """True for ``NO_RE`` or ``NO_REPLY NO_REPLY``: showing it could flash a silent reply."""
    return SILENT_TOKEN.startswith(text) or _SILENT_ONLY.fullmatch(text) is not None


class PartialStream:
    """Turns the text deltas of one assistant message into partial replies."""

    def __init__(self, stripper: StreamingTagStripper) -> None:
        self._stripper = stripper
        self.reset()

    def reset(self) -> None:
        self._stripper.reset()
        # The visible text: small recent pieces, folded into larger runs as they pile up,
        # so both the recent tail and the whole text are cheap to build.
        self._runs: list[str] = []
        self._pieces: list[str] = []
        self._length = 0
        self._start = -1  # first non-whitespace character of the visible text
        self._end = 0  # just past the last non-whitespace character
        self._tail = ""
        self._has_directives = False
        self._emitted_end = -1  # plain path: end of the text last emitted
        self._last_text = ""  # directive path: the cleaned text last emitted
        self._last_raw_end = -1
        self._recomputed_at = 0

    def feed(self, chunk: str) -> PartialReply | None:
        return self._advance(self._stripper.feed(chunk))

    def flush(self) -> PartialReply | None:
        """The text block ended: release what was held back in case it became a tag."""
        return self._advance(self._stripper.flush())

    def _advance(self, visible: str) -> PartialReply | None:
        if not visible:
            return None
        self._append(visible)
        if self._start < 0:
            return None
        if self._has_directives:
            return self._directive_partial()
        return self._plain_partial()

    def thinking_so_far(self) -> str:
        """Reasoning seen in the tags so far (collected only when the stripper collects it)."""
        return self._stripper.stripper.thinking_so_far()

    # -- internals ------------------------------------------------------------------------

    def _append(self, visible: str) -> None:
        offset = self._length
        if self._start < 0:
            stripped = len(visible) - len(visible.lstrip())
            if stripped < len(visible):
                self._start = offset + stripped
        content = len(visible.rstrip())
        if content:
            self._end = offset + content
        self._pieces.append(visible)
        self._length += len(visible)
        if len(self._pieces) >= _PIECES_PER_RUN:
            self._runs.append("".join(self._pieces))
            self._pieces = []
        if not self._has_directives:
            probe = self._tail + visible
            if any(marker in probe for marker in _DIRECTIVE_MARKERS):
                self._has_directives = True
                # What was shown so far becomes the base the directive path must extend.
                if self._emitted_end >= 0:
                    self._last_text = self._slice(self._start, self._emitted_end)
            self._tail = probe[-_MARKER_OVERLAP:]

    def _plain_partial(self) -> PartialReply | None:
        end = self._end
        if end == self._emitted_end:
            return None
        if self._emitted_end < 0:
            delta = self._slice(self._start, end)
            if _may_become_silent(delta):
                return None
        else:
            delta = self._slice(self._emitted_end, end)
        self._emitted_end = end
        return PartialReply(delta, [], self._text_snapshot(self._start, end))

    def _directive_partial(self) -> PartialReply | None:
        length = self._length
        if length >= _ALWAYS_RECOMPUTE_BELOW and length - self._recomputed_at < length // 8:
            return None
        self._recomputed_at = length
        if self._end == self._last_raw_end:
            return None
        raw = _without_open_directive(self._slice(self._start, self._end))
        parsed = parse_reply_directives(raw)
        previous = self._last_text
        if not parsed.text.startswith(previous):
            return None  # the text rewound (a line became media): wait for it to grow again
        if not previous and parsed.text and _may_become_silent(parsed.text):
            return None
        self._last_raw_end = self._end
        delta = parsed.text[len(previous) :]
        self._last_text = parsed.text
        if not delta and not parsed.media_urls:
            return None
        text = parsed.text
        return PartialReply(delta, list(parsed.media_urls), lambda: text)

    def _text_snapshot(self, start: int, end: int) -> Callable[[], str]:
        """Builds ``visible[start:end]`` later, whatever this stream does in between.

        Runs are only ever appended to, and a pieces list is never touched again once it
        has been folded into a run, so the first ``n`` items of each stay what they are now.
        """
        runs, run_count = self._runs, len(self._runs)
        pieces, piece_count = self._pieces, len(self._pieces)

        def build() -> str:
            return "".join(runs[:run_count] + pieces[:piece_count])[start:end]

        return build

    def _slice(self, start: int, end: int) -> str:
        """``visible[start:end]``, touching only the pieces that hold it."""
        collected: list[str] = []
        position = self._length
        for group in (self._pieces, self._runs):
            for piece in reversed(group):
                if position <= start:
                    break
                position -= len(piece)
                collected.append(piece)
        collected.reverse()
        return "".join(collected)[start - position : end - position]
