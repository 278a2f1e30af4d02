"""One daemon per state directory: an exclusive lock on ``<state_dir>/botd.lock``.

Two daemons on one state directory would both read and write the same conversations and
fork them (each answering without the turns the other handled). ``StateLock.acquire`` takes
an exclusive, non-blocking ``flock`` on the lock file and writes the holder's pid into it;
the lock lives as long as the open file, so it is released when the process ends, however
it ends (a SIGKILL included), and a stale file left behind never blocks a later start. The
file itself is never removed: unlinking a lock file races with a process about to lock it.

The file also says how to reach the holder, for ``botd status`` run without ``--config``:
its first line is the pid, its second a JSON object (``Holder``): ``config``, the absolute
path of the config file it runs (null: the built-in console config), and ``health``, the
URL of its ``/healthz`` once it serves it (``StateLock.record``; null while it does not).
A file of an earlier botd has the pid alone.

``botd pairing`` does not take the lock: it only rewrites ``pairing.json`` atomically, which
the running daemon reads again when it changes. ``botd status`` does not touch it either:
``holder`` reads the pid in the file and asks the system whether that process lives (trying
the lock, even shared and for a moment, could make a daemon starting then fail).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

LOCK_FILENAME = "botd.lock"

__all__ = [
    "LOCK_FILENAME",
    "Holder",
    "StateDirError",
    "StateDirInUse",
    "StateLock",
    "holder",
    "holder_of",
    "written_pid",
]


@dataclass(frozen=True, slots=True)
class Holder:
    """The botd holding a state dir, as its lock file says (see the module docstring)."""

    pid: int
    config: Path | None = None
    """The config file it runs (None: the built-in config, or an earlier botd's lock)."""
    health: str | None = None
    """The URL of its ``/healthz`` (None: not served, not yet, or an earlier botd's lock)."""
    recorded: bool = False
    """Whether the lock says more than the pid (an earlier botd's says the pid alone)."""


class StateDirError(Exception):
    """The state directory cannot be used (not a directory, not writable); one line."""


class StateDirInUse(StateDirError):
    """Another process holds the state directory's lock."""

    def __init__(self, state_dir: Path, pid: int | None) -> None:
        self.state_dir = state_dir
        self.pid = pid
        holder = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(
            f"state dir {state_dir} is in use by another botd ({holder}); "
            "stop it first or use another state_dir"
        )


class StateLock:
    """The exclusive lock on a state directory, held from ``acquire`` to ``release``."""

    def __init__(self, state_dir: Path, *, config: Path | None = None) -> None:
        """``config``: the config file the holder runs, written into the lock file."""
        self.state_dir = state_dir
        self.path = state_dir / LOCK_FILENAME
        self._fd: int | None = None
        self._about: dict[str, Any] = {
            "config": None if config is None else str(config.absolute()),
            "health": None,
        }

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Create the directory if needed and lock it, or raise ``StateDirError``.

        Raises ``StateDirInUse`` (naming the holder's pid) when another process has it.
        """
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already locked by this process")
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise StateDirError(
                f"state dir {self.state_dir} exists and is not a directory: "
                "move it aside or point state_dir elsewhere"
            ) from None
        except OSError as exc:
            raise StateDirError(
                f"state dir {self.state_dir} cannot be created ({exc.strerror}): "
                "create it writable for the user botd runs as, or point state_dir elsewhere"
            ) from None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StateDirError(
                f"cannot open the lock file {self.path} ({exc.strerror}): make state_dir and "
                "its files writable for the user botd runs as, or point state_dir elsewhere"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise StateDirInUse(self.state_dir, pid) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            _write(fd, self._content())
        except OSError as exc:
            os.close(fd)
            raise StateDirError(
                f"cannot write the lock file {self.path} ({exc.strerror}): "
                "free space or make state_dir writable, or point state_dir elsewhere"
            ) from None
        self._fd = fd

    def record(self, *, health: str | None) -> None:
        """Write where the holder's ``/healthz`` answers now into the lock file (None: it
        does not serve one). A file that cannot be written keeps what it said: only
        ``botd status`` reads it, and it says what it could not find."""
        self._about["health"] = health
        if self._fd is not None:
            with contextlib.suppress(OSError):
                _write(self._fd, self._content())

    def _content(self) -> bytes:
        return f"{os.getpid()}\n{json.dumps(self._about)}\n".encode()

    def release(self) -> None:
        """Drop the lock (idempotent). The file stays; its pid is cleared."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):  # the lock goes with the descriptor regardless
            os.ftruncate(fd, 0)
        os.close(fd)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def holder(state_dir: Path) -> int | None:
    """The pid of the botd holding ``state_dir``'s lock, None when none does: no lock file,
    no pid in it (released), or the process that wrote it is gone (killed)."""
    found = holder_of(state_dir)
    return None if found is None else found.pid


def holder_of(state_dir: Path) -> Holder | None:
    """The botd holding ``state_dir``'s lock, as its lock file says; None when none does."""
    try:
        fd = os.open(state_dir / LOCK_FILENAME, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        text = _read(fd)
    finally:
        os.close(fd)
    pid = written_pid(text)
    if pid is None or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, as another user
    return _holder(pid, text)


def _write(fd: int, content: bytes) -> None:
    """Replace the file's content; the pid stays at its start throughout (a reader never
    finds the file empty while the lock is held)."""
    os.pwrite(fd, content, 0)
    os.ftruncate(fd, len(content))


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 64 * 1024, 0).decode("utf-8", errors="replace")
    except OSError:
        return ""


def written_pid(text: str) -> int | None:
    """The pid a lock file's text ``text`` names on its first line, or None (not written
    yet, not a number)."""
    first = text.split("\n", 1)[0].strip()
    return int(first) if first.isdigit() else None


def _holder(pid: int, text: str) -> Holder:
    """The holder ``pid`` with what the rest of its lock file says (nothing, from an earlier
    botd; a line that is no JSON object is taken as nothing either)."""
    try:
        about = json.loads(text.split("\n", 1)[1])
    except (IndexError, ValueError):
        return Holder(pid)
    if not isinstance(about, dict):
        return Holder(pid)
    config, health = about.get("config"), about.get("health")
    return Holder(
        pid,
        Path(config) if isinstance(config, str) else None,
        health if isinstance(health, str) else None,
        recorded=True,
    )


def _read_pid(fd: int) -> int | None:
    """The pid the holder wrote, or None (not written yet, or not a number)."""
    return written_pid(_read(fd))
