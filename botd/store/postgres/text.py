"""How the PostgreSQL store hands Python strings to the database: a NUL becomes U+FFFD.

PostgreSQL keeps no NUL (U+0000) in a text value: psycopg refuses one in text format
(``DataError`` before anything is sent) and the server in binary format. A chat line, a
model's reply or a tool's result can carry one, so every connection the store opens takes
its adapters from ``ADAPTERS``: psycopg's own, with each ``str`` dumper psycopg registers
(text and binary, for the text, varchar, name and unknown types) replaced by one that writes
U+FFFD in place of each NUL. Every text column is written through them, whatever produced
the string, so no write is refused for a NUL, and a text reads back as the SQLite store
keeps it (``botd.store.sqlite.text`` does the same there). Any other text is dumped as
psycopg dumps it; a string without a NUL pays one search for it.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.abc import Buffer
from psycopg.adapt import AdaptersMap
from psycopg.types import string

NUL = "\x00"
REPLACEMENT = "\ufffd"


class _WithoutNul:
    """Dumps a ``str`` with each NUL replaced by U+FFFD, in the connection's encoding."""

    _encoding: str

    def dump(self, obj: Any) -> Buffer | None:
        if NUL in obj:
            obj = obj.replace(NUL, REPLACEMENT)
        encoded: bytes = obj.encode(self._encoding)
        return encoded


class TextBinaryDumperName(_WithoutNul, string.StrBinaryDumperName):
    pass


class TextBinaryDumperVarchar(_WithoutNul, string.StrBinaryDumperVarchar):
    pass


class TextBinaryDumper(_WithoutNul, string.StrBinaryDumper):
    pass


class TextDumperName(_WithoutNul, string.StrDumperName):
    pass


class TextDumperVarchar(_WithoutNul, string.StrDumperVarchar):
    pass


class TextDumper(_WithoutNul, string.StrDumper):
    pass


class TextDumperUnknown(_WithoutNul, string.StrDumperUnknown):
    pass


def _adapters() -> AdaptersMap:
    adapters = AdaptersMap(psycopg.adapters)
    # In psycopg's own order: the last one registered for a format is that format's
    # default, and the text one for unknown the default of ``%s``.
    for dumper in (
        TextBinaryDumperName,
        TextBinaryDumperVarchar,
        TextBinaryDumper,
        TextDumperName,
        TextDumperVarchar,
        TextDumper,
        TextDumperUnknown,
    ):
        adapters.register_dumper(str, dumper)
    return adapters


ADAPTERS = _adapters()
"""What every connection of the store adapts with (``context=`` at connect)."""


__all__ = ["ADAPTERS"]
