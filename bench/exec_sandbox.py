"""What the ``exec`` tool's sandbox costs: starting a command in bubblewrap, draining a
command that floods its output, and ending one with ``/stop``.

Prints, for ``--runs`` commands each (medians, and the slowest):

* ``true`` run with ``/bin/sh -c`` directly, and in bubblewrap as the tool runs it
  (``run_sandboxed``: namespaces, mounts, rlimits, the info pipe): the sandbox's own cost;
* ``yes`` piped through ``head -c 200M``: the rate at which 200 MB of stdout is read and
  counted past the output cap (the model gets 16 kB);
* a command that started children (``sleep & sleep``), cancelled as ``/stop`` cancels a
  call: from the cancellation until the process group is killed and reaped.

Run: make bench   (or .venv/bin/python bench/exec_sandbox.py [--runs N])
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from botd.agent.tools.exec.bubblewrap import Limits, run_sandboxed, sandbox_problem

LIMITS = Limits(
    wall=120.0, cpu=120, memory=2**30, processes=64, file_bytes=2**20, output_bytes=16_000
)


def _figures(name: str, seconds: list[float], unit: str = "ms") -> None:
    scale = 1000.0 if unit == "ms" else 1.0
    print(
        f"{name:<44} median {statistics.median(seconds) * scale:8.1f} {unit}"
        f"   slowest {max(seconds) * scale:8.1f} {unit}"
    )


async def _plain(command: str) -> None:
    process = await asyncio.create_subprocess_exec("/bin/sh", "-c", command)
    await process.wait()


async def _timed(make: Callable[[], Awaitable[None]], runs: int) -> list[float]:
    spent = []
    for _ in range(runs):
        started = time.perf_counter()
        await make()
        spent.append(time.perf_counter() - started)
    return spent


async def _stopped(workspace: Path) -> float:
    call = asyncio.create_task(
        run_sandboxed("bwrap", workspace, "sleep 600 & sleep 600", LIMITS, network=False)
    )
    await asyncio.sleep(0.2)  # a benchmark, not a test: let the sandbox start
    started = time.perf_counter()
    call.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await call
    return time.perf_counter() - started


async def main(runs: int) -> None:
    problem = sandbox_problem("bwrap")
    if problem is not None:
        print(f"exec sandbox: not measured: {problem}")
        return
    with tempfile.TemporaryDirectory() as directory:
        workspace = Path(directory)
        _figures("true, /bin/sh -c, no sandbox", await _timed(lambda: _plain("true"), runs))

        async def sandboxed_true() -> None:
            await run_sandboxed("bwrap", workspace, "true", LIMITS, network=False)

        _figures("true in bubblewrap (run_sandboxed)", await _timed(sandboxed_true, runs))
        flood = []
        for _ in range(max(1, runs // 10)):
            started = time.perf_counter()
            result = await run_sandboxed(
                "bwrap", workspace, "yes | head -c 200000000", LIMITS, network=False
            )
            flood.append(time.perf_counter() - started)
            assert result.stdout_dropped + len(result.stdout) == 200_000_000
        rate = 200 / statistics.median(flood)
        print(f"{'200 MB of stdout read past the cap':<44} {rate:8.0f} MB/s (median)")
        stops = [await _stopped(workspace) for _ in range(max(1, runs // 10))]
        _figures("/stop: cancelled until killed and reaped", stops)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    asyncio.run(main(parser.parse_args().runs))
