"""The ``web_fetch`` tool: pages come back as readable markdown, text as is, other types,
refused addresses and compression bombs as one-line error results; in a running botd the
model's call goes through the real Anthropic and Telegram SDKs over the fakes."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
from collections.abc import AsyncIterator
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from botd.agent.tools.base import ToolContext
from botd.agent.tools.web_fetch.tool import WebFetchTool
from botd.cluster.fencing import RunScope
from botd.config import ConfigError, parse_config
from botd.media.sandbox import PAGE_SLOTS, Sandbox
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, tool_use
from tests.fakes.loopback import serve
from tests.fakes.telegram_api import FakeTelegramAPI, user
from tests.media.reading import worker_pids
from tests.support.compressed import MIB, gzip_bomb, peak_allocated, stacked_bomb
from tests.support.daemon_inprocess import (
    HANG_GUARD,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)
from tests.support.waiting import until

PAGE = """<!doctype html><html><head><title>Release notes</title>
<style>body { color: red }</style><script>var secret = "do-not-show";</script></head>
<body><nav>menu</nav><h1>Version 2</h1><p>It is <b>faster</b> and has <a href="/docs">docs</a>.</p>
<ul><li>one</li><li>two</li></ul></body></html>"""

DEEP_PAGE = "<html><body>" + "<div>" * 5000 + "x" + "</div>" * 5000 + "</body></html>"
"""Nested deeper than the markdown converter can walk."""
HEAVY_PAGE = "<html><body>" + "<p>a <b>b</b> <a href='c'>c</a></p>\n" * 40_000 + "</body></html>"
"""About 1.5 MB of markup: seconds of parsing."""

CONTEXT = ToolContext(scope=RunScope("k"), origin=None, call_id="c1")


@pytest.fixture
async def site() -> AsyncIterator[str]:
    async def page(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name == "notes":
            return web.Response(text=PAGE, content_type="text/html")
        if name == "plain":
            return web.Response(text="line one\nline two", content_type="text/plain")
        if name == "data":
            return web.Response(text='{"ok": true}', content_type="application/json")
        if name == "long":
            return web.Response(text="word " * 2000, content_type="text/plain")
        if name == "deep":
            return web.Response(text=DEEP_PAGE, content_type="text/html")
        if name == "heavy":
            return web.Response(text=HEAVY_PAGE, content_type="text/html")
        if name in ("bomb", "stacked"):
            body, encoding = (
                (gzip_bomb(), "gzip") if name == "bomb" else (stacked_bomb(), "gzip, gzip")
            )
            return web.Response(
                body=body, content_type="text/html", headers={"Content-Encoding": encoding}
            )
        return web.Response(body=b"\x89PNG\r\n", content_type="image/png")

    app = web.Application()
    app.router.add_get("/{name}", page)
    runner, port = await serve(app)
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_a_page_is_read_as_markdown_without_its_scripts(site: str) -> None:
    tool = WebFetchTool(allow_hosts=["127.0.0.1"])
    result = await tool.run({"url": f"{site}/notes"}, CONTEXT)
    assert not result.is_error
    assert result.text.startswith(f"URL: {site}/notes\nTitle: Release notes\n")
    assert "# Version 2" in result.text
    assert "It is **faster** and has [docs](/docs)." in result.text
    assert "- one\n- two" in result.text
    assert "do-not-show" not in result.text
    assert "color: red" not in result.text


async def test_a_page_too_deep_or_too_slow_to_parse_is_one_error_line(site: str) -> None:
    deep = await WebFetchTool(allow_hosts=["127.0.0.1"]).run({"url": f"{site}/deep"}, CONTEXT)
    assert deep.is_error
    assert deep.text == f"{site}/deep could not be read: the page is nested too deeply to read"
    # The parsing has a budget of its own; past it the worker is killed. The fetch keeps a
    # long timeout, so a loaded machine's slow loopback fetch is not what runs out.
    slow = WebFetchTool(allow_hosts=["127.0.0.1"], timeout=HANG_GUARD, read_timeout=0.2)
    heavy = await slow.run({"url": f"{site}/heavy"}, CONTEXT)
    assert heavy.is_error
    assert heavy.text == f"{site}/heavy could not be read: reading it took longer than 0.2 s"
    assert worker_pids() == set()


async def test_pages_are_parsed_in_workers_while_dns_lookups_answer(site: str) -> None:
    """More heavy pages than the default thread pool (where DNS lookups run) has threads:
    while their parsing fills every page slot, ``getaddrinfo`` answers."""
    sandbox = Sandbox()
    tool = WebFetchTool(allow_hosts=["127.0.0.1"], sandbox=sandbox)
    count = min(32, (os.cpu_count() or 1) + 4) + 1  # asyncio's default pool size, and one
    # Each for a conversation of its own: one conversation never holds every slot.
    contexts = [
        ToolContext(scope=RunScope(f"k{n}"), origin=None, call_id="c1") for n in range(count)
    ]
    reads = [asyncio.create_task(tool.run({"url": f"{site}/heavy"}, c)) for c in contexts]
    try:
        await until(lambda: len(worker_pids()) == PAGE_SLOTS, "the page slots to fill")
        loop = asyncio.get_running_loop()
        addresses = await asyncio.wait_for(loop.getaddrinfo("localhost", 80), HANG_GUARD)
        assert addresses
        assert not any(read.done() for read in reads)
    finally:
        for read in reads:
            read.cancel()
        await asyncio.gather(*reads, return_exceptions=True)
    await until(lambda: not worker_pids(), "the cancelled workers to be reaped")


async def test_text_types_are_returned_as_they_are(site: str) -> None:
    tool = WebFetchTool(allow_hosts=["127.0.0.1"])
    plain = await tool.run({"url": f"{site}/plain"}, CONTEXT)
    assert plain.text.endswith("\n\nline one\nline two")
    data = await tool.run({"url": f"{site}/data"}, CONTEXT)
    assert data.text.endswith('{"ok": true}')


async def test_long_text_is_cut_and_says_so(site: str) -> None:
    tool = WebFetchTool(allow_hosts=["127.0.0.1"], max_chars=300)
    result = await tool.run({"url": f"{site}/long"}, CONTEXT)
    assert "(Showing the first 300 of 10,000 characters.)" in result.text
    assert result.text.endswith("word " * 60)
    assert result.details["truncated"] is True


async def test_other_types_refused_addresses_and_big_files_are_errors(site: str) -> None:
    image = await WebFetchTool(allow_hosts=["127.0.0.1"]).run({"url": f"{site}/x.png"}, CONTEXT)
    assert image.is_error
    assert image.text == f"{site}/x.png is image/png, not a page or text web_fetch can read"
    refused = await WebFetchTool().run({"url": f"{site}/notes"}, CONTEXT)
    assert refused.is_error
    assert "loopback" in refused.text
    big = await WebFetchTool(allow_hosts=["127.0.0.1"], max_bytes=100).run(
        {"url": f"{site}/notes"}, CONTEXT
    )
    assert big.is_error
    assert "larger than 100 bytes" in big.text


async def test_compression_bombs_are_one_error_line_within_bounded_memory(site: str) -> None:
    tool = WebFetchTool(allow_hosts=["127.0.0.1"], max_bytes=MIB)
    with peak_allocated() as peak:
        bomb = await tool.run({"url": f"{site}/bomb"}, CONTEXT)
        stacked = await tool.run({"url": f"{site}/stacked"}, CONTEXT)
        assert peak() < MIB + 8 * MIB  # the cap and a few MB
    assert bomb.is_error
    assert bomb.text == "the file at 127.0.0.1 is larger than 1,048,576 bytes"
    assert stacked.is_error
    assert stacked.text == (
        "cannot read the file at 127.0.0.1: it came with stacked content encodings "
        "(gzip, gzip), which botd refuses"
    )


def test_a_missing_extra_is_one_config_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name == "bs4" else real(name, package)  # as if not installed

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    text = "agent:\n  tools: [message, web_fetch]\nchannels:\n  console: {}\n"
    with pytest.raises(ConfigError) as error:
        parse_config(text, {})
    rendered = str(error.value)
    assert "agent.tools[1]" in rendered
    assert "the web_fetch tool needs botd[web] (bs4 not installed)" in rendered
    assert "pip install 'botd[web]'" in rendered


def _tool_result(body: dict[str, Any]) -> tuple[bool, str]:
    for message in body["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_result":
                inner = block.get("content", "")
                words = inner if isinstance(inner, str) else "".join(p["text"] for p in inner)
                return bool(block.get("is_error")), words
    raise AssertionError("no tool result in the request")


async def _ask(
    tmp_path: Path, site: str, web_fetch: dict[str, Any], page: str = "notes"
) -> tuple[bool, str]:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        agent = f"agent:\n  tools: [message, web_fetch]\n  web_fetch: {json.dumps(web_fetch)}\n"
        config = config_yaml(
            tmp_path, anthropic_yaml(model), agent, telegram_yaml(telegram, "dm_policy: open")
        )
        call = tool_use("w1", "web_fetch", json.dumps({"url": f"{site}/{page}"}))
        model.push(stream(call, stop_reason="tool_use"), stream(text("read it")))
        async with daemon_running(config):
            telegram.push_text(42, "what is new?", sender=user(42))
            await until(
                lambda: any(
                    c.params["text"] == "read it"
                    for c in telegram.calls_to("sendMessage", ok_only=True)
                ),
                '"read it" sent',
            )
        assert len(model.requests) == 2
        offered = [tool["name"] for tool in model.requests[0].body["tools"]]
        assert "web_fetch" in offered
        return _tool_result(model.requests[1].body)


async def test_the_model_reads_an_allowed_page_through_a_running_botd(
    tmp_path: Path, site: str
) -> None:
    is_error, words = await _ask(tmp_path, site, {"allow_hosts": ["127.0.0.1"]})
    assert not is_error
    assert "# Version 2" in words
    assert "do-not-show" not in words


async def test_a_running_botd_refuses_a_private_address_by_default(
    tmp_path: Path, site: str
) -> None:
    is_error, words = await _ask(tmp_path, site, {})
    assert is_error
    assert words.startswith("refused to fetch from 127.0.0.1: a loopback address")


async def test_a_running_botd_tells_the_model_in_one_line_of_stacked_encodings(
    tmp_path: Path, site: str
) -> None:
    is_error, words = await _ask(tmp_path, site, {"allow_hosts": ["127.0.0.1"]}, page="stacked")
    assert is_error
    assert words == (
        "cannot read the file at 127.0.0.1: it came with stacked content encodings "
        "(gzip, gzip), which botd refuses"
    )
