"""The page's live updates (``botd.web.live.Live``) over botd's HTTP server: a page that
connects gets each source at once; a source is sent again only when it changed; one poller
reads for every page; ``poke`` reads at once; ``close`` ends every stream."""

from __future__ import annotations

import asyncio

import aiohttp

from botd.http.routes import HttpServers
from botd.web.live import Live
from tests.support.waiting import until


async def read_events(answer: aiohttp.ClientResponse, count: int) -> list[str]:
    """The next ``count`` events of ``answer`` (as ``name data`` lines)."""
    events: list[str] = []
    buffer = ""
    async with asyncio.timeout(30):
        while len(events) < count:
            buffer += (await answer.content.readany()).decode()
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                lines = dict(line.split(": ", 1) for line in block.splitlines())
                events.append(f"{lines['event']} {lines['data']}")
    return events


async def test_pages_get_each_change_once_from_one_poller() -> None:
    value = {"n": 1}
    reads = [0]

    async def counter() -> dict[str, int]:
        reads[0] += 1
        return dict(value)

    async def fixed() -> list[str]:
        return ["same"]

    live = Live({"counter": counter, "fixed": fixed}, interval=3600)
    http = HttpServers()
    route = await http.add("GET", "/api/events", live.stream, host="127.0.0.1", port=0)
    url = f"http://127.0.0.1:{route.port}/api/events"
    try:
        async with (
            aiohttp.ClientSession() as client,
            client.get(url) as first,
            client.get(url) as second,
        ):
            assert first.headers["Content-Type"] == "text/event-stream"
            assert await read_events(first, 2) == ['counter {"n": 1}', 'fixed ["same"]']
            await until(lambda: live.listening() == 2, "both pages listening")
            # The second page got the last values at once, without a read of its own.
            assert await read_events(second, 2) == ['counter {"n": 1}', 'fixed ["same"]']
            before = reads[0]
            value["n"] = 2
            live.poke()
            assert await read_events(first, 1) == ['counter {"n": 2}']  # fixed: unchanged
            assert await read_events(second, 1) == ['counter {"n": 2}']
            assert reads[0] == before + 1  # one read for both pages

            await live.close()
            assert await first.content.read() == b""  # the stream ended
            assert await second.content.read() == b""
    finally:
        await live.close()
        await http.close()
