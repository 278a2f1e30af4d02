"""A daemon forked from the warm interpreter (``tests/support/warm_daemons.py``) behaves as a
``python -m botd run`` started cold: the same exit status and words for a config it refuses, the
test's environment, directory and stderr, and signals that reach botd itself."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_process import (
    BOTD,
    HANG_GUARD,
    RunningDaemon,
    daemon_env,
    ended,
    reap,
    start_daemon,
)
from tests.support.waiting import file_contains, until
from tests.support.warm_daemons import WarmDaemon, WarmStarter

pytestmark = pytest.mark.skipif(
    os.environ.get("BOTD_TEST_COLD_DAEMONS") == "1", reason="daemons start cold in this run"
)


def _telegram_config(home: Path, telegram: FakeTelegramAPI) -> Path:
    config = home / "botd.yaml"
    config.write_text(
        f"""state_dir: {json.dumps(str(home / "state"))}
health: {{enabled: false}}
model: {{provider: scripted}}
channels:
  telegram:
    token: ${{TELEGRAM_TEST_TOKEN}}
    api_base_url: {json.dumps(telegram.base_url)}
""",
        encoding="utf-8",
    )
    return config


async def _cold(config: Path, cwd: Path, log: Path) -> int:
    with log.open("ab") as stderr:
        process = await asyncio.create_subprocess_exec(
            *BOTD,
            "run",
            "--config",
            str(config),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=stderr,
            cwd=cwd,
            env=daemon_env(),
        )
    return await asyncio.wait_for(process.wait(), HANG_GUARD)


async def test_a_refused_config_ends_the_same_warm_and_cold(tmp_path: Path) -> None:
    config = tmp_path / "botd.yaml"
    config.write_text("model: {provider: scripted}\nno_such_key: 1\n", encoding="utf-8")
    warm = await start_daemon(config, tmp_path, log_path=tmp_path / "warm.log")
    assert isinstance(warm, WarmDaemon)  # this worker forks daemons
    warm_status = await ended(warm)
    cold_status = await _cold(config, tmp_path, tmp_path / "cold.log")
    assert warm_status == cold_status != 0
    warm_words = (tmp_path / "warm.log").read_text()
    assert "no_such_key" in warm_words
    assert warm_words == (tmp_path / "cold.log").read_text()


async def test_a_forked_daemon_has_the_tests_directory_and_environment_and_takes_signals_itself(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    async with FakeTelegramAPI(token="424242:WARM-TOKEN") as telegram:
        config = _telegram_config(home, telegram)  # the token only in the environment
        process: RunningDaemon = await start_daemon(
            config, home, TELEGRAM_TEST_TOKEN=telegram.token
        )
        try:
            await _check_warm_daemon(process, home, telegram)
        finally:
            await reap(process)
    assert not file_contains(home / "daemon.log", "Traceback")()


async def _check_warm_daemon(process: RunningDaemon, home: Path, telegram: FakeTelegramAPI) -> None:
    assert isinstance(process, WarmDaemon)
    await until(
        lambda: telegram.calls_to("getUpdates"),
        "the daemon polls with the token of its environment",
    )
    assert os.readlink(f"/proc/{process.pid}/cwd") == str(home)
    assert process.returncode is None
    process.send_signal(signal.SIGSTOP)
    await until(
        lambda: Path(f"/proc/{process.pid}/stat").read_text().split()[2] == "T",
        "the daemon itself stopped",
    )
    process.send_signal(signal.SIGCONT)
    process.kill()
    assert await ended(process) == -signal.SIGKILL
    assert process.returncode == -signal.SIGKILL
    with pytest.raises(ProcessLookupError):
        process.kill()


def test_a_daemon_with_an_interpreter_set_up_of_its_own_is_started_cold() -> None:
    """A ``PYTHONPATH`` of its own (a plugin installed beside botd) is never forked from
    the warm process, which lacks it: also when no daemon was started before it, so that
    the warm process is not running yet."""
    starter = WarmStarter()
    shared = daemon_env()
    assert not starter.fits(daemon_env(PYTHONPATH="/elsewhere"), shared)
    assert starter.fits(daemon_env(), shared)
