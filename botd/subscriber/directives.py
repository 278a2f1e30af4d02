"""Reply directives in assistant text: reply tags, the voice tags, MEDIA lines, ``NO_REPLY``.

An assistant reply can carry instructions for its delivery inside the text:

* ``[[reply_to_current]]`` or ``[[reply_to: <id>]]`` — send it as a reply to a message;
* ``[[audio_as_voice]]`` — send an audio attachment as a voice note;
* ``[[tts]]`` — speak the reply: delivery sends its text as a voice note too (``media.speech``;
  ``botd.delivery.voice``), and in a reply arriving in pieces every later piece of the same
  message is spoken as well;
* ``MEDIA: <url or path>`` lines — attachments (see ``botd.subscriber.media``);
* the silent token ``NO_REPLY`` — send nothing;
* ``[[buttons: Yes | No || Later]]`` — buttons under the reply's message (``|`` between the
  buttons of a row, ``||`` between rows; see ``botd.buttons.layout``).

``parse_reply_directives`` handles one complete text. ``DirectiveAccumulator`` handles a reply
arriving in pieces: it holds back a tag cut in two and carries reply state from a piece that
was nothing but a tag to the next piece with content.

Silent replies: only a reply that is nothing but the token (possibly repeated) is silent. A
reply that merely ends with it is delivered without it, so a real answer is never lost to a
token the model added out of habit.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from botd.buttons.layout import ButtonRows, take_directives
from botd.subscriber.media import (
    AUDIO_TAG_PATTERN,
    normalize_directive_whitespace,
    split_media,
)

SILENT_TOKEN = "NO_REPLY"

TTS_TAG = re.compile(r"\[\[\s*tts\s*\]\]", re.IGNORECASE)
"""``[[tts]]``, any case, whitespace allowed inside the brackets."""

# The id is everything up to "]" or a newline; trailing spaces are trimmed off it afterwards.
_REPLY_TAG = re.compile(
    r"\[\[\s*(?:reply_to_current|reply_to\s*:\s*([^\]\n]+))\s*\]\]", re.IGNORECASE
)
_SILENT_ONLY = re.compile(rf"\s*{SILENT_TOKEN}(?:\s+{SILENT_TOKEN})*\s*")
# The token (or a run of them) closing a reply: after the start or whitespace, optionally
# wrapped in Markdown emphasis or code marks and followed by closing punctuation.
_TRAILING_SILENT = re.compile(
    rf"(?:^|(?<=\s))[*_~`]*{SILENT_TOKEN}(?:\s+{SILENT_TOKEN})*[*_~`.!]*\s*\Z"
)


def is_silent_reply(text: str) -> bool:
    """True when ``text`` is nothing but ``NO_REPLY`` (repeats and whitespace allowed)."""
    return _SILENT_ONLY.fullmatch(text) is not None


def strip_trailing_silent_token(text: str) -> str:
    """Remove ``NO_REPLY`` from the end of a substantive reply.

    ``"All done. NO_REPLY"`` becomes ``"All done."``. The token must stand as its own word;
    text that does not end with it comes back unchanged.
    """
    if SILENT_TOKEN not in text:
        return text
    match = _TRAILING_SILENT.search(text)
    if match is None:
        return text
    return text[: match.start()].rstrip()


@dataclass(frozen=True)
class InlineDirectives:
    """What ``parse_inline_directives`` found, and the text with the tags handled."""

    text: str
    audio_as_voice: bool
    reply_to_id: str | None
    """The last explicit id, else the current message's id if ``reply_to_current`` was seen."""
    reply_to_explicit_id: str | None
    reply_to_current: bool
    has_audio_tag: bool
    has_reply_tag: bool


def parse_inline_directives(
    text: str | None,
    *,
    current_message_id: str | None = None,
    strip_reply_tags: bool = True,
    strip_audio_tag: bool = False,
) -> InlineDirectives:
    """Find ``[[reply_to...]]`` and ``[[audio_as_voice]]`` tags.

    A stripped tag becomes a space; then the directive whitespace rule applies (runs of spaces
    and tabs collapse, whitespace around newlines goes, the text is trimmed; fenced code lines
    are kept as they are). Tags left in place are still reported.
    """
    if not text:
        return InlineDirectives("", False, None, None, False, False, False)
    if "[[" not in text:
        return InlineDirectives(
            normalize_directive_whitespace(text), False, None, None, False, False, False
        )

    audio_count = 0
    if strip_audio_tag:
        text, audio_count = AUDIO_TAG_PATTERN.subn(" ", text)
    else:
        audio_count = len(AUDIO_TAG_PATTERN.findall(text))

    saw_current = False
    has_reply_tag = False
    last_explicit_id: str | None = None
    for match in _REPLY_TAG.finditer(text):
        has_reply_tag = True
        raw_id = match.group(1)
        if raw_id is None:
            saw_current = True
        elif raw_id.strip():
            last_explicit_id = raw_id.strip()
    if strip_reply_tags and has_reply_tag:
        text = _REPLY_TAG.sub(" ", text)

    reply_to_id = last_explicit_id
    if reply_to_id is None and saw_current and current_message_id is not None:
        reply_to_id = current_message_id.strip() or None
    return InlineDirectives(
        text=normalize_directive_whitespace(text),
        audio_as_voice=audio_count > 0,
        reply_to_id=reply_to_id,
        reply_to_explicit_id=last_explicit_id,
        reply_to_current=saw_current,
        has_audio_tag=audio_count > 0,
        has_reply_tag=has_reply_tag,
    )


@dataclass(frozen=True)
class ReplyDirectives:
    """A reply's text with its directives taken out, and what they asked for."""

    text: str
    media_urls: list[str]
    reply_to_id: str | None
    reply_to_current: bool
    reply_to_tag: bool
    """True when a reply tag (``reply_to_current`` or ``reply_to: id``) was seen."""
    audio_as_voice: bool
    is_silent: bool
    buttons: ButtonRows = ()
    """The ``[[buttons: ...]]`` directives' buttons."""
    tts: bool = False
    """``[[tts]]`` was seen: the reply is to be spoken."""

    @property
    def renderable(self) -> bool:
        """True when there is something to send: text, media, buttons or a voice-note
        request."""
        return bool(self.text or self.media_urls or self.audio_as_voice or self.buttons)


def parse_reply_directives(text: str, *, current_message_id: str | None = None) -> ReplyDirectives:
    """Split a complete reply into its text and directives.

    MEDIA lines and the audio tag are taken out first, then ``[[tts]]``, buttons and reply
    tags. Whitespace is only normalised when one of those tags was found. A reply that is
    only ``NO_REPLY`` is silent (empty text); a trailing ``NO_REPLY`` after real content is
    removed and the reply is delivered.
    """
    media = split_media(text)
    unspoken, tts = TTS_TAG.subn(" ", media.text) if "[[" in media.text else (media.text, 0)
    without_buttons, buttons = take_directives(unspoken)
    inline = parse_inline_directives(
        without_buttons, current_message_id=current_message_id, strip_reply_tags=True
    )
    found = without_buttons is not unspoken or tts > 0  # a buttons or tts tag was taken out
    body = inline.text if inline.has_reply_tag or found else media.text

    is_silent = is_silent_reply(body)
    if is_silent:
        body = ""
    else:
        stripped = strip_trailing_silent_token(body)
        # Nothing left once the token is gone ("**NO_REPLY**", "NO_REPLY."): that was a
        # token-only reply too, only decorated.
        is_silent = stripped != body and not stripped
        body = stripped

    return ReplyDirectives(
        text=body,
        media_urls=media.media_urls,
        reply_to_id=inline.reply_to_id,
        reply_to_current=inline.reply_to_current,
        reply_to_tag=inline.has_reply_tag,
        audio_as_voice=media.audio_as_voice,
        is_silent=is_silent,
        buttons=buttons,
        tts=tts > 0,
    )


class DirectiveAccumulator:
    """Parses a reply that arrives in pieces.

    ``consume`` returns the directives of each piece, or None when there is nothing to deliver
    yet. Two things carry over between pieces:

    * a tail from the last ``[[`` that has no ``]]`` after it (a tag cut in two), held back until
      the next piece unless ``final`` is set, in which case it is delivered as literal text;
    * the reply state of a piece that was only tags, attached to the next piece with content;
    * ``[[tts]]``: once seen, every later piece of the message is spoken too (until ``reset``).

    The held tail always starts with ``[[`` and holds no ``]]`` after its first two characters,
    so each call only scans the new text: the tail is joined once, when it is released.
    """

    def __init__(self, current_message_id: str | None = None) -> None:
        """``current_message_id``: what ``[[reply_to_current]]`` replies to (None: nothing)."""
        self._current = (current_message_id or "").strip() or None
        self._tail_parts: list[str] = []
        self._pending_explicit_id: str | None = None
        self._pending_saw_current = False
        self._pending_has_tag = False
        self._tts = False

    def reset(self) -> None:
        """Forget the held tail and the pending reply state (at the start of a message)."""
        self._tail_parts = []
        self._pending_explicit_id = None
        self._pending_saw_current = False
        self._pending_has_tag = False
        self._tts = False

    def consume(self, text: str, *, final: bool = False) -> ReplyDirectives | None:
        """Take the next piece of the reply; return its directives, or None if nothing to send."""
        ready = self._take_ready_text(text, final=final)
        if not ready:
            return None

        parsed = parse_reply_directives(ready)
        # Without a current message id, parse_reply_directives' reply_to_id is the explicit id.
        explicit_id = parsed.reply_to_id or self._pending_explicit_id
        saw_current = parsed.reply_to_current or self._pending_saw_current
        has_tag = parsed.reply_to_tag or self._pending_has_tag
        reply_to_id = explicit_id if explicit_id is not None or not saw_current else self._current
        self._tts = self._tts or parsed.tts
        merged = dataclasses.replace(
            parsed,
            reply_to_id=reply_to_id,
            reply_to_current=saw_current,
            reply_to_tag=has_tag,
            tts=self._tts,
        )
        if not merged.renderable:
            if has_tag:
                self._pending_explicit_id = explicit_id
                self._pending_saw_current = saw_current
                self._pending_has_tag = True
            return None
        self._pending_explicit_id = None
        self._pending_saw_current = False
        self._pending_has_tag = False
        return merged

    def _take_ready_text(self, text: str, *, final: bool) -> str:
        """The held tail plus ``text``, minus whatever must now be held back.

        Works like ``combined = tail + text`` followed by "hold back from the last ``[[`` when no
        ``]]`` follows it", without rescanning the tail.
        """
        if not self._tail_parts:
            if final:
                return text
            open_at = text.rfind("[[")
            if open_at < 0 or text.find("]]", open_at + 2) >= 0:
                return text
            self._tail_parts = [text[open_at:]]
            return text[:open_at]

        if final:
            return self._release_tail() + text

        tail_last = self._tail_parts[-1][-1]
        open_in_text = text.rfind("[[")
        if open_in_text >= 0:
            # The last "[[" is in the new text: everything before it is released.
            if text.find("]]", open_in_text + 2) >= 0:
                return self._release_tail() + text
            ready = self._release_tail() + text[:open_in_text]
            self._tail_parts = [text[open_in_text:]]
            return ready
        if tail_last == "[" and text.startswith("["):
            # The last "[[" straddles the boundary: the tail's final "[" opens a new tag.
            if text.find("]]", 1) >= 0:
                return self._release_tail() + text
            tail = self._release_tail()
            self._tail_parts = ["[" + text]
            return tail[:-1]
        # The tail's own "[[" is still the last one: does a "]]" close it now? The tail holds
        # none past its "[[", so look at the new text and the seam ("]" + "]"). A "]" ending
        # the tail always lies past its "[[", so a seam "]]" counts.
        closes = "]]" in text or (tail_last == "]" and text.startswith("]"))
        if closes:
            return self._release_tail() + text
        if text:
            self._tail_parts.append(text)
        return ""

    def _release_tail(self) -> str:
        tail = "".join(self._tail_parts)
        self._tail_parts = []
        return tail
