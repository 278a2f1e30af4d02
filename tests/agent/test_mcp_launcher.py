"""The launcher a stdio MCP server runs under on Linux (botd/agent/mcp/launcher.py), as real
processes: the server gets exactly what it would get started directly (environment,
arguments, directory, signal state, exit status, the error of a missing command), what it
started ends with it, and when its parent dies, all of it does."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from botd.agent.mcp.launcher import check_executable, launch_command
from tests.support.waiting import until

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the launcher is for Linux")

LAUNCHER = str(Path(__file__).resolve().parents[2] / "botd" / "agent" / "mcp" / "launcher.py")
ENV = {"PATH": "/usr/bin:/bin", "SPACED": "a b\tc", "EMPTY": ""}
"""No locale: a Python launcher would add LC_CTYPE to its own environment."""


def _direct(
    command: list[str], cwd: Path | None = None, *, ignore_hup: bool = False
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        env=ENV,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=_ignore_hup if ignore_hup else _default_hup,
    )


def _launched(
    command: list[str], cwd: Path | None = None, *, ignore_hup: bool = False
) -> subprocess.CompletedProcess[str]:
    executable, args = launch_command(command[0], command[1:])
    return subprocess.run(
        [executable, *args],
        env=ENV,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        start_new_session=True,  # as the MCP SDK starts it
        preexec_fn=_ignore_hup if ignore_hup else _default_hup,
    )


def _default_hup() -> None:
    """SIGHUP at its default in the child, whatever the test run inherited (``nohup``)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _ignore_hup() -> None:
    """As ``nohup`` starts a process."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split(") ")[-1][:1] != "Z"  # a zombie has ended
    except OSError:
        return False


@pytest.mark.parametrize(
    "command",
    [
        ["env"],
        ["printf", "[%s]\\n", "two words", "", "ünïcode", "--flag"],
        ["pwd"],
        ["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"],  # nothing blocked or ignored
        ["sh", "-c", "echo out; echo err >&2; exit 7"],
    ],
    ids=["environment", "arguments", "directory", "signals", "status"],
)
def test_the_server_runs_as_it_would_directly(command: list[str], tmp_path: Path) -> None:
    direct, launched = _direct(command, tmp_path), _launched(command, tmp_path)
    assert (launched.returncode, launched.stdout, launched.stderr) == (
        direct.returncode,
        direct.stdout,
        direct.stderr,
    )
    assert direct.stdout  # the comparison compared something


def test_a_signal_the_launcher_was_given_ignored_stays_ignored_for_the_server() -> None:
    command = ["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"]
    launched = _launched(command, ignore_hup=True)
    assert launched.stdout == _direct(command, ignore_hup=True).stdout
    assert launched.stdout != _direct(command).stdout  # SIGHUP shows as ignored


def test_a_server_killed_by_a_signal_ends_the_launcher_with_its_status() -> None:
    assert _launched(["sh", "-c", "kill -TERM $$"]).returncode == 128 + signal.SIGTERM


def test_a_command_that_cannot_run_fails_as_it_would_directly(tmp_path: Path) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text("not a program")
    runnable = tmp_path / "bin" / "server"
    runnable.parent.mkdir()
    runnable.write_text("#!/bin/sh\nexit 0\n")
    runnable.chmod(runnable.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}
    for command in ["/nonexistent/server", "no-such-server-x9", str(plain), str(tmp_path), "."]:
        with pytest.raises(OSError) as directly:
            subprocess.run([command], env=env, cwd=tmp_path, check=False)
        with pytest.raises(OSError) as checked:
            check_executable(command, env, str(tmp_path))
        assert (type(checked.value), str(checked.value)) == (
            type(directly.value),
            str(directly.value),
        )
    for command in ["server", "./bin/server", str(runnable), "sh"]:
        check_executable(command, env, str(tmp_path))  # found, as subprocess finds them


def test_a_launcher_whose_parent_is_already_gone_runs_nothing(tmp_path: Path) -> None:
    # botd died before the launcher asked to hear of it: its parent is another process.
    marker = tmp_path / "ran"
    _, args = launch_command("touch", [str(marker)])
    args[3] = "1"  # the parent it expects
    finished = subprocess.run([sys.executable, *args], env=ENV, timeout=60, check=False)
    assert finished.returncode == 1 and not marker.exists()


def test_what_the_server_started_ends_with_it() -> None:
    # The server exits at once, leaving a process of its own behind.
    finished = _launched(["sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!"])
    assert finished.returncode == 0
    assert not _alive(int(finished.stdout))


async def test_when_its_parent_is_killed_the_whole_group_goes(tmp_path: Path) -> None:
    # A stand-in for botd starts the launcher, which starts a server that ignores its
    # input ending and has a child; the stand-in is then killed, closing nothing.
    pids = tmp_path / "pids"
    server = f"sleep 1000 >/dev/null 2>&1 & echo $! $$ > {pids}; exec sleep 1000"
    stand_in = (
        "import os, subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-I', '-S', {LAUNCHER!r}, str(os.getpid()),"
        f" 'sh', '-c', {server!r}], start_new_session=True)\n"
        "sys.stdin.read()\n"
    )
    botd = subprocess.Popen([sys.executable, "-c", stand_in], stdin=subprocess.PIPE)
    try:
        await until(lambda: pids.exists() and len(pids.read_text().split()) == 2, "pids")
        child, shell = (int(pid) for pid in pids.read_text().split())
        assert _alive(child) and _alive(shell)
        botd.kill()
        botd.wait(timeout=60)
        await until(lambda: not _alive(child) and not _alive(shell), "the group to end")
    finally:
        botd.kill()
        botd.wait(timeout=60)
        if pids.exists():
            for pid in (int(p) for p in pids.read_text().split()):
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
