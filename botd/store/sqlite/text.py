"""How the SQLite store hands Python strings to the database: a NUL becomes U+FFFD.

SQLite would keep a NUL (U+0000) inside a text value, but its ``length`` and ``quote``
functions and the ``sqlite3`` shell's ``.dump`` stop at it, and the PostgreSQL store cannot
keep one at all (``botd.store.postgres.text``). So that a text reads back the same from either
backend, the store's connection (``TextConnection``) writes U+FFFD in place of each NUL of
every string parameter of ``execute`` and ``executemany``, whatever produced the string. A
statement without a NUL in its parameters pays one search per string.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

NUL = "\x00"
REPLACEMENT = "\ufffd"


def _clean(value: object) -> object:
    return value.replace(NUL, REPLACEMENT) if isinstance(value, str) else value


def without_nul(parameters: Any) -> Any:
    """``parameters`` (a sequence, or a mapping of names) with each NUL of each string
    replaced; the same object when there is none."""
    values = parameters.values() if isinstance(parameters, Mapping) else parameters
    for value in values:
        if isinstance(value, str) and NUL in value:
            break
    else:
        return parameters  # the common case: one look at each string
    if isinstance(parameters, Mapping):
        return {name: _clean(v) for name, v in parameters.items()}
    return tuple(_clean(v) for v in parameters)


class TextConnection(sqlite3.Connection):
    """A connection whose statements write no NUL (see the module docstring)."""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        return super().execute(sql, without_nul(parameters) if parameters else parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        return super().executemany(sql, (without_nul(row) for row in parameters))


__all__ = ["TextConnection", "without_nul"]
