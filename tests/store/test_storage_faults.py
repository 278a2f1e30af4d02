"""A database botd cannot use stops ``botd run`` with one line, exit 2, the file untouched.

Each case is a real ``botd run --config`` subprocess against a state dir holding the bad
file. Permission cases need the permission bits to count: as root (which passes any mode
check) the daemon is started through ``setpriv`` without ``CAP_DAC_OVERRIDE`` and
``CAP_DAC_READ_SEARCH``, so root is held to the modes like the unprivileged user a service
runs as. Read-only mounts are real bind mounts (root only; skipped elsewhere).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from botd.store import StoreOpenError
from botd.store.sqlite import DB_FILENAME, SCHEMA_VERSION, SqliteStore

BOTD = [sys.executable, "-m", "botd"]
HANG_GUARD = 60.0


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}


def _config(tmp_path: Path, state: Path) -> Path:
    config = tmp_path / "botd.yaml"
    config.write_text(
        f"state_dir: {json.dumps(str(state))}\n"
        "health: {enabled: false}\n"
        "model:\n  provider: scripted\n"
        "channels:\n  console:\n    enabled: true\n",
        encoding="utf-8",
    )
    return config


def _as_a_service_user() -> list[str]:
    """A command prefix under which file modes apply (see the module docstring)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: file modes cannot be made to count")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"]


def _run(config: Path, prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(prefix or []), *BOTD, "run", "--config", str(config)],
        input="hello\n",
        capture_output=True,
        text=True,
        cwd=config.parent,
        env=_env(),
        timeout=HANG_GUARD,
    )


def _snapshot(path: Path) -> tuple[bytes, int] | str:
    if path.is_dir():
        return "directory"
    return path.read_bytes(), path.stat().st_mtime_ns


def _botd_database(state: Path, rows: int = 0) -> Path:
    """A database as botd leaves it, optionally with transcript rows spread over pages."""
    with SqliteStore.open(state) as store:
        if rows:
            from botd.events import Message, TextContent

            session = store.get_or_create_session("console:local")
            message = Message(role="user", content=[TextContent(text="x" * 500)])
            store.append_messages(session.session_id, [message] * rows)
    return state / DB_FILENAME


def _assert_refused(
    tmp_path: Path,
    state: Path,
    *expected: str,
    prefix: list[str] | None = None,
    bad: Path | None = None,
) -> None:
    bad = bad or state / DB_FILENAME
    before = _snapshot(bad)
    result = _run(_config(tmp_path, state), prefix)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""  # nothing was answered
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr  # one line, no traceback
    assert lines[0].startswith("botd: ")
    for text in expected:
        assert text in lines[0], lines[0]
    assert _snapshot(bad) == before  # same bytes, same mtime
    leftovers = sorted(p.name for p in state.iterdir() if p.name.endswith(("-wal", "-shm")))
    assert leftovers == []


# --------------------------------------------------------------------------- cannot be read


def test_random_bytes_are_not_a_database(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / DB_FILENAME).write_bytes(os.urandom(8192))
    _assert_refused(
        tmp_path,
        state,
        f"{state / DB_FILENAME}: is not a SQLite database (corrupt?)",
        "restore it from a backup or move it aside",
    )


def test_a_header_cut_short_is_not_a_database(tmp_path: Path) -> None:
    state = tmp_path / "state"
    database = _botd_database(state)
    os.truncate(database, 10)
    _assert_refused(tmp_path, state, str(database), "is not a SQLite database (corrupt?)")


def test_a_truncated_database_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    database = _botd_database(state, rows=400)
    os.truncate(database, database.stat().st_size // 2)
    _assert_refused(
        tmp_path,
        state,
        str(database),
        "database disk image is malformed",
        "restore it from a backup or move it aside",
    )


def test_damaged_pages_are_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    database = _botd_database(state, rows=400)
    page_size = 4096
    pages = database.stat().st_size // page_size
    with database.open("r+b") as file:  # garbage over a page in the middle, header intact
        file.seek((pages // 2) * page_size)
        file.write(b"\xa5" * page_size)
    _assert_refused(tmp_path, state, str(database), "restore it from a backup or move it aside")


def test_a_directory_where_the_database_should_be(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / DB_FILENAME).mkdir(parents=True)
    _assert_refused(tmp_path, state, f"{state / DB_FILENAME}: is a directory, not a database file")


def test_a_database_from_a_newer_botd(tmp_path: Path) -> None:
    state = tmp_path / "state"
    database = _botd_database(state)
    with sqlite3.connect(database) as conn:
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    _assert_refused(
        tmp_path,
        state,
        f"schema version {SCHEMA_VERSION + 1} is newer than this botd understands",
        "upgrade botd",
    )


# --------------------------------------------------------------------------- cannot be written


def test_a_read_only_database_file(tmp_path: Path) -> None:
    state = tmp_path / "state"
    database = _botd_database(state)
    database.chmod(0o444)
    _assert_refused(
        tmp_path,
        state,
        f"{database}: cannot be opened for writing (Permission denied)",
        "writable for the user botd runs as",
        prefix=_as_a_service_user(),
    )


def test_a_database_without_any_permission(tmp_path: Path) -> None:
    state = tmp_path / "state"
    database = _botd_database(state)
    database.chmod(0o000)
    try:
        _assert_refused(
            tmp_path,
            state,
            f"{database}: cannot be opened for writing (Permission denied)",
            prefix=_as_a_service_user(),
        )
    finally:
        database.chmod(0o644)


def test_a_read_only_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "state"
    database = _botd_database(state)
    (state / "botd.lock").write_text("")  # a previous run left its lock file
    state.chmod(0o555)
    try:
        _assert_refused(
            tmp_path,
            state,
            f"{state}: cannot create files in the state dir (Permission denied)",
            prefix=_as_a_service_user(),
            bad=database,
        )
    finally:
        state.chmod(0o755)


def test_a_read_only_state_dir_without_a_lock_file(tmp_path: Path) -> None:
    state = tmp_path / "state"
    database = _botd_database(state)
    state.chmod(0o555)
    try:
        _assert_refused(
            tmp_path,
            state,
            f"cannot open the lock file {state / 'botd.lock'} (Permission denied)",
            prefix=_as_a_service_user(),
            bad=database,
        )
    finally:
        state.chmod(0o755)


@contextmanager
def _read_only_bind(path: Path) -> Iterator[None]:
    """``path`` (a file or a directory) remounted read-only over itself."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("read-only bind mounts need root")
    bind = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True)
    if bind.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bind.stderr.decode().strip()}")
    try:
        subprocess.run(
            ["mount", "-o", "remount,ro,bind", str(path)], check=True, capture_output=True
        )
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True, capture_output=True)


@pytest.mark.parametrize("what", ["file", "dir"])
def test_a_read_only_mount(tmp_path: Path, what: str) -> None:
    state = tmp_path / "state"
    database = _botd_database(state)
    mounted = database if what == "file" else state
    expect = (
        f"{database}: cannot be opened for writing (Read-only file system)"
        if what == "file"
        else f"cannot open the lock file {state / 'botd.lock'} (Read-only file system)"
    )
    with _read_only_bind(mounted):
        _assert_refused(tmp_path, state, expect, bad=database)


def test_a_full_file_system_at_start(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(state)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        database = _botd_database(state)
        filler = os.open(state / "filler", os.O_WRONLY | os.O_CREAT)
        try:  # every block taken
            while os.write(filler, b"\0" * 4096):
                pass
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(filler)
        _assert_refused(tmp_path, state, "(No space left on device)", "free space", bad=database)
    finally:
        subprocess.run(["umount", str(state)], check=True, capture_output=True)


def test_a_new_database_on_a_full_file_system_leaves_nothing_behind(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(state)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        filler = os.open(state / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(filler, b"\0" * 4096):
                pass
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(filler)
        with pytest.raises(StoreOpenError) as refused:
            SqliteStore.open(state)
        message = str(refused.value)
        assert "\n" not in message and message.startswith(f"{state / DB_FILENAME}: ")
        assert sorted(p.name for p in state.iterdir()) == ["filler"]
    finally:
        subprocess.run(["umount", str(state)], check=True, capture_output=True)
