"""A command line run in bubblewrap (``bwrap``), within a budget.

``bwrap_argv`` says what the command sees:

* the host's programs and libraries read-only (``/usr`` and the merged-usr links, a few files
  of ``/etc`` a program needs to start: the loader's cache, users and groups, locale, time
  zone, and with network the resolver's files and the CA certificates); everything else of
  the host (``/home``, ``/root``, the rest of ``/etc``, botd's state dir, ``/run``) is not
  there;
* the conversation's workspace at ``/workspace``, its working directory and the only place
  that keeps what is written; a fresh ``/tmp`` (a small tmpfs, gone with the command), a new
  ``/proc`` of its own PID namespace, a minimal ``/dev``; the root itself read-only;
* every namespace of its own (``--unshare-all``: no network, not even loopback), unless the
  network is allowed (``--share-net``); no capability, no nested user namespace, a session
  of its own (``--new-session``: it cannot push input into botd's terminal), killed with
  bwrap (``--die-with-parent``); an environment of a few fixed variables, nothing of botd's.

``run_sandboxed`` starts bwrap in a process group of its own, with rlimits it and the
command inherit (``Limits``: CPU seconds per process, address space, file size; the process
count is set inside the sandbox),
collects stdout and stderr up to a cap each (the rest is read and counted, not kept) and
kills the group at the wall limit or when its task is cancelled (``/stop``), then waits until
it is reaped. Killing bwrap ends the sandbox's first process (``--die-with-parent``), and with
it every process of its PID namespace.

Nothing here runs a command without the sandbox: a missing bwrap, or one that cannot set up
its namespaces (no user namespaces: a unit with ``RestrictNamespaces=yes``, a kernel that
forbids them), is ``SandboxUnavailable`` with one sentence; ``sandbox_problem`` finds the
same before any command (``botd check``, ``botd doctor``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ....workspace import SANDBOX_ROOT

__all__ = [
    "WORKSPACE",
    "CommandResult",
    "Limits",
    "SandboxUnavailable",
    "bwrap_argv",
    "run_sandboxed",
    "sandbox_problem",
]

WORKSPACE = str(SANDBOX_ROOT)
"""Where the conversation's workspace is inside the sandbox (its working directory)."""

_HOST_READ_ONLY = ("/usr", "/opt")
_MERGED_USR_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/locale.alias",
    "/etc/mime.types",
)
_ETC_NETWORK = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
)
_ENVIRONMENT = {
    "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
    "HOME": WORKSPACE,
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
}
_TMP_BYTES = 64 * 1024 * 1024
_READ_CHUNK = 65536
_PROBE_SECONDS = 10.0
_PRLIMIT = shutil.which("prlimit", path="/usr/bin:/bin")
"""util-linux's ``prlimit`` (Debian installs it everywhere), which sets the process limit
inside the sandbox. Set there, after bwrap made the user namespace, the kernel counts the
sandbox's own processes against it; set on bwrap itself, it would count every process of
botd's user, botd's threads included. Without ``prlimit`` it is set on bwrap all the same."""
_SYSTEMD_HINT = "under systemd: botd unit --drop-in exec"


class SandboxUnavailable(Exception):
    """No command can run sandboxed here; the message says why in one sentence."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one command may take."""

    wall: float
    """Seconds from its start until its process group is killed."""
    cpu: int
    """CPU seconds each of its processes may use (the kernel's limit is per process)."""
    memory: int
    """Bytes of address space each of its processes may use."""
    processes: int
    """Processes (and threads) it may run at once, counted within its sandbox (``_PRLIMIT``).
    The kernel does not hold root (uid 0 outside) to it."""
    file_bytes: int
    """The largest file it may write."""
    output_bytes: int
    """Bytes of stdout, and as many of stderr, that are kept; the rest is counted."""


@dataclass(frozen=True, slots=True)
class CommandResult:
    """How a command ended and what it printed (bounded)."""

    status: int | None
    """Its exit status, ``-N`` when signal N ended it; None: killed at the wall limit."""
    stdout: bytes
    stderr: bytes
    stdout_dropped: int = 0
    """Bytes of stdout past ``Limits.output_bytes``, read and not kept."""
    stderr_dropped: int = 0


def bwrap_argv(
    bwrap: str,
    workspace: Path,
    command: str,
    *,
    network: bool,
    info_fd: int | None = None,
    processes: int | None = None,
) -> list[str]:
    """The bwrap command line that runs ``command`` with ``/bin/sh -c`` (see the module);
    with ``processes``, under util-linux's ``prlimit`` inside the sandbox (``_PRLIMIT``)."""
    argv = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns"]
    if network:
        argv.append("--share-net")
    argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv"]
    for name, value in _ENVIRONMENT.items():
        argv += ["--setenv", name, value]
    for path in _HOST_READ_ONLY:
        argv += ["--ro-bind-try", path, path]
    for path in _MERGED_USR_LINKS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        else:
            argv += ["--ro-bind-try", path, path]
    for path in _ETC + (_ETC_NETWORK if network else ()):
        argv += ["--ro-bind-try", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--size", str(_TMP_BYTES), "--tmpfs", "/tmp"]
    argv += ["--bind", str(workspace), WORKSPACE, "--chdir", WORKSPACE]
    argv += ["--remount-ro", "/"]  # the sandbox's own root: nothing new appears beside them
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    shell = ["/bin/sh", "-c", command]
    if processes is not None and _PRLIMIT is not None:
        shell = [_PRLIMIT, f"--nproc={processes}", "--", *shell]
    return [*argv, "--", *shell]


def sandbox_problem(bwrap: str, *, network: bool = False) -> str | None:
    """Why no command can run sandboxed here (one sentence), or None when a trivial one
    does: bwrap is found and sets up the namespaces ``bwrap_argv`` asks for. Blocks for a
    moment (it runs ``true`` in the sandbox)."""
    found = shutil.which(bwrap)
    if found is None:
        return _not_installed(bwrap)
    workspace = Path(os.getcwd())  # bound read-write for the probe only; nothing is written
    argv = bwrap_argv(found, workspace, "true", network=network)
    try:
        done = subprocess.run(
            argv, capture_output=True, timeout=_PROBE_SECONDS, stdin=subprocess.DEVNULL, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _cannot_set_up(found, str(exc))
    if done.returncode != 0:
        return _cannot_set_up(found, _first_line(done.stderr))
    return None


def _cannot_set_up(bwrap: str, why: str) -> str:
    return f"bubblewrap ({bwrap}) cannot set up its sandbox here: {why} ({_SYSTEMD_HINT})"


def _not_installed(bwrap: str) -> str:
    return f"bubblewrap is not installed ({bwrap} not found): apt-get install bubblewrap"


def _first_line(err: bytes) -> str:
    lines = err.decode(errors="replace").strip().splitlines()
    return lines[0][:300] if lines else "it failed without saying why"


def _lower(which: int, limit: int) -> None:
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(which, (limit, limit))


def _limit(limits: Limits) -> None:
    """Runs in the child before bwrap starts: the limits bwrap and the command inherit."""
    _lower(resource.RLIMIT_CORE, 0)
    _lower(resource.RLIMIT_CPU, limits.cpu)
    _lower(resource.RLIMIT_AS, limits.memory)
    if _PRLIMIT is None:
        _lower(resource.RLIMIT_NPROC, limits.processes)
    _lower(resource.RLIMIT_FSIZE, limits.file_bytes)


async def _collect(stream: asyncio.StreamReader, keep: int, kept: bytearray) -> int:
    """Read ``stream`` to its end, keeping its first ``keep`` bytes in ``kept``; the count of
    the bytes not kept."""
    dropped = 0
    while chunk := await stream.read(_READ_CHUNK):
        room = keep - len(kept)
        kept += chunk[:room] if room > 0 else b""
        dropped += max(0, len(chunk) - max(room, 0))
    return dropped


async def run_sandboxed(
    bwrap: str, workspace: Path, command: str, limits: Limits, *, network: bool
) -> CommandResult:
    """Run ``command`` in the sandbox (see the module docstring). Raises
    ``SandboxUnavailable`` when bwrap is missing or cannot set the sandbox up."""
    found = shutil.which(bwrap)
    if found is None:
        raise SandboxUnavailable(_not_installed(bwrap))
    workspace.mkdir(parents=True, exist_ok=True)
    info_read, info_write = os.pipe()
    try:
        process = await asyncio.create_subprocess_exec(
            *bwrap_argv(
                found,
                workspace,
                command,
                network=network,
                info_fd=info_write,
                processes=limits.processes,
            ),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=(info_write,),
            start_new_session=True,  # its own process group, which a kill reaches whole
            preexec_fn=lambda: _limit(limits),
        )
    except BaseException:
        os.close(info_read)
        raise
    finally:
        os.close(info_write)
    assert process.stdout is not None and process.stderr is not None
    out, err = bytearray(), bytearray()
    status: int | None = None
    try:
        async with asyncio.TaskGroup() as group:
            out_dropped = group.create_task(_collect(process.stdout, limits.output_bytes, out))
            err_dropped = group.create_task(_collect(process.stderr, limits.output_bytes, err))
            try:
                async with asyncio.timeout(limits.wall):
                    status = await process.wait()
            except TimeoutError:
                _kill(process)  # the pipes close with the sandbox: the readers end
    finally:  # a cancellation (/stop) or any error: nothing of it outlives the call
        if process.returncode is None:
            _kill(process)
            with contextlib.suppress(ProcessLookupError):
                await asyncio.shield(process.wait())
        info = _drain(info_read)
    if status is not None and not info:  # bwrap said nothing: the sandbox was never set up
        raise SandboxUnavailable(_cannot_set_up(found, _first_line(bytes(err))))
    return CommandResult(status, bytes(out), bytes(err), out_dropped.result(), err_dropped.result())


def _kill(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _drain(fd: int) -> bytes:
    """What bwrap wrote to its info pipe (its writer is closed by now), then the pipe closed."""
    try:
        os.set_blocking(fd, False)
        with contextlib.suppress(BlockingIOError):
            return os.read(fd, 65536)
        return b""
    finally:
        os.close(fd)
