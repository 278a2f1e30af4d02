"""Stripping reasoning and ``<final>`` tags from streamed assistant text.

Models may wrap their reasoning in ``<think>``, ``<thinking>``, ``<thought>`` or
``<antthinking>`` and their answer in ``<final>``. Those tags (and the reasoning inside them)
must never reach a chat, but the same words inside inline code or a fenced block are content
and stay. ``TagStripper`` scans text left to right, once, carrying its state (inside
reasoning, inside ``<final>``, an open inline-code span, an open fence, the start of a line)
from one piece to the next, so a stream can be stripped delta by delta in linear time.

``StreamingTagStripper`` adds the hold-back a live stream needs: a tail that might still turn
into a tag (``<thi``), a longer backtick run, or a fence line is kept until the next delta
decides it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..text.fences import undecided_line_start

_THINKING_TAG = re.compile(r"<\s*(/?)\s*(?:think(?:ing)?|thought|antthinking)\s*>", re.IGNORECASE)
_FINAL_TAG = re.compile(r"<\s*(/?)\s*final\s*>", re.IGNORECASE)
_FENCE_OPENER = re.compile(r" {0,3}(`{3,}|~{3,})")
# Where, outside a fence, something other than plain text may start.
_SPECIAL = re.compile(r"[\n`<]")
_TAG_NAMES = ("think", "thinking", "thought", "antthinking", "final")
_PARTIAL_TAG = re.compile(r"<\s*(?:/\s*)?([A-Za-z]*)\s*")


@dataclass(slots=True)
class StripState:
    """What carries over from one piece of text to the next."""

    thinking: bool = False
    in_final: bool = False
    inline_ticks: int = 0
    """Length of the backtick run that opened the current inline-code span (0: none)."""
    fence: str = ""
    """The marker of the open fence (``"```"``), empty when none is open."""
    line_start: bool = True


@dataclass(slots=True)
class TagStripper:
    """Removes reasoning (and, as configured, ``<final>``) tags from text fed in pieces.

    With ``enforce_final`` only text inside ``<final>...</final>`` is kept, so a model that
    "thinks out loud" without tags leaks nothing. ``thinking_text`` collects what was inside
    reasoning tags, for the reasoning stream.
    """

    enforce_final: bool = False
    collect_thinking: bool = False
    state: StripState = field(default_factory=StripState)
    _closed_thinking: list[str] = field(default_factory=list)
    _open_thinking: list[str] = field(default_factory=list)

    def reset(self) -> None:
        self.state = StripState()
        self._closed_thinking.clear()
        self._open_thinking.clear()

    def feed(self, text: str) -> str:
        """The visible part of ``text``, treating it as the continuation of what came before."""
        out: list[str] = []
        state = self.state
        pos = 0
        end = len(text)
        while pos < end:
            if state.line_start:
                state.line_start = False
                opener = _FENCE_OPENER.match(text, pos)
                if opener is not None:
                    marker = opener.group(1)
                    if not state.fence:
                        state.fence = marker
                    elif marker[0] == state.fence[0] and len(marker) >= len(state.fence):
                        state.fence = ""
                    # A fence line is content: emit it whole, tags in it are literal.
                    pos = self._take_line(text, pos, out)
                    continue
            if state.fence:
                pos = self._take_line(text, pos, out)
                continue
            match = _SPECIAL.search(text, pos)
            stop = end if match is None else match.start()
            if stop > pos:
                self._keep(text[pos:stop], out)
            if match is None:
                break
            char = text[stop]
            if char == "\n":
                self._keep("\n", out)
                state.line_start = True
                pos = stop + 1
            elif char == "`":
                run_end = stop + 1
                while run_end < end and text[run_end] == "`":
                    run_end += 1
                run = run_end - stop
                if state.inline_ticks == 0:
                    state.inline_ticks = run
                elif run == state.inline_ticks:
                    state.inline_ticks = 0
                self._keep(text[stop:run_end], out)
                pos = run_end
            else:
                pos = self._take_angle(text, stop, out)
        return "".join(out)

    def thinking_so_far(self) -> str:
        """Reasoning seen so far: the closed blocks, else the still-open one (stream form)."""
        closed = "".join(self._closed_thinking).strip()
        if closed:
            return closed
        if self.state.thinking:
            return "".join(self._open_thinking).strip()
        return ""

    # -- helpers ---------------------------------------------------------------------------

    def _visible(self) -> bool:
        state = self.state
        return not state.thinking and (state.in_final or not self.enforce_final)

    def _keep(self, piece: str, out: list[str]) -> None:
        if self.state.thinking:
            if self.collect_thinking:
                self._open_thinking.append(piece)
        elif self._visible():
            out.append(piece)

    def _take_line(self, text: str, pos: int, out: list[str]) -> int:
        newline = text.find("\n", pos)
        stop = len(text) if newline == -1 else newline + 1
        self._keep(text[pos:stop], out)
        if newline != -1:
            self.state.line_start = True
        return stop

    def _take_angle(self, text: str, pos: int, out: list[str]) -> int:
        state = self.state
        if state.inline_ticks:
            self._keep("<", out)
            return pos + 1
        thinking = _THINKING_TAG.match(text, pos)
        if thinking is not None:
            closing = thinking.group(1) == "/"
            if state.thinking and closing and self.collect_thinking:
                self._closed_thinking.append("".join(self._open_thinking))
                self._open_thinking.clear()
            elif not state.thinking and not closing:
                self._open_thinking.clear()
            state.thinking = not closing
            return thinking.end()
        if not state.thinking:
            final = _FINAL_TAG.match(text, pos)
            if final is not None:
                state.in_final = final.group(1) != "/"
                return final.end()
        self._keep("<", out)
        return pos + 1


def strip_tags(text: str, *, enforce_final: bool = False) -> str:
    """``text`` with reasoning blocks and final tags removed, from a fresh state."""
    return TagStripper(enforce_final=enforce_final).feed(text)


def _undecided_tail_start(text: str, at_line_start: bool) -> int:
    """Where the tail of ``text`` that the next delta might still change begins."""
    cut = undecided_line_start(text, at_line_start=at_line_start)
    if text.endswith("`"):
        run = len(text) - len(text.rstrip("`"))
        cut = min(cut, len(text) - run)
    angle = text.rfind("<")
    if angle >= 0 and angle < cut and ">" not in text[angle:]:
        partial = _PARTIAL_TAG.fullmatch(text, angle)
        if partial is not None:
            name = partial.group(1).lower()
            if any(tag.startswith(name) for tag in _TAG_NAMES):
                cut = angle
    return cut


@dataclass(slots=True)
class StreamingTagStripper:
    """A ``TagStripper`` for a live stream: feed deltas, get the newly visible text."""

    stripper: TagStripper
    _held: str = ""

    def feed(self, delta: str) -> str:
        text = self._held + delta if self._held else delta
        cut = _undecided_tail_start(text, self.stripper.state.line_start)
        self._held = text[cut:]
        return self.stripper.feed(text[:cut]) if cut else ""

    def flush(self) -> str:
        """Whatever was held back, taken as final (the stream ended)."""
        held, self._held = self._held, ""
        return self.stripper.feed(held) if held else ""

    def reset(self) -> None:
        self._held = ""
        self.stripper.reset()
