"""Who said what: the speaker labels the model reads in group conversations.

In a group several people talk to the bot, so each of their lines carries a label with the
sender's display name and platform id: ``[Alice (id 123)] text``. The name is the sender's
own choice, so it is cleaned before it is shown: brackets and parentheses (which make up
the label) are removed, as are control, format and line-separator characters (newlines,
zero-width and bidi marks), whitespace is collapsed, compatibility forms are folded
(fullwidth ``［`` is ``[``) and the name is cut to ``NAME_LIMIT`` characters. A name that
is empty after cleaning leaves the label as ``[id 123]``.

A sender's text may span lines; a line after the first that begins with ``[`` is escaped
(``\\[``), so text cannot start a line that reads as another speaker's label.

The message a user replied to comes before their text as a quote block: a header naming
who wrote it (``[In reply to Bob (id 456):]``, or ``[In reply to your message:]`` for the
bot's own) and then every line of it after ``> ``. Every line break the model could read as
one (``\\r``, U+2028 and the like) starts a new ``> `` line, so a quoted text cannot end the
block early or start a line of its own: whatever it says (a header, a label, a
system-looking note), it stays inside the quote.

A forwarded message is the forwarder's message (their label, in a group), its text after a
label naming where it came from: ``[forwarded from Alice (id 123), 2026-11-20] text``. The
origin is cleaned like every name, and every line of the forwarded text, its first too, is
escaped as a sender's later lines are, so it can pose neither as a speaker nor as another
forward.

This module imports nothing of botd: the router, the prompt and the channels all use it.
"""

from __future__ import annotations

import unicodedata

__all__ = [
    "BOT_LABEL",
    "NAME_LIMIT",
    "QUOTE_MARK",
    "bot_line",
    "clean_name",
    "forwarded",
    "hidden_speaker",
    "labelled",
    "one_line",
    "quote_block",
    "speaker",
    "speaker_label",
]

NAME_LIMIT = 64
"""How many characters of a display name (or id) a label shows."""
BOT_LABEL = "[you]"
"""The label of the bot's own earlier messages: no sender's label can read like it (those
always name an id)."""
_LABEL_MARKS = frozenset("[]()")
_BRACKETS = frozenset("[]")
_DROPPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def clean_name(name: str, limit: int = NAME_LIMIT) -> str:
    """``name`` as a label may show it (see the module docstring)."""
    return _cleaned(name, _LABEL_MARKS, limit)


def _cleaned(text: str, marks: frozenset[str], limit: int) -> str:
    """``text`` on one line, without ``marks`` and invisible or line-breaking characters,
    whitespace collapsed, at most ``limit`` characters."""
    if not text:
        return ""
    folded = unicodedata.normalize("NFKC", text)
    kept = "".join(
        " " if ch.isspace() else ch
        for ch in folded
        if ch not in marks and unicodedata.category(ch) not in _DROPPED_CATEGORIES
    )
    text = " ".join(kept.split())
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


def one_line(text: str, limit: int) -> str:
    """``text`` on one line without square brackets, invisible or line-breaking characters,
    whitespace collapsed, at most ``limit`` characters: a user's words inside a line botd
    writes (``botd.channels.inputs``' markers); each line break is a space."""
    return _cleaned(" ".join(text.splitlines()), _BRACKETS, limit)


def speaker(name: str, sender_id: str) -> str:
    """``Name (id ID)``, or ``id ID`` when there is no usable name: who a label names."""
    who = clean_name(sender_id) or "unknown"
    shown = clean_name(name)
    if not shown or shown == who:
        return f"id {who}"
    return f"{shown} (id {who})"


def hidden_speaker(name: str) -> str:
    """Who wrote a message whose author hides their account (a Telegram forward from a user
    who hides it): ``Name (hidden id)``, the name cleaned as every name is, so it cannot
    carry a ``(id N)`` of its own; ``someone`` when no usable name is left."""
    shown = clean_name(name)
    return f"{shown} (hidden id)" if shown else "someone"


def speaker_label(name: str, sender_id: str) -> str:
    """``[Name (id ID)]``, or ``[id ID]`` when there is no usable name."""
    return f"[{speaker(name, sender_id)}]"


def labelled(name: str, sender_id: str, text: str) -> str:
    """``text`` after its speaker's label, its later lines unable to pose as labels."""
    return f"{speaker_label(name, sender_id)} {_escape_label_lines(text)}"


def forwarded(origin: str, date: str, text: str = "", *, marker: str = "") -> str:
    """``text`` forwarded from ``origin`` (a ``speaker``, or a chat's name), first written on
    ``date`` (``YYYY-MM-DD``; "" when not told), as the forwarder's words show it.
    ``marker``: botd's own line for what the message is (``botd.channels.inputs``), shown
    before ``text`` as it is; every line of ``text``, its first too, is escaped."""
    # ``origin`` is cleaned again (brackets and line breaks out), as a quote header's is.
    who = _cleaned(origin, _BRACKETS, 2 * NAME_LIMIT) or "someone"
    label = f"[forwarded from {who}, {date}]" if date else f"[forwarded from {who}]"
    said = _escape_label_lines(f"\n{text}")[1:] if text else ""
    return " ".join(part for part in (label, marker, said) if part)


def bot_line(text: str) -> str:
    """One of the bot's own earlier messages, as context shows it."""
    return f"{BOT_LABEL} {_escape_label_lines(text)}"


QUOTE_MARK = "> "
"""What starts every line of a quoted message."""


def quote_block(who: str, text: str, *, from_bot: bool) -> str:
    """The message a user replied to, as the model reads it before their text (see the
    module docstring): ``who`` wrote it (a ``speaker``), or the bot (``from_bot``)."""
    if from_bot:
        head = "[In reply to your message:]"
    else:
        # ``who`` is a ``speaker`` already; cleaned again all the same (brackets and line
        # breaks out), so whatever an adapter put there cannot close the header early.
        head = f"[In reply to {_cleaned(who, _BRACKETS, 2 * NAME_LIMIT) or 'someone'}:]"
    lines = [f"{QUOTE_MARK}{line}".rstrip() for line in text.splitlines() or [""]]
    return "\n".join([head, *lines])


def _escape_label_lines(text: str) -> str:
    lines = text.splitlines()
    if len(lines) <= 1:
        return text
    escaped = [lines[0]]
    for line in lines[1:]:
        stripped = line.lstrip()
        if stripped and unicodedata.normalize("NFKC", stripped[0]) == "[":
            line = line[: len(line) - len(stripped)] + "\\" + stripped
        escaped.append(line)
    return "\n".join(escaped)
