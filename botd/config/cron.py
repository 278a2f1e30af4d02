"""Standard cron and intervals, read the same way by the config check and the scheduler.

A cron expression has five fields (minute hour day-of-month month day-of-week) or is one of
the ``@daily``-style macros. Day of week follows standard cron: 0 and 7 are Sunday, names
are ``sun``..``sat``. APScheduler counts weekdays from Monday, so that field is rewritten in
APScheduler's day names. When both day fields are restricted, a day matching either fires
(as in Vixie cron): ``cron_trigger`` returns an ``OrTrigger`` of the two.

``parse_every`` reads intervals such as ``30s``, ``10m``, ``2h``, ``1d`` and ``1h30m``.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.combining import OrTrigger  # type: ignore[import-untyped,unused-ignore]
from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped,unused-ignore]

__all__ = [
    "check_cron",
    "cron_trigger",
    "parse_every",
    "standard_cron_fields",
    "zone",
]

# --- intervals -------------------------------------------------------------------------------

_EVERY = re.compile(r"(\d+)\s*([smhd])")
_EVERY_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_every(text: str) -> timedelta:
    """An interval like ``30s``, ``10m``, ``2h``, ``1d`` or ``1h30m``; ``ValueError`` if not."""
    compact = text.strip().lower()
    parts = _EVERY.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact.replace(" ", ""):
        raise ValueError(f"expected an interval like 10m, 2h, 30s or 1d, got {text!r}")
    delta = timedelta()
    for number, unit in parts:
        delta += timedelta(**{_EVERY_UNITS[unit]: int(number)})
    if delta <= timedelta():
        raise ValueError("the interval must be longer than zero")
    return delta


# --- standard cron ---------------------------------------------------------------------------

_FIELDS = ("minute", "hour", "day", "month", "day_of_week")
_FIELD_WORDS = {
    "minute": "minute",
    "hour": "hour",
    "day": "day-of-month",
    "month": "month",
    "day_of_week": "day-of-week",
}
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # index = standard number
_APS_WEEK = (1, 2, 3, 4, 5, 6, 0)  # APScheduler's week order (Monday first), as standard numbers


def _day_number(token: str, expr: str) -> int:
    """A day-of-week token as a standard number 0-7 (names give 0-6)."""
    word = token.strip().lower()
    if word.isdigit() and 0 <= int(word) <= 7:
        return int(word)
    if word in _DAY_NAMES:
        return _DAY_NAMES.index(word)
    raise ValueError(f"cron {expr!r}: day of week {token!r} is not 0-7 or sun..sat")


def _day_of_week(field: str, expr: str) -> str:
    """Translate a standard day-of-week field (Sunday = 0 or 7) to APScheduler's names."""
    days: set[int] = set()
    for item in field.split(","):
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"cron {expr!r}: bad step in day of week {item!r}")
            step = int(step_text)
        if base == "*":
            low, high = 0, 6
        elif "-" in base:
            first, _, last = base.partition("-")
            low, high = _day_number(first, expr), _day_number(last, expr)
            if low > high:
                raise ValueError(f"cron {expr!r}: day-of-week range {base!r} runs backwards")
        else:
            low = _day_number(base, expr)
            high = 6 if slash else low  # "a/n" means from a to the end of the week
        days.update(day % 7 for day in range(low, high + 1, step))
    if len(days) == 7:
        return "*"
    # Runs of consecutive days (in Monday-first order) become ranges: "mon-fri".
    parts: list[str] = []
    run: list[int] = []
    for day in [*_APS_WEEK, -1]:
        if day in days:
            run.append(day)
            continue
        if run:
            first, last = _DAY_NAMES[run[0]], _DAY_NAMES[run[-1]]
            parts.append(first if len(run) == 1 else f"{first}-{last}")
            run = []
    return ",".join(parts)


def standard_cron_fields(expr: str) -> dict[str, str]:
    """A five-field cron expression (or ``@daily``-style macro) as ``CronTrigger`` fields.

    Day of week follows standard cron (0 and 7 are Sunday, names sun..sat) and is rewritten in
    APScheduler's names, whose numbers count from Monday. Raises ValueError naming the problem.
    """
    text = _MACROS.get(expr.strip().lower(), expr)
    parts = text.split()
    if len(parts) != 5:
        raise ValueError(
            f"cron {expr!r}: needs 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(parts)}"
        )
    fields = dict(zip(_FIELDS, parts, strict=True))
    fields["day_of_week"] = _day_of_week(fields["day_of_week"], expr)
    return fields


def zone(name: str) -> ZoneInfo:
    """An IANA time zone, or ValueError naming it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}") from None


def cron_trigger(expr: str, timezone: str) -> Any:
    """The APScheduler trigger of a standard cron expression in a time zone (ValueError if bad).

    When both day fields are restricted, standard cron fires on a day matching either: that is
    an ``OrTrigger`` of the two.
    """
    fields = standard_cron_fields(expr)
    tz = zone(timezone)
    try:
        if fields["day"].startswith("*") or fields["day_of_week"] == "*":
            return CronTrigger(timezone=tz, **fields)
        return OrTrigger(
            [
                CronTrigger(timezone=tz, **{**fields, "day_of_week": "*"}),
                CronTrigger(timezone=tz, **{**fields, "day": "*"}),
            ]
        )
    except ValueError as exc:
        raise ValueError(f"cron {expr!r}: {exc}") from None


def check_cron(expr: str) -> None:
    """Validate ``expr`` as ``cron_trigger`` reads it, naming the field that is wrong."""
    fields = standard_cron_fields(expr)
    for key, value in fields.items():
        try:
            CronTrigger(**{key: value}, timezone="UTC")
        except ValueError as exc:
            detail = str(exc).split(": ", 1)[-1]
            raise ValueError(f"bad {_FIELD_WORDS[key]} field {value!r}: {detail}") from None
    cron_trigger(expr, "UTC")
