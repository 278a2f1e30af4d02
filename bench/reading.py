"""Reading files in the sandboxed workers (``botd.media.sandbox``): how fast a dense PDF is read.

Prints, with real workers (``python -m botd.media.worker``) under the default budget (30 s):

* a 4.7 MB one-page PDF drawn by 780,000 one-character text operations (issue 38: it took the
  whole 30 s budget with pypdf and gave the model 74 characters; it asks for a few seconds,
  within 5 s): the wall-clock seconds from the job handed to the sandbox to its text, the
  fastest and the median of ``--runs``, and how many of its characters came out.

Run: make bench   (or .venv/bin/python bench/reading.py [--runs N]).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from botd.media.sandbox import Budget, Sandbox
from tests.media.files import dense_text_pdf

OPERATIONS = 780_000
BUDGET = Budget.of(30.0)  # media.read_timeout's default


async def dense_pdf(runs: int) -> None:
    data, shown = dense_text_pdf(OPERATIONS)
    sandbox = Sandbox()
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        read = await sandbox.pdf_text(data, BUDGET)
        seconds.append(time.perf_counter() - start)
        whole = "".join(read.text.split()) == shown
    print(
        f"dense PDF ({len(data) / 1e6:.1f} MB, {OPERATIONS:,} text operations): "
        f"read in {min(seconds):.2f} s (median {statistics.median(seconds):.2f} s "
        f"of {runs}), {len(shown):,} characters, whole: {'yes' if whole else 'NO'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(dense_pdf(args.runs))


if __name__ == "__main__":
    main()
