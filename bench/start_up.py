"""What a botd process costs before it does anything: the CPU of each command's start.

Every ``botd`` a test suite or an operator runs pays for its imports and its set-up first.
This prints, per case, the CPU seconds (user + system) of the process, median and lowest of
``--runs`` runs (a shared machine adds to some runs, never takes away, so the lowest is the
steadiest figure), and for a daemon its peak RSS:

* ``import botd.app``: the daemon's modules alone;
* ``botd check`` of a Telegram + Anthropic config;
* ``botd doctor`` of a console config with the scripted model (no network);
* ``botd status`` with no daemon running;
* ``botd run`` on the console with the scripted model, health off: until READY=1 (read from
  a ``NOTIFY_SOCKET`` here) and once the heap has settled (``SETTLE`` seconds later, when the
  started daemon has collected once and frozen what start-up made);
* ``botd run`` on Telegram with Anthropic, health on, against ``FakeTelegramAPI`` and
  ``FakeAnthropicAPI`` running here: the same two figures.

A daemon's figures are read from its ``/proc`` entry, the others' from ``wait4``. Compare two
checkouts by running this with ``PYTHONPATH`` set to each.

Run: .venv/bin/python bench/start_up.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.health_probe import free_port

BOTD = [sys.executable, "-m", "botd"]
TOKEN = "123456:BENCH-TOKEN"
API_KEY = "sk-ant-bench"
SETTLE = 1.0
"""Seconds after READY=1 before the settled figure is read."""
HANG_GUARD = 120.0
TICK = os.sysconf("SC_CLK_TCK")

Figure = tuple[float, float | None]
"""CPU seconds and peak RSS in MB (a daemon's; None for a command) of one run."""


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update({"NO_PROXY": "127.0.0.1,localhost", "TELEGRAM_TOKEN": TOKEN})
    env["ANTHROPIC_BENCH_KEY"] = API_KEY
    return env


def command(args: Sequence[str], cwd: Path) -> Figure:
    """One command to its end: its CPU (from ``wait4``; its peak RSS there would count what
    it shared with this process before its exec)."""
    process = subprocess.Popen(
        args,
        cwd=cwd,
        env=environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return usage.ru_utime + usage.ru_stime, None


def cpu_and_peak(pid: int) -> Figure:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) / 1024
    return (int(fields[11]) + int(fields[12])) / TICK, peak


async def daemon(config: Path, cwd: Path) -> tuple[Figure, Figure]:
    """``botd run --config CONFIG`` until READY=1 and SETTLE seconds more; then SIGTERM."""
    notify = cwd / "notify.sock"
    notify.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify))
    listener.setblocking(False)
    loop = asyncio.get_running_loop()
    process = await asyncio.create_subprocess_exec(
        *BOTD,
        "run",
        "--config",
        str(config),
        cwd=cwd,
        env={**environment(), "NOTIFY_SOCKET": str(notify)},
        stdin=asyncio.subprocess.PIPE,  # kept open: the console waits for input
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        while b"READY=1" not in await asyncio.wait_for(loop.sock_recv(listener, 4096), HANG_GUARD):
            pass
        ready = cpu_and_peak(process.pid)
        await asyncio.sleep(SETTLE)
        settled = cpu_and_peak(process.pid)
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), HANG_GUARD)
        return ready, settled
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        listener.close()


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def report(name: str, figures: list[Figure]) -> None:
    cpu = [figure[0] for figure in figures]
    peaks = [figure[1] for figure in figures if figure[1] is not None]
    line = f"{name:52s} CPU {statistics.median(cpu):5.2f} s median, {min(cpu):5.2f} s lowest"
    print(line + (f"; peak RSS {statistics.median(peaks):5.1f} MB" if peaks else ""))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per case (default 7)")
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory(prefix="botd-start-up-") as scratch:
        root = Path(scratch)
        console = write(
            root / "console.yaml",
            f"state_dir: {json.dumps(str(root / 'console'))}\nhealth: {{enabled: false}}\n"
            "model: {provider: scripted}\nchannels:\n  console: {enabled: true}\n",
        )
        async with (
            FakeTelegramAPI(TOKEN) as telegram,
            FakeAnthropicAPI(api_key=API_KEY) as model,
        ):
            telegram_config = write(
                root / "telegram.yaml",
                f"state_dir: {json.dumps(str(root / 'telegram'))}\n"
                f"health: {{port: {free_port()}}}\n"
                "model:\n  provider: anthropic\n  name: claude-bench\n"
                "  api_key: ${ANTHROPIC_BENCH_KEY}\n"
                f"  base_url: {json.dumps(model.base_url)}\n"
                "channels:\n  telegram:\n    token: ${TELEGRAM_TOKEN}\n"
                f"    api_base_url: {json.dumps(telegram.base_url)}\n    dm_policy: open\n",
            )
            cases: list[tuple[str, list[str]]] = [
                ("import botd.app", [sys.executable, "-c", "import botd.app"]),
                (
                    "botd check (Telegram + Anthropic)",
                    [*BOTD, "check", "--config", str(telegram_config)],
                ),
                ("botd doctor (console, scripted)", [*BOTD, "doctor", "--config", str(console)]),
                ("botd status (no daemon)", [*BOTD, "status", "--config", str(console)]),
            ]
            for name, args in cases:
                report(name, [await asyncio.to_thread(command, args, root) for _ in range(runs)])
            for name, config in (
                ("botd run (console, scripted, health off)", console),
                ("botd run (Telegram + Anthropic, health on)", telegram_config),
            ):
                figures = [await daemon(config, root) for _ in range(runs)]
                report(f"{name}: READY", [ready for ready, _ in figures])
                report(f"{name}: settled", [settled for _, settled in figures])


if __name__ == "__main__":
    asyncio.run(main())
