"""``botd run`` as a child process, for the tests that start, kill and restart the daemon.

The child gets the environment of the test run without the operator's ANTHROPIC_* variables
(a test never reaches a real model), loopback kept off any proxy, and the extra variables a
config file refers to. Its stderr goes to a file: a pipe nobody reads would block the daemon
once it fills.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from tests.support.waiting import HANG_GUARD as HANG_GUARD  # the one hang guard, named here too
from tests.support.warm_daemons import WarmStarter

BOTD = [sys.executable, "-m", "botd"]


def daemon_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update({"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
    env.update(extra)
    return env


def bare_env(**extra: str) -> dict[str, str]:
    """An environment with nothing of the test run's but ``PATH`` (and ``PYTHONPATH``, so a
    checkout run with it tests its own code), plus ``extra``."""
    env = {"PATH": "/usr/bin:/bin"}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    env.update(extra)
    return env


def run_botd(
    *args: str,
    cwd: Path | None = None,
    input: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``botd ARGS`` to its end (hang-guarded): ``input`` on its stdin (none: stdin closed to
    /dev/null), its output captured as text, ``daemon_env()`` unless ``env`` is given."""
    return subprocess.run(
        [*BOTD, *args],
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=daemon_env() if env is None else env,
        timeout=HANG_GUARD,
    )


class RunningDaemon(Protocol):
    """A started ``botd run``: an ``asyncio.subprocess.Process``, or a ``WarmDaemon`` forked
    from the worker's warm interpreter (``tests/support/warm_daemons.py``)."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    async def wait(self) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


WARM = WarmStarter()
"""This worker's warm interpreter that ``start_daemon`` forks daemons from."""


async def start_daemon(
    config: Path, cwd: Path, *, log_path: Path | None = None, **env: str
) -> RunningDaemon:
    """``botd run --config CONFIG`` in ``cwd`` with stdin closed, its stderr written to the
    log (``cwd/daemon.log`` unless ``log_path``); ``env`` adds variables (``start_botd``)."""
    return await start_botd(
        ["run", "--config", str(config)], cwd, log_path=log_path, env=daemon_env(**env)
    )


async def start_botd(
    args: Sequence[str],
    cwd: Path,
    *,
    env: dict[str, str],
    log_path: Path | None = None,
    stdout_too: bool = False,
) -> RunningDaemon:
    """``botd ARGS`` in ``cwd`` with ``env`` and stdin closed, its stderr (and with
    ``stdout_too`` its stdout) written to the log (``cwd/daemon.log`` unless ``log_path``).
    Forked from the worker's warm interpreter where ``env`` allows (see
    ``tests/support/warm_daemons.py``), else started as a new process."""
    log_file = (log_path or cwd / "daemon.log").open("ab")
    try:
        warm_env = daemon_env()
        if WARM.fits(env, warm_env):
            return await WARM.start(
                list(args),
                cwd=cwd,
                env=env,
                stderr=log_file.fileno(),
                stdout=log_file.fileno() if stdout_too else None,
                warm_env=warm_env,
            )
        return await asyncio.create_subprocess_exec(
            *BOTD,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log_file if stdout_too else asyncio.subprocess.DEVNULL,
            stderr=log_file,
            cwd=cwd,
            env=env,
        )
    finally:
        log_file.close()  # the child has its own copy


async def botd_command(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """``botd ARGS`` in ``cwd`` with ``env`` and stdin closed, to its end (hang-guarded): its
    exit status, stdout and stderr as text. Forked from the worker's warm interpreter where
    ``env`` allows, as ``start_daemon`` does (a ``botd doctor`` then costs no imports),
    else started as a new process."""
    warm_env = daemon_env()
    if not WARM.fits(env, warm_env):
        process = await asyncio.create_subprocess_exec(
            *BOTD,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=env,
        )
        out, err = await asyncio.wait_for(process.communicate(), HANG_GUARD)
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        forked = await WARM.start(
            args,
            cwd=cwd,
            env=env,
            stderr=err_file.fileno(),
            stdout=out_file.fileno(),
            warm_env=warm_env,
        )
        try:
            status = await asyncio.wait_for(forked.wait(), HANG_GUARD)
        finally:
            await reap(forked)
        out_file.seek(0)
        err_file.seek(0)
        return status, out_file.read().decode(), err_file.read().decode()


async def ended(process: RunningDaemon) -> int:
    """The exit status, waited for no longer than the hang guard."""
    return await asyncio.wait_for(process.wait(), HANG_GUARD)


async def reap(process: RunningDaemon) -> None:
    """Kill ``process`` if it still runs and wait for it: a test's cleanup, whatever failed."""
    if process.returncode is None:
        process.kill()
        await process.wait()


async def stop_daemon(process: RunningDaemon) -> int:
    """SIGTERM (unless it already ended), then its exit status."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    return await ended(process)
