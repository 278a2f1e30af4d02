"""``botd run`` forked from a warm interpreter, so a test's daemon starts without paying the
imports again.

A fresh ``python -m botd run`` spends one to three seconds of CPU importing its SDKs (the
anthropic package alone is three thousand modules) before it does anything; the tests start
about two hundred daemons. Each test worker therefore keeps one *warm* process that has imported
botd and the SDKs — imported only, nothing called, no thread, no event loop — and forks it for
every daemon a test starts. The child then does what ``python -m botd run`` does from there:
it takes the test's stdin, stdout and stderr, working directory, environment and arguments and
runs ``botd``'s ``__main__``, ending through the interpreter's normal exit.

The test holds the child's real pid: SIGKILL, SIGSTOP and SIGTERM reach the daemon itself, not
a stand-in. The warm process is the child's parent; it reaps it and reports its exit status
over the request's connection, which ``WarmDaemon`` turns into the ``returncode`` and ``wait``
that ``asyncio.subprocess.Process`` offers.

What a fork cannot give is a different interpreter set-up: a daemon whose environment changes a
``PYTHON*`` variable (a plugin on ``PYTHONPATH``) is started cold, as is every daemon when
``BOTD_TEST_COLD_DAEMONS=1``. The tests that are about starting ``botd`` itself (packaging, the
state lock, the console on a terminal) run it cold anyway.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# What the warm process imports: botd's daemon and every SDK a daemon may use. Importing runs
# no botd code beyond module level; nothing here is called before the fork.
WARM_IMPORTS = (
    "botd.cli",
    "botd.app",
    "botd.channels.telegram.adapter",
    "botd.channels.slack.adapter",
    "botd.channels.discord.adapter",
    "botd.agent.providers.anthropic",
    "botd.store.postgres",
    "anthropic",
    "openai",
    "psycopg_pool",
    "mcp",
)

_LENGTH = struct.Struct("!I")


# -- the warm process ---------------------------------------------------------------------


def _warm_up() -> None:
    for name in WARM_IMPORTS:
        # an extra not installed: a daemon that needs it fails as a cold one would
        with contextlib.suppress(ImportError):
            __import__(name)
    # What the imports made lives as long as the process: out of the collector's sight, a
    # child's collections (its last one at exit among them) neither walk it nor copy the
    # pages it shares with us by writing to them, which cost a child 1.5 s of CPU to exit.
    gc.freeze()


def _read_request(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    data, fds, _flags, _address = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < _LENGTH.size:
        data += conn.recv(1 << 16)
    (length,) = _LENGTH.unpack_from(data)
    while len(data) < _LENGTH.size + length:
        data += conn.recv(1 << 16)
    return json.loads(data[_LENGTH.size : _LENGTH.size + length]), fds


def _become_daemon(request: dict[str, object], fds: list[int]) -> None:
    """In the forked child: take the test's files, directory, environment and arguments."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    cwd = str(request["cwd"])
    os.chdir(cwd)
    env = request["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    # The one interpreter setting a child may ask for that the fork can still give: the
    # encoding of its standard streams (a test reading ✓ and ✗ from ``botd doctor``).
    encoding, _, errors = str(env.get("PYTHONIOENCODING", "")).partition(":")
    if encoding or errors:
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(encoding=encoding or None, errors=errors or None)  # type: ignore[union-attr]
    args = request["args"]
    assert isinstance(args, list)
    sys.argv = [str(Path(sys.modules["botd"].__file__ or "").parent / "__main__.py"), *args]
    sys.path[0] = cwd  # as ``python -m`` sets it


def serve(socket_path: str) -> bool:
    """The warm process's loop. Returns True in a forked child, which must then run botd;
    False when the test worker went away (its pipe to our stdin closed)."""
    _warm_up()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "listener")
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "worker")
    running: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, its connection)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _events in selector.select():
            if key.data == "worker":
                if not os.read(sys.stdin.fileno(), 4096):
                    return False
            elif key.data == "listener":
                conn, _ = listener.accept()
                request, fds = _read_request(conn)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    conn.close()
                    for pidfd, (_pid, other) in running.items():
                        os.close(pidfd)
                        other.close()
                    os.close(sys.stdin.fileno())
                    _become_daemon(request, fds)
                    return True
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"{pid}\n".encode())
                pidfd = os.pidfd_open(pid)
                running[pidfd] = (pid, conn)
                selector.register(pidfd, selectors.EVENT_READ, "child")
            else:
                pidfd = int(key.fd)
                pid, conn = running.pop(pidfd)
                selector.unregister(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):  # the test may be gone
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                conn.close()


# -- the test's side ----------------------------------------------------------------------


class WarmDaemon:
    """A daemon forked by the warm process: the part of ``asyncio.subprocess.Process`` the
    tests use (``pid``, ``returncode``, ``wait``, ``send_signal``, ``terminate``, ``kill``)."""

    def __init__(self, pid: int, conn: socket.socket) -> None:
        self.pid = pid
        self._conn = conn
        self._conn.setblocking(False)
        self._received = b""
        self._returncode: int | None = None

    @property
    def returncode(self) -> int | None:
        if self._returncode is None:
            with contextlib.suppress(BlockingIOError, InterruptedError):
                self._take(self._conn.recv(64))
        return self._returncode

    def _take(self, data: bytes) -> None:
        if not data:  # the warm process died: nothing will say how the child ended
            self._returncode = self._returncode if self._returncode is not None else -1
            return
        self._received += data
        if b"\n" in self._received:
            self._returncode = int(self._received.split(b"\n", 1)[0])
            self._conn.close()

    async def wait(self) -> int:
        loop = asyncio.get_running_loop()
        while self.returncode is None:
            self._take(await loop.sock_recv(self._conn, 64))
        assert self._returncode is not None
        return self._returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is not None:
            raise ProcessLookupError(self.pid)
        os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class WarmStarter:
    """One worker's warm process, started on first use and ended with the worker."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._socket_path = ""

    def _started(self, env: dict[str, str]) -> None:
        """Start the warm process (once) with ``env``, the environment every daemon shares."""
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                return
            directory = tempfile.mkdtemp(prefix="botd-warm-")
            self._socket_path = os.path.join(directory, "fork.sock")
            root = Path(__file__).resolve().parents[2]
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.warm_daemons", self._socket_path],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd=root,
                env=env,
            )
            assert process.stdout is not None
            if process.stdout.readline() != b"ready\n":
                raise RuntimeError("the warm botd process did not start")
            self._process = process
            atexit.register(self.close)

    def fits(self, env: dict[str, str], warm_env: dict[str, str]) -> bool:
        """Whether a daemon with ``env`` may be forked from the warm process, which is (or
        will be) started with ``warm_env``: their interpreter set-up (``PYTHON*``) is one."""
        if os.environ.get("BOTD_TEST_COLD_DAEMONS") == "1":
            return False
        return _python_variables(env) == _python_variables(warm_env)

    async def start(
        self,
        args: list[str],
        *,
        cwd: Path,
        env: dict[str, str],
        stderr: int,
        warm_env: dict[str, str],
        stdout: int | None = None,
    ) -> WarmDaemon:
        """Fork ``botd ARGS`` in ``cwd`` with ``env``, stdin on /dev/null, ``stdout`` and
        ``stderr`` (file descriptors; no ``stdout``: /dev/null); the warm process is started
        with ``warm_env`` first."""
        await asyncio.to_thread(self._started, warm_env)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with open(os.devnull, "rb") as stdin, open(os.devnull, "wb") as null:
            await asyncio.to_thread(conn.connect, self._socket_path)
            body = json.dumps({"args": args, "cwd": str(cwd), "env": env}).encode()
            out = null.fileno() if stdout is None else stdout
            socket.send_fds(conn, [_LENGTH.pack(len(body)) + body], [stdin.fileno(), out, stderr])
        pid = await asyncio.to_thread(_read_line, conn)
        return WarmDaemon(int(pid), conn)

    def close(self) -> None:
        with self._lock:
            if self._process is not None:
                assert self._process.stdin is not None
                self._process.stdin.close()
                self._process.wait(timeout=30)
                self._process = None


def _read_line(conn: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        data = conn.recv(1)
        if not data:
            raise RuntimeError("the warm botd process closed the request without a pid")
        line += data
    return line.strip()


def _python_variables(env: dict[str, str]) -> dict[str, str]:
    """The variables that set an interpreter up at its start (``PYTHONIOENCODING`` is left
    out: a forked child sets its streams' encoding itself, ``_become_daemon``)."""
    return {k: v for k, v in env.items() if k.startswith("PYTHON") and k != "PYTHONIOENCODING"}


if __name__ == "__main__":
    if serve(sys.argv[1]):
        from botd.cli import main

        sys.exit(main())
