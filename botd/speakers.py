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

This module imports nothing of botd: the router, the prompt and the channels all use it.
"""

from __future__ import annotations

import unicodedata

__all__ = ["BOT_LABEL", "NAME_LIMIT", "bot_line", "clean_name", "labelled", "speaker_label"]

NAME_LIMIT = 64
"""How many characters of a display name (or id) a label shows."""
BOT_LABEL = "[you]"
"""The label of the bot's own earlier messages: no sender's label can read like it (those
always name an id)."""
_LABEL_MARKS = frozenset("[]()")
_DROPPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def clean_name(name: str, limit: int = NAME_LIMIT) -> str:
    """``name`` as a label may show it (see the module docstring)."""
    if not name:
        return ""
    folded = unicodedata.normalize("NFKC", name)
    kept = "".join(
        " " if ch.isspace() else ch
        for ch in folded
        if ch not in _LABEL_MARKS and unicodedata.category(ch) not in _DROPPED_CATEGORIES
    )
    text = " ".join(kept.split())
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


def speaker_label(name: str, sender_id: str) -> str:
    """``[Name (id ID)]``, or ``[id ID]`` when there is no usable name."""
    who = clean_name(sender_id) or "unknown"
    shown = clean_name(name)
    if not shown or shown == who:
        return f"[id {who}]"
    return f"[{shown} (id {who})]"


def labelled(name: str, sender_id: str, text: str) -> str:
    """``text`` after its speaker's label, its later lines unable to pose as labels."""
    return f"{speaker_label(name, sender_id)} {_escape_label_lines(text)}"


def bot_line(text: str) -> str:
    """One of the bot's own earlier messages, as context shows it."""
    return f"{BOT_LABEL} {_escape_label_lines(text)}"


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
