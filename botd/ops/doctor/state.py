"""The state dir's checks, changing nothing: it exists or can be created, takes files, whether
a running botd holds its lock, and whether its database opens (read only) at a schema this
botd understands. An older schema passes: botd migrates it when it starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import tempfile
from pathlib import Path

from .checks import Check, failed, passed

__all__ = ["database_checks", "lock_holder", "state_dir_checks"]


def state_dir_checks(state_dir: Path) -> list[Check]:
    """The state dir's checks, reading only (a temporary file aside): it exists or can be
    made, takes files, and whether a botd holds its lock. The SQLite store's file in it is
    the backend's check (``database_checks``)."""
    from ..statelock import LOCK_FILENAME

    if state_dir.exists() and not state_dir.is_dir():
        return [
            failed(
                "state_dir",
                f"state dir {state_dir} exists and is not a directory",
                "move it aside or point state_dir elsewhere",
            )
        ]
    if not state_dir.exists():
        parent = next((p for p in state_dir.absolute().parents if p.exists()), Path("/"))
        if parent.is_dir() and os.access(parent, os.W_OK | os.X_OK):
            what = f"state dir {state_dir} does not exist yet; botd creates it"
            return [passed("state_dir", what)]
        return [
            failed(
                "state_dir",
                f"state dir {state_dir} does not exist and cannot be created ({parent} is "
                "not writable)",
                "create it writable for the user botd runs as, or point state_dir elsewhere",
            )
        ]
    try:
        with tempfile.TemporaryFile(dir=state_dir):
            pass
    except OSError as exc:
        return [
            failed(
                "state_dir",
                f"state dir {state_dir} does not take new files ({exc.strerror})",
                "make it writable for the user botd runs as (and free some space)",
            )
        ]
    return [
        passed("state_dir", f"state dir {state_dir} writable"),
        _lock_check(state_dir / LOCK_FILENAME),
    ]


def database_checks(state_dir: Path) -> list[Check]:
    """The SQLite store's file in ``state_dir``, opened read only: whether botd can use it,
    at a schema it understands (nothing when the state dir is no directory to look in)."""
    from ...store.sqlite import DB_FILENAME

    if not state_dir.is_dir():
        return []
    return [_database_check(state_dir / DB_FILENAME)]


def _lock_check(path: Path) -> Check:
    try:
        holder = _holder(path)
    except OSError as exc:
        return failed(
            "state_dir.lock",
            f"cannot read the lock file {path} ({exc.strerror})",
            "make state_dir and its files readable and writable for the user botd runs as",
        )
    if holder is None:
        return passed("state_dir.lock", "state dir not in use by another botd")
    return passed("state_dir.lock", f"state dir in use by a running botd ({holder})")


def lock_holder(state_dir: Path) -> str | None:
    """``pid 1234`` (or ``pid unknown``) of the botd running on ``state_dir``; None when none
    does, or it cannot be told."""
    from ..statelock import LOCK_FILENAME

    try:
        return _holder(state_dir / LOCK_FILENAME)
    except OSError:
        return None


def _holder(path: Path) -> str | None:
    """Who holds the lock file ``path`` (see ``lock_holder``); raises ``OSError`` when the
    file cannot be read."""
    from ..statelock import written_pid

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        held = _flock_held(fd)
        if held is None:
            # No /proc/locks: a shared lock conflicts only with a running botd's exclusive
            # one. Held for an instant, it could make a botd starting that very instant
            # fail, which is why /proc/locks is asked first.
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                held = False
            except BlockingIOError:
                held = True
        if not held:
            return None
        pid = written_pid(os.pread(fd, 64, 0).decode("ascii", errors="replace"))
        return "pid unknown" if pid is None else f"pid {pid}"
    finally:
        os.close(fd)


def _flock_held(fd: int, locks: Path = Path("/proc/locks")) -> bool | None:
    """Whether an exclusive ``flock`` is held on the file; None when that cannot be told.

    Lines read ``1: FLOCK  ADVISORY  WRITE <pid> <major>:<minor>:<inode> 0 EOF``, the
    device numbers in hex; reading them takes no lock, so it cannot disturb a starting botd.
    Some file systems (overlayfs, btrfs subvolumes) show another device there than ``stat``
    does: a lock on the same inode number with another device is "cannot tell".
    """
    try:
        table = locks.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    info = os.fstat(fd)
    device = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    unsure = False
    for line in table.splitlines():
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[1:4:2] != ["FLOCK", "WRITE"]:
            continue  # "->": a request blocked behind a lock, not a lock held
        if fields[5] == device:
            return True
        unsure = unsure or fields[5].rsplit(":", 1)[-1] == str(info.st_ino)
    return None if unsure else False


def _database_check(path: Path) -> Check:
    from ...store import StoreOpenError
    from ...store.sqlite import SCHEMA_VERSION, preflight

    if not path.exists():
        return passed(
            "state_dir.database", f"no database yet; botd creates {path} (schema {SCHEMA_VERSION})"
        )
    try:
        preflight(path)
        version, problem = _read_database(path)
    except StoreOpenError as exc:
        return failed("state_dir.database", "database cannot be used", str(exc))
    except sqlite3.Error as exc:
        return failed(
            "state_dir.database",
            f"database {path} cannot be read ({exc})",
            "restore it from a backup or move it aside (botd then starts afresh)",
        )
    if problem != "ok":
        return failed(
            "state_dir.database",
            f"database {path} is damaged (SQLite: {problem})",
            "restore it from a backup or move it aside (botd then starts afresh)",
        )
    if version > SCHEMA_VERSION:
        return failed(
            "state_dir.database",
            f"database {path} has schema {version}, newer than this botd ({SCHEMA_VERSION})",
            "upgrade botd or point state_dir elsewhere",
        )
    if version < SCHEMA_VERSION:
        return passed(
            "state_dir.database",
            f"database opens; schema {version}, migrated to {SCHEMA_VERSION} when botd starts",
        )
    return passed("state_dir.database", f"database opens, schema {version} (current)")


def _read_database(path: Path) -> tuple[int, str]:
    """The schema version and ``quick_check`` verdict, through a read-only connection."""
    sidecars = {s: Path(f"{path}{s}").exists() for s in ("-wal", "-shm")}
    conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        problem = str(conn.execute("PRAGMA quick_check(1)").fetchone()[0])
    finally:
        conn.close()
        for suffix, existed in sidecars.items():  # a read-only reader may leave them behind
            if not existed:
                with contextlib.suppress(OSError):
                    Path(f"{path}{suffix}").unlink()
    return version, " ".join(problem.replace("*** in database main ***", "").split())
