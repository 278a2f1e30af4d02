"""One daemon per state directory: the lock, a second ``botd run`` refused, ``botd pairing``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from botd.app import App
from botd.config import parse_config
from botd.ops.statelock import (
    LOCK_FILENAME,
    Holder,
    StateDirError,
    StateDirInUse,
    StateLock,
    holder,
    holder_of,
)
from botd.store.sqlite import DB_FILENAME
from tests.support.daemon_process import BOTD, HANG_GUARD, reap, run_botd
from tests.support.waiting import until


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _console_config(tmp_path: Path, state: Path) -> Path:
    config = tmp_path / "botd.yaml"
    config.write_text(
        f"state_dir: {json.dumps(str(state))}\n"
        "health: {enabled: false}\n"
        "model:\n  provider: scripted\n"
        "channels:\n  console:\n    enabled: true\n"
        # Asked for: with the console enabled the default is WARNING, and the test waits
        # for the INFO line saying the console runs.
        "logging:\n  level: INFO\n",
        encoding="utf-8",
    )
    return config


# --------------------------------------------------------------------------- the lock itself


def test_the_lock_holds_the_pid_and_refuses_a_second_holder(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with StateLock(state) as first:
        assert (state / LOCK_FILENAME).read_text().splitlines()[0] == str(os.getpid())
        # flock conflicts between two open files even within one process.
        with pytest.raises(StateDirInUse) as refused:
            StateLock(state).acquire()
        assert refused.value.pid == os.getpid()
        assert str(refused.value) == (
            f"state dir {state} is in use by another botd (pid {os.getpid()}); "
            "stop it first or use another state_dir"
        )
        assert first.held
    assert (state / LOCK_FILENAME).exists()  # the file stays; only the lock went
    with StateLock(state):
        pass


def test_a_stale_lock_file_from_a_dead_process_does_not_block(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / LOCK_FILENAME).write_text("999999\n")
    with StateLock(state):
        assert (state / LOCK_FILENAME).read_text().splitlines()[0] == str(os.getpid())


def test_the_lock_says_the_config_and_the_health_url_and_an_earlier_lock_the_pid(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    config = tmp_path / "botd.yaml"
    with StateLock(state, config=config) as lock:
        assert holder_of(state) == Holder(os.getpid(), config, None, recorded=True)
        lock.record(health="http://127.0.0.1:8480/healthz")
        assert holder_of(state) == Holder(
            os.getpid(), config, "http://127.0.0.1:8480/healthz", recorded=True
        )
        lines = (state / LOCK_FILENAME).read_text().splitlines()
        assert lines[0] == str(os.getpid())
        assert json.loads(lines[1]) == {
            "config": str(config),
            "health": "http://127.0.0.1:8480/healthz",
        }
        lock.record(health=None)  # shorter: nothing of the longer one is left behind
        assert holder_of(state) == Holder(os.getpid(), config, None, recorded=True)
    assert holder_of(state) is None  # released
    # An earlier botd's lock: the pid alone.
    (state / LOCK_FILENAME).write_text(f"{os.getpid()}\n")
    assert holder_of(state) == Holder(os.getpid())
    assert holder(state) == os.getpid()


def test_a_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    state = tmp_path / "state"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, pathlib; from botd.ops.statelock import StateLock; "
            f"StateLock(pathlib.Path({str(state)!r})).acquire(); print('locked', flush=True); "
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StateDirInUse) as refused:
            StateLock(state).acquire()
        assert refused.value.pid == holder.pid
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=HANG_GUARD)
        with StateLock(state):
            pass
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_state_dir_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("not a directory")
    with pytest.raises(StateDirError, match="exists and is not a directory"):
        StateLock(state).acquire()


async def test_a_daemon_in_process_is_refused_before_the_database_is_opened(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    config = parse_config(
        f"state_dir: {json.dumps(str(state))}\nchannels:\n  console:\n    enabled: true\n", {}
    )
    with StateLock(state), pytest.raises(StateDirInUse, match=f"pid {os.getpid()}"):
        await App(config, env={}).run()
    assert not (state / DB_FILENAME).exists()


# --------------------------------------------------------------------------- botd run twice


async def test_a_second_botd_run_exits_2_naming_the_first(tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = _console_config(tmp_path, state)
    log_path = tmp_path / "first.log"
    with log_path.open("wb") as log_file:
        first = await asyncio.create_subprocess_exec(
            *BOTD,
            "run",
            "--config",
            str(config),
            stdin=asyncio.subprocess.PIPE,  # kept open: the console waits for input
            stdout=asyncio.subprocess.PIPE,
            stderr=log_file,
            cwd=tmp_path,
            env=_env(),
        )
    try:
        await until(
            lambda: "channel console running" in log_path.read_text(errors="replace"),
            '"channel console running" in log_path.read_text(errors="replace")',
        )
        second = await asyncio.create_subprocess_exec(
            *BOTD,
            "run",
            "--config",
            str(config),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=tmp_path,
            env=_env(),
        )
        out, err = await asyncio.wait_for(second.communicate(), HANG_GUARD)
        assert second.returncode == 2
        assert out == b""
        assert err.decode().splitlines() == [
            f"botd: state dir {state} is in use by another botd (pid {first.pid}); "
            "stop it first or use another state_dir"
        ]

        # botd pairing works beside the running daemon: it takes no lock.
        pairing = await asyncio.create_subprocess_exec(
            *BOTD,
            "pairing",
            "list",
            "--config",
            str(config),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=tmp_path,
            env=_env(),
        )
        listed, _ = await asyncio.wait_for(pairing.communicate(), HANG_GUARD)
        assert pairing.returncode == 0
        assert listed.decode() == f"state dir {state}\nno pairing codes waiting\n"

        # The first daemon was not disturbed: it still answers and ends cleanly.
        assert first.stdin is not None and first.stdout is not None
        first.stdin.write(b"hello\n")
        await first.stdin.drain()
        line = await asyncio.wait_for(first.stdout.readline(), HANG_GUARD)
        assert line == b"You said: hello\n"
        first.stdin.close()
        assert await asyncio.wait_for(first.wait(), HANG_GUARD) == 0
    finally:
        await reap(first)

    # Once the first is gone the state dir is free again.
    result = run_botd("run", "--config", str(config), cwd=tmp_path, input="again\n", env=_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout == "You said: again\n"
