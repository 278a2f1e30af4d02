"""Reading files in the sandboxed workers (``botd.media.sandbox``): how fast a dense PDF is
read, and how long other chats wait while PDFs are read.

Prints, with real workers (``python -m botd.media.worker``) under the default budget (30 s):

* a 4.7 MB one-page PDF drawn by 780,000 one-character text operations (issue 38: it took the
  whole 30 s budget with pypdf and gave the model 74 characters; it asks for a few seconds,
  within 5 s): the wall-clock seconds from the job handed to the sandbox to its text, the
  fastest and the median of ``--runs``, and how many of its characters came out;
* six chats each sending ``--files`` of those PDFs at once (their readings queued for the two
  file slots), then a seventh chat's ``web_fetch`` of a page on a loopback server (through the
  real tool, its SSRF guard allowing 127.0.0.1): how much longer the call took than the same
  call on an idle sandbox (issue 38: it waited 31 s; it asks less than 2 s), and how much
  longer the seventh chat's one-page PDF took (it waits for a file slot, after the six chats'
  first PDFs: they were not served yet either);
* the same number of PDFs from one chat: the same two figures (its queue leaves the seventh
  chat's PDF a slot: about no delay).

Run: make bench   (or .venv/bin/python bench/reading.py [--runs N] [--files N]).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from botd.agent.tools.base import ToolContext
from botd.agent.tools.web_fetch.tool import WebFetchTool
from botd.cluster.fencing import RunScope
from botd.media.sandbox import Budget, Sandbox
from tests.fakes.loopback import serve
from tests.media.files import dense_text_pdf, minimal_pdf
from tests.support.waiting import until

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


PAGE = (
    "<!doctype html><html><head><title>Release notes</title></head><body>"
    + "<h2>Changes</h2><ul>"
    + "".join(f"<li>Change {n}: <a href='/c/{n}'>details</a></li>" for n in range(200))
    + "</ul></body></html>"
)


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await call()
    return time.perf_counter() - start


async def others_while_six_chats_read(runs: int, files: int) -> None:
    async def page(_: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    app = web.Application()
    app.router.add_get("/notes", page)
    runner, port = await serve(app)
    try:
        sandbox = Sandbox()
        tool = WebFetchTool(allow_hosts=["127.0.0.1"], sandbox=sandbox)
        url = f"http://127.0.0.1:{port}/notes"
        seventh = ToolContext(scope=RunScope("telegram:7"), origin=None, call_id="c1")
        small = minimal_pdf("A short note")

        async def fetch() -> None:
            result = await tool.run({"url": url}, seventh)
            assert not result.is_error, result.text

        async def small_pdf() -> None:
            await sandbox.pdf_text(small, BUDGET, conversation="telegram:7")

        idle_fetch = statistics.median([await timed(fetch) for _ in range(runs)])
        idle_pdf = statistics.median([await timed(small_pdf) for _ in range(runs)])
        data, _ = dense_text_pdf(OPERATIONS)
        for senders in (range(1, 7), range(1, 2)):
            each = files * 6 // len(senders)  # as many PDFs in all, from six chats or one
            fetch_delays, pdf_delays = [], []
            for _ in range(runs):
                reads = [
                    asyncio.create_task(
                        sandbox.pdf_text(data, BUDGET, conversation=f"telegram:{n}")
                    )
                    for n in senders
                    for _ in range(each)
                ]
                await until(lambda: sandbox.files.held("telegram:1"), "the readings to begin")
                fetch_delays.append(await timed(fetch) - idle_fetch)
                pdf_delays.append(await timed(small_pdf) - idle_pdf)
                for read in reads:  # what is left is not measured: its workers are killed
                    read.cancel()
                await asyncio.gather(*reads, return_exceptions=True)
            print(
                f"{len(senders)} chat(s) x {each} dense PDFs queued: another chat's web_fetch "
                f"took {max(fetch_delays):+.2f} s more than on an idle sandbox "
                f"({idle_fetch:.2f} s; worst of {runs}); its one-page PDF "
                f"{max(pdf_delays):+.2f} s more ({idle_pdf:.2f} s idle; worst of {runs})"
            )
    finally:
        await runner.cleanup()


async def bench(runs: int, files: int) -> None:
    await dense_pdf(runs)
    await others_while_six_chats_read(runs, files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--files", type=int, default=2, help="PDFs each of the six chats sends")
    args = parser.parse_args()
    asyncio.run(bench(args.runs, args.files))


if __name__ == "__main__":
    main()
