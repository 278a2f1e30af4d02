"""What botd makes of a chat message that is neither text nor a file: one line the model can
answer, the same wording on every platform, and a log line for what it still does not read.

A sticker, a location, a venue, a contact, a poll and a dice become a marker that stands as
the message's text (it has no caption), so it goes through the router like any text (the
dedupe ledger, mention rules in groups):

    [sticker 😀]                                 its emoji (Discord: its name)
    [location 52.52, 13.405]                     latitude, longitude
    [venue "Title", address, 52.52, 13.405]
    [contact Name, +49 30 1234567]               the number the user chose to share
    [poll "Question?": option A / option B]      a quiz: [quiz "Question?": …]
    [dice 🎲 4]                                   the emoji thrown and the value shown

Every name, title and option is the sender's own words: each is put on one line without
square brackets (``botd.speakers``' cleaning), so none can close its marker early or start a
line that poses as a speaker's label.

``NotRead`` logs, once per kind and channel instance, a message of a kind botd does not read,
at INFO, naming only the kind (never its text, sender or chat).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..speakers import one_line

__all__ = ["NotRead", "contact", "dice", "location", "poll", "sticker", "venue"]

log = logging.getLogger(__name__)

_FIELD = 200
"""At most this many characters of a name, title, address or option."""


def _coordinate(value: float) -> str:
    # Five decimals are about a metre: more than any phone reports honestly.
    return f"{value:.5f}".rstrip("0").rstrip(".")


def sticker(label: str) -> str:
    """A sticker: its emoji (Telegram) or name (Discord); ``[sticker]`` when it has neither."""
    shown = one_line(label, _FIELD)
    return f"[sticker {shown}]" if shown else "[sticker]"


def location(latitude: float, longitude: float) -> str:
    """A shared point on the map."""
    return f"[location {_coordinate(latitude)}, {_coordinate(longitude)}]"


def venue(title: str, address: str, latitude: float, longitude: float) -> str:
    """A named place: its title, address and point."""
    parts = [f'"{one_line(title, _FIELD)}"', one_line(address, _FIELD)]
    parts += [_coordinate(latitude), _coordinate(longitude)]
    return f"[venue {', '.join(part for part in parts if part)}]"


def contact(name: str, phone: str) -> str:
    """A shared contact card: the name and the number its sender chose to share (never
    logged: it is user data)."""
    parts = [one_line(name, _FIELD), one_line(phone, _FIELD)]
    return f"[contact {', '.join(part for part in parts if part)}]"


def poll(question: str, options: Sequence[str], *, quiz: bool = False) -> str:
    """A poll (or a quiz): its question and options, in their order."""
    kind = "quiz" if quiz else "poll"
    choices = " / ".join(one_line(option, _FIELD) for option in options)
    return f'[{kind} "{one_line(question, _FIELD)}": {choices}]'


def dice(emoji: str, value: int) -> str:
    """A thrown dice (or dart, ball…): the emoji thrown and the value it shows."""
    return f"[dice {one_line(emoji, 16)} {value}]"


class NotRead:
    """Says, once per kind, that a message of a kind botd does not read came in on one channel
    instance (``label``: ``telegram[default]``): at INFO, the kind and nothing of the message."""

    def __init__(self, label: str) -> None:
        self._label = label
        self._told: set[str] = set()

    def came(self, kind: str) -> None:
        """A message of ``kind`` was not read."""
        if kind in self._told:
            return
        self._told.add(kind)
        log.info("%s: a message of kind %r is not read (logged once per kind)", self._label, kind)
