"""What both stores say of their schema, in the same words: the one line a migration logs
at start, and the refusal of a schema newer than this botd knows.

Each backend keeps its own migrations (``sqlite.schema``, ``postgres.schema``: ``MIGRATIONS[n]``
takes version ``n`` to ``n + 1``) and applies them when the store opens. A schema is never
migrated back: a database a newer botd migrated is refused by an older one, with what to do.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

__all__ = ["log_migrated", "newer_schema"]


def log_migrated(where: str, before: int, after: int) -> None:
    """Log that the store ``where`` went from schema ``before`` to ``after`` (0: a new
    database), at INFO: once per migration, by the process that made it."""
    if before == 0:
        log.info("%s: schema created (version %d)", where, after)
    else:
        log.info("%s: schema migrated from version %d to %d", where, before, after)


def newer_schema(where: str, found: int, known: int, elsewhere: str) -> str:
    """Why a botd that knows schema ``known`` refuses the store ``where`` at ``found``, and
    what to do; ``elsewhere`` is the key that points botd at another store."""
    return (
        f"{where}: schema version {found} is newer than this botd understands ({known}), a "
        f"newer botd migrated it: upgrade botd to that release (or later), or point "
        f"{elsewhere} elsewhere; going back to an older botd is not supported (restore the "
        "backup taken before the upgrade)"
    )
