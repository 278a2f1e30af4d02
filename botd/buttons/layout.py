"""The agent's choices as rows of ``Button``s every platform can show.

The limits are the strictest of the three platforms', so one reply shows the same buttons
everywhere: at most 5 rows of at most 5 buttons (Discord's components; Slack takes 25
elements per ``actions`` block), a label of at most 75 characters (Slack's; Discord takes 80,
Telegram shows a long one cut). A button's value is ``b:<n>``, its place in the reply, far
under Telegram's 64 bytes of callback data; a press's label is botd's record of the pressed
message's buttons (``botd.store.ButtonLedger``), never what the presser's client sent.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from ..chat import Button
from ..speakers import clean_name

log = logging.getLogger(__name__)

MAX_ROWS = 5
MAX_PER_ROW = 5
MAX_LABEL = 75

ButtonRows = tuple[tuple[Button, ...], ...]

_DIRECTIVE = re.compile(r"\[\[\s*buttons\s*:([^\]\n]*)\]\]", re.IGNORECASE)
"""``[[buttons: Yes | No || Later]]``: ``|`` between the buttons of a row, ``||`` between rows."""


CHOSEN_NAME_LIMIT = 32
"""How many characters of the presser's display name the choice made shows."""


def chosen_label(label: str, presser: str) -> str:
    """What a message's buttons give way to once pressed: ``✔ Yes (Alice)``. ``label`` is
    the button's as botd put it there; the presser's name, their own choice, is cleaned as
    every speaker name is (no brackets or parentheses, no line breaks or invisible marks)."""
    who = clean_name(presser, CHOSEN_NAME_LIMIT)
    return f"✔ {label} ({who})" if who else f"✔ {label}"


class ButtonsError(ValueError):
    """Choices no platform can show as given; the message says what to change."""


def button_rows(labels: Sequence[Sequence[str]], *, strict: bool) -> ButtonRows:
    """``labels`` (rows of labels) as rows of buttons. Blank labels and empty rows are left out.

    ``strict`` (the message tool): a row or label over the limits raises ``ButtonsError``
    for the model to correct. Otherwise (a directive in a reply, which nobody can correct
    any more) the extra rows and buttons are dropped and long labels cut, with a warning.
    """
    cleaned = [[label.strip() for label in row if label.strip()] for row in labels]
    cleaned = [row for row in cleaned if row]
    problem = _over_limits(cleaned)
    if problem is not None:
        if strict:
            raise ButtonsError(problem)
        log.warning("buttons cut to fit: %s", problem)
        cleaned = [[_cut(label) for label in row[:MAX_PER_ROW]] for row in cleaned[:MAX_ROWS]]
    rows: list[tuple[Button, ...]] = []
    number = 0
    for row in cleaned:
        buttons = []
        for label in row:
            buttons.append(Button(label, f"b:{number}"))
            number += 1
        rows.append(tuple(buttons))
    return tuple(rows)


def _over_limits(rows: list[list[str]]) -> str | None:
    if len(rows) > MAX_ROWS:
        return f"{len(rows)} rows of buttons: at most {MAX_ROWS} can be shown"
    for row in rows:
        if len(row) > MAX_PER_ROW:
            return f"{len(row)} buttons in a row: at most {MAX_PER_ROW} can be shown"
        for label in row:
            if len(label) > MAX_LABEL:
                return f"the label {label[:20]!r}… has {len(label)} characters: at most {MAX_LABEL}"
    return None


def _cut(label: str) -> str:
    return label if len(label) <= MAX_LABEL else label[: MAX_LABEL - 1] + "…"


def take_directives(text: str) -> tuple[str, ButtonRows]:
    """``text`` without its ``[[buttons: ...]]`` directives, and the buttons they ask for
    (each directive's rows after the ones before; each tag becomes a space)."""
    if "[[" not in text:
        return text, ()
    labels: list[list[str]] = []

    def take(match: re.Match[str]) -> str:
        for row in match.group(1).split("||"):
            labels.append(row.split("|"))
        return " "

    stripped = _DIRECTIVE.sub(take, text)
    if not labels:
        return text, ()  # the same object: nothing was taken out
    return stripped, button_rows(labels, strict=False)


def label_of(rows: Sequence[Sequence[Button]], value: str) -> str | None:
    """The label of the button with ``value`` among ``rows`` (None: not among them)."""
    for row in rows:
        for button in row:
            if button.value == value:
                return button.label
    return None


__all__ = [
    "CHOSEN_NAME_LIMIT",
    "MAX_LABEL",
    "MAX_PER_ROW",
    "MAX_ROWS",
    "ButtonRows",
    "ButtonsError",
    "button_rows",
    "chosen_label",
    "label_of",
    "take_directives",
]
