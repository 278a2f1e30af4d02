"""MEDIA lines and the ``[[audio_as_voice]]`` tag in assistant output.

A reply attaches media by putting ``MEDIA: <url or path>`` on a line of its own. ``split_media``
takes those lines out of the text and returns the media URLs separately. It also finds the
``[[audio_as_voice]]`` tag, which asks for an audio attachment to be sent as a voice note.

Fenced code is never mined for media: a ``MEDIA:`` line inside a fence is part of the code.
Fenced lines are also left alone when whitespace is tidied, so that indentation and blank lines
inside code blocks survive.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from botd.text.fences import parse_fence_spans

AUDIO_TAG_PATTERN = re.compile(r"\[\[\s*audio_as_voice\s*\]\]", re.IGNORECASE)
"""``[[audio_as_voice]]``, any case, whitespace allowed inside the brackets."""

MEDIA_PREFIX = "MEDIA:"
MAX_MEDIA_CHARS = 4096

# "MEDIA:", optional whitespace, an optional opening backtick, then the payload: the rest of the
# line. The payload runs to the end of the line, so a line holds at most one token.
_MEDIA_TOKEN = re.compile(r"MEDIA:\s*`?([^\n]+)")
_HTTP_URL = re.compile(r"https?://", re.IGNORECASE)
_LOCAL_PATH_PREFIXES = ("/", "./", "../", "~")
_QUOTES = "\"'`"
_LEADING_JUNK = re.compile(r"^[`\"'\[{(]+")
_TRAILING_JUNK = re.compile(r"[`\"'\\})\],]+$")
_SPACE_TAB_RUN = re.compile(r"[ \t]+")
_SPACE_TAB_RUN_2 = re.compile(r"[ \t]{2,}")


@dataclass(frozen=True)
class MediaSplit:
    """Text with its MEDIA lines taken out, and what they pointed at."""

    text: str
    media_urls: list[str]
    audio_as_voice: bool


@dataclass(frozen=True)
class AudioTag:
    """Result of ``parse_audio_tag``."""

    text: str
    audio_as_voice: bool
    had_tag: bool


# --- whitespace tidying that leaves fenced code alone -------------------------------------------


def _lines_with_code_flags(text: str) -> list[tuple[str, bool]]:
    """Split ``text`` into lines, each flagged True when it lies inside fenced code.

    Fence opening and closing lines count as code too.
    """
    spans = parse_fence_spans(text)
    lines: list[tuple[str, bool]] = []
    span_index = 0
    offset = 0
    for line in text.split("\n"):
        while span_index < len(spans) and spans[span_index].end <= offset:
            span_index += 1
        in_code = span_index < len(spans) and (
            spans[span_index].start <= offset < spans[span_index].end
        )
        lines.append((line, in_code))
        offset += len(line) + 1
    return lines


def _tidy_prose_lines(text: str, tidy: Callable[[str], str]) -> str:
    """Apply ``tidy`` to every line outside fenced code, drop prose lines left empty, trim.

    Dropping empty prose lines makes a run of newlines one newline.
    """
    if "```" not in text and "~~~" not in text:
        kept = [tidied for line in text.split("\n") if (tidied := tidy(line))]
        return "\n".join(kept).strip()
    kept = []
    for line, in_code in _lines_with_code_flags(text):
        if in_code:
            kept.append(line)
        elif tidied := tidy(line):
            kept.append(tidied)
    return "\n".join(kept).strip()


def normalize_directive_whitespace(text: str) -> str:
    """Whitespace rule applied after directive tags are removed.

    Runs of spaces and tabs become one space, spaces and tabs around newlines go, and the text
    is trimmed. Lines inside fenced code are kept as they are.
    """

    def tidy(line: str) -> str:
        return _SPACE_TAB_RUN.sub(" ", line).strip(" \t")

    if "```" not in text and "~~~" not in text:
        return "\n".join(tidy(line) for line in text.split("\n")).strip()
    lines = [line if in_code else tidy(line) for line, in_code in _lines_with_code_flags(text)]
    return "\n".join(lines).strip()


def _tidy_after_media(text: str) -> str:
    """Cleanup once a MEDIA token was taken out: trailing spaces go, space runs collapse, blank
    lines go, and the text is trimmed."""
    return _tidy_prose_lines(text, lambda line: _SPACE_TAB_RUN_2.sub(" ", line.rstrip(" \t")))


# --- audio tag ------------------------------------------------------------------------------------


def parse_audio_tag(text: str | None) -> AudioTag:
    """Find and remove ``[[audio_as_voice]]``.

    Each tag becomes a space and the directive whitespace rule is applied (also when there is
    no tag, so a text reads the same whether or not it had one). ``None`` or ``""`` gives
    empty text.
    """
    if not text:
        return AudioTag(text="", audio_as_voice=False, had_tag=False)
    stripped, count = AUDIO_TAG_PATTERN.subn(" ", text)
    return AudioTag(
        text=normalize_directive_whitespace(stripped),
        audio_as_voice=count > 0,
        had_tag=count > 0,
    )


# --- MEDIA tokens ---------------------------------------------------------------------------------


def _clean_candidate(raw: str) -> str:
    """Drop quote and bracket characters around a candidate, and a leading ``file://``."""
    cleaned = _TRAILING_JUNK.sub("", _LEADING_JUNK.sub("", raw))
    return cleaned.removeprefix("file://")


def _is_valid_media(candidate: str, *, allow_spaces: bool = False) -> bool:
    if not candidate or len(candidate) > MAX_MEDIA_CHARS:
        return False
    if not allow_spaces and any(ch.isspace() for ch in candidate):
        return False
    return bool(_HTTP_URL.match(candidate)) or candidate.startswith(_LOCAL_PATH_PREFIXES)


def _unwrap_quoted(payload: str) -> str | None:
    """The inside of a payload wrapped in matching quotes or backticks, else None."""
    trimmed = payload.strip()
    if len(trimmed) < 2 or trimmed[0] != trimmed[-1] or trimmed[0] not in _QUOTES:
        return None
    # An empty inside counts as not wrapped: there is nothing to take.
    return trimmed[1:-1].strip() or None


def _parse_payload(payload: str) -> tuple[list[str], list[str]]:
    """Media found in one MEDIA token's payload, and the parts of it that were not media."""
    unwrapped = _unwrap_quoted(payload)
    if unwrapped is not None:
        candidate = _clean_candidate(unwrapped)
        if _is_valid_media(candidate, allow_spaces=True):
            return [candidate], []
        return [], [unwrapped]

    parts = payload.split()
    media: list[str] = []
    invalid: list[str] = []
    for part in parts:
        candidate = _clean_candidate(part)
        if _is_valid_media(candidate):
            media.append(candidate)
        else:
            invalid.append(part)

    # The whole payload as one path, spaces included: botd trims it first, since the payload
    # runs to the end of the line and may carry the line's trailing spaces.
    whole = _clean_candidate(payload.strip())
    has_space = any(ch.isspace() for ch in payload.strip())
    looks_local = payload.strip().startswith((*_LOCAL_PATH_PREFIXES, "file://"))
    # "MEDIA:/Users/pete/My File.png": one valid part, the rest of the path split off by spaces.
    if (
        len(media) == 1
        and invalid
        and has_space
        and looks_local
        and _is_valid_media(whole, allow_spaces=True)
    ):
        return [whole], []
    if not media and _is_valid_media(whole, allow_spaces=True):
        return [whole], []
    return media, invalid


def _split_media_line(line: str) -> tuple[str, list[str]] | None:
    """Take the MEDIA token out of a line that starts with ``MEDIA:``.

    Returns the line's remaining text (cleaned, possibly empty) and the media found, or None
    when the line is not a MEDIA line. A MEDIA line without valid media keeps its token text.
    """
    indent = len(line) - len(line.lstrip())
    if not line.startswith(MEDIA_PREFIX, indent):
        return None
    match = _MEDIA_TOKEN.match(line, indent)
    if match is None:
        return None
    media, invalid = _parse_payload(match.group(1))
    remainder = line[:indent] + (" ".join(invalid) if media else match.group(0))
    return _SPACE_TAB_RUN_2.sub(" ", remainder).strip(), media


def split_media(text: str) -> MediaSplit:
    """Take ``MEDIA:`` lines and the ``[[audio_as_voice]]`` tag out of ``text``.

    Only the end of the input is trimmed (leading whitespace matters in Markdown). The text is
    tidied only when media or the audio tag was found; otherwise it comes back as it was.
    """
    trimmed = text.rstrip()
    if not trimmed.strip():
        return MediaSplit(text="", media_urls=[], audio_as_voice=False)
    if MEDIA_PREFIX not in trimmed and "[[" not in trimmed:
        return MediaSplit(text=trimmed, media_urls=[], audio_as_voice=False)

    media: list[str] = []
    body = trimmed
    if MEDIA_PREFIX in trimmed:
        kept: list[str] = []
        for line, in_code in _lines_with_code_flags(trimmed):
            found = None if in_code else _split_media_line(line)
            if found is None:
                kept.append(line)
                continue
            remainder, line_media = found
            media.extend(line_media)
            if remainder:
                kept.append(remainder)
        body = "\n".join(kept)
    if not media and "[[" not in trimmed:
        return MediaSplit(text=trimmed, media_urls=[], audio_as_voice=False)

    cleaned = _tidy_after_media(body)
    audio = parse_audio_tag(cleaned)
    if audio.had_tag:
        cleaned = _tidy_prose_lines(audio.text, lambda line: line)
    elif not media:
        # Neither media nor the audio tag: the text comes back untouched.
        return MediaSplit(text=trimmed, media_urls=[], audio_as_voice=False)
    return MediaSplit(text=cleaned, media_urls=media, audio_as_voice=audio.audio_as_voice)
