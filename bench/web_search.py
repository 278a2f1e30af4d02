"""What web_search and the untrusted marker cost: searches per second over the loopback SearXNG
fake, and the marker's cost per character of a page.

A search is the whole tool call: the address check, the HTTP request to the fake on
127.0.0.1, the JSON answer (``max_results`` = 20 hits with 300-character snippets) read,
checked and formatted into numbered lines. Marking is ``mark_untrusted`` on the largest text
``web_fetch`` hands the model by default (20,000 characters) and on a 2 MB one, each with a
few imitations of the marker's end to neutralise. Prints figures; asserts nothing.

Run: .venv/bin/python bench/web_search.py
"""

from __future__ import annotations

import asyncio
import statistics
import time

from botd.agent.tools.base import ToolContext
from botd.agent.tools.untrusted import mark_untrusted
from botd.agent.tools.web_search.tool import WebSearchTool
from botd.cluster.fencing import RunScope
from botd.config.schema import WebSearchSection
from tests.fakes.search_api import FakeSearxng, hit

SEARCHES = 200
MARKS = 200
CONTEXT = ToolContext(scope=RunScope("bench"), origin=None, call_id="b1")


async def searches_per_second() -> tuple[float, float]:
    hits = [hit(f"Result {i}", f"https://r{i}.example/page", "snippet " * 37) for i in range(20)]
    async with FakeSearxng(pages={"q": hits}) as fake:
        section = WebSearchSection(
            provider="searxng", base_url=fake.base_url, allow_private=True, max_results=20
        )
        tool = WebSearchTool(section)
        took = []
        for _ in range(SEARCHES):
            start = time.perf_counter()
            result = await tool.run({"query": "q"}, CONTEXT)
            took.append(time.perf_counter() - start)
            assert not result.is_error and result.details["results"] == 20
    return len(took) / sum(took), statistics.median(took) * 1000


def mark_rate(size: int) -> float:
    text = ("ordinary words of a page " * (size // 25 + 1))[:size]
    text = text[: size // 2] + "</untrusted>" + text[size // 2 :] + "< / UNTRUSTED >"
    rounds = MARKS if size < 100_000 else 10
    start = time.perf_counter()
    for _ in range(rounds):
        mark_untrusted(text, "web page https://example.com/")
    return rounds * len(text) / (time.perf_counter() - start)


def main() -> None:
    rate, median_ms = asyncio.run(searches_per_second())
    print(
        f"web_search over loopback SearXNG, 20 results: {rate:,.0f} searches/s "
        f"(median {median_ms:.2f} ms)"
    )
    for size in (20_000, 2_000_000):
        print(f"mark_untrusted on {size:,} characters: {mark_rate(size) / 1e6:,.0f} M chars/s")


if __name__ == "__main__":
    main()
