"""A stdio MCP server's process, tied to botd's life (Linux).

The MCP SDK starts a stdio server in a session of its own and, when botd closes it, closes
its stdin, then signals its process group. That leaves two ways for processes to outlive
botd: a child the server started, when the server itself exits on the end of its input
(the group is only signalled if the server is still there), and everything, when botd dies
without closing (SIGKILL, the out-of-memory killer).

So on Linux the SDK starts this file (``python -I -S launcher.py PARENT COMMAND ARGS...``,
see ``launch_command``) instead of the server. It stays as a small supervisor, the leader
of the server's process group, and:

- gets ``SIGTERM`` when botd dies (``PR_SET_PDEATHSIG``); it then kills the processes
  under it and its whole process group with ``SIGKILL``, itself included. Whether botd is
  gone is judged by its parent pid, so a signal sent for another reason (or because the
  thread that started it ended) does not do that, and a botd that died before the
  launcher asked for the signal is noticed as well;
- starts the server as its child, with the pipes the SDK gave it (inherited, never
  copied), the environment it was started with (read back from ``/proc/self/environ``,
  since Python may add ``LC_CTYPE`` to its own), its working directory, its arguments,
  and the signal dispositions it was given; the server gets ``SIGKILL`` if the launcher
  dies (``PR_SET_PDEATHSIG`` again);
- is the child subreaper of what the server starts, so processes whose parent ended come
  to it and are reaped by it;
- when the server exits, sends ``SIGTERM`` to the group, waits ``STOP_GRACE`` seconds for
  every process under it to end, kills what is left, and exits with the server's status.
  The SDK sees it end as it would have seen the server end.

``SIGTERM``, ``SIGINT`` and ``SIGHUP`` from elsewhere (the SDK signals the whole group,
systemd the whole control group) reach the server directly; the launcher keeps waiting for
it. It imports nothing outside the standard library and runs with ``-I -S``: it starts in a
few tens of milliseconds and holds about 10 MB. A process that left the group (a daemon
that called ``setsid``) is waited for and killed as a child of the launcher once its
parent ended; otherwise only systemd's control group reaches it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import sys
import time
from contextlib import suppress

__all__ = ["STOP_GRACE", "check_executable", "launch_command"]

STOP_GRACE = 2.0
"""Seconds the processes the server left behind get between ``SIGTERM`` and ``SIGKILL``
(the SDK gives a server as long)."""
_POLL = 0.01
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def launch_command(command: str, args: list[str]) -> tuple[str, list[str]]:
    """The command and arguments that run ``command args`` through the launcher."""
    launcher = os.path.abspath(__file__)
    return sys.executable, ["-I", "-S", launcher, str(os.getpid()), command, *args]


def check_executable(command: str, env: dict[str, str], cwd: str | None) -> None:
    """Raise the ``OSError`` starting ``command`` directly would raise (``[Errno 2] No such
    file or directory: 'x'``), as the launcher only finds out once it runs.

    ``command`` is searched like ``subprocess`` does: as a path when it has a ``/``, else
    in ``env``'s ``PATH``, relative entries from ``cwd``. A ``cwd`` that is no directory is
    left for the start itself to report."""
    base = cwd or os.getcwd()
    if not os.path.isdir(base):
        return
    if os.path.dirname(command):
        candidates = [command]
    else:
        candidates = [os.path.join(entry, command) for entry in os.get_exec_path(env)]
    refused = False
    for candidate in candidates:
        path = os.path.join(base, candidate)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return
        refused = refused or os.path.exists(path)
    code = errno.EACCES if refused else errno.ENOENT
    raise (PermissionError if refused else FileNotFoundError)(code, os.strerror(code), command)


# --------------------------------------------------------------------------- the launcher


def _prctl(libc: ctypes.CDLL, option: int, value: int) -> None:
    if libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        code = ctypes.get_errno()
        print(f"botd launcher: prctl({option}) failed: {os.strerror(code)}", file=sys.stderr)


def _kill_all() -> None:
    """SIGKILL to the processes left under the launcher, then to its group (itself too)."""
    for child in _children():
        with suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    os.killpg(0, signal.SIGKILL)


def _children() -> list[int]:
    try:
        with open(f"/proc/self/task/{os.getpid()}/children", encoding="ascii") as handle:
            return [int(pid) for pid in handle.read().split()]
    except OSError:
        return []


def _original_environment() -> dict[str, str]:
    """The environment this process was started with, as the kernel keeps it."""
    with open("/proc/self/environ", "rb") as handle:
        entries = handle.read().split(b"\0")
    env: dict[str, str] = {}
    for entry in entries:
        name, sep, value = entry.partition(b"=")
        if sep:
            env[os.fsdecode(name)] = os.fsdecode(value)
    return env


def _start(
    libc: ctypes.CDLL,
    command: str,
    args: list[str],
    env: dict[str, str],
    ignored: set[signal.Signals],
) -> int:
    """Fork the server; in the child, run it (never returns there). ``ignored``: the
    signals the launcher was started with ignored, which the server inherits so."""
    launcher = os.getpid()
    # Blocked until the child has put its handlers back, so none of ours runs in it.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    pid = os.fork()
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return pid
    try:
        # What the launcher was given: its own handlers and Python's SIG_IGN undone.
        for number in (*_STOP_SIGNALS, signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(number, signal.SIG_IGN if number in ignored else signal.SIG_DFL)
        _prctl(libc, _PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != launcher:
            os._exit(1)  # the launcher died before the signal was asked for
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.execvpe(command, [command, *args], env)
    except OSError as exc:
        print(f"botd launcher: cannot run {command}: {exc}", file=sys.stderr, flush=True)
    os._exit(127)


def _wait_for(server: int) -> int:
    """Reap children (the server's orphans too) until ``server`` ends; its wait status."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == server:
            return status


def _end_the_rest() -> None:
    """SIGTERM to the group; SIGKILL to all of it once ``STOP_GRACE`` has passed with
    processes left under the launcher."""
    os.killpg(0, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # nothing is left
        if pid:
            continue
        if time.monotonic() >= deadline:
            _kill_all()  # does not return
        time.sleep(_POLL)


def main(argv: list[str]) -> int:
    parent, command, args = int(argv[0]), argv[1], argv[2:]

    def on_stop(number: int, frame: object) -> None:
        if os.getppid() != parent:  # botd is gone
            _kill_all()
        # Otherwise the server got it too (the group was signalled) and decides.

    # (SIGPIPE and SIGXFSZ are Python's own SIG_IGN: a subprocess child starts without.)
    changed = (*_STOP_SIGNALS, signal.SIGCHLD)
    ignored = {n for n in changed if signal.getsignal(n) == signal.SIG_IGN}
    for number in _STOP_SIGNALS:
        signal.signal(number, on_stop)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # ignored, children would reap themselves
    libc = ctypes.CDLL(None, use_errno=True)
    _prctl(libc, _PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        return 1  # botd died before the launcher asked to hear of it
    _prctl(libc, _PR_SET_CHILD_SUBREAPER, 1)
    server = _start(libc, command, args, _original_environment(), ignored)
    # Only the server holds the SDK's pipes now: when it closes them, the SDK sees the end.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    status = _wait_for(server)
    _end_the_rest()
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
