"""The ``web_search`` tool over loopback fakes of SearXNG and the Brave Search API: results as
numbered title, URL and snippet lines, bounded; the service behind the same address check and
size cap as ``web_fetch``; its key sent to it alone; in a running botd the model's next
request carries the results, marked as untrusted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from botd.agent.tools.base import ToolContext
from botd.agent.tools.untrusted import mark_untrusted
from botd.agent.tools.web_search.tool import WebSearchTool
from botd.cluster.fencing import RunScope
from botd.config import ConfigError, parse_config
from botd.config.schema import WebSearchSection
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, tool_use
from tests.fakes.search_api import FakeBrave, FakeSearxng, hit
from tests.fakes.telegram_api import FakeTelegramAPI, user
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)
from tests.support.waiting import until

CONTEXT = ToolContext(scope=RunScope("k"), origin=None, call_id="c1")
KEY = "brave-key-123"
HITS = {
    "botd daemon": [
        hit("botd — chat agents", "https://botd.example/", "botd daemon puts agents in chats"),
        hit("Release &amp; notes", "https://botd.example/news", "Version 2 of the daemon"),
        hit("no URL", "ftp://botd.example/", "left out: not http(s)"),
        hit("Third", "https://third.example/", "x " * 400),
    ]
}


def _searxng(fake: FakeSearxng, **settings: Any) -> WebSearchTool:
    return WebSearchTool(
        WebSearchSection(provider="searxng", base_url=fake.base_url, allow_private=True, **settings)
    )


async def test_searxng_results_are_numbered_titles_urls_and_snippets() -> None:
    async with FakeSearxng(pages=HITS) as fake:
        result = await _searxng(fake).run({"query": " botd   daemon "}, CONTEXT)
        nothing = await _searxng(fake).run({"query": "unheard of"}, CONTEXT)
    assert not result.is_error
    lines = result.text.split("\n")
    assert lines[:7] == [
        "Results for 'botd daemon':",
        "1. botd — chat agents",
        "   https://botd.example/",
        "   botd daemon puts agents in chats",
        "2. Release & notes",
        "   https://botd.example/news",
        "   Version 2 of the daemon",
    ]
    assert lines[7:9] == ["3. Third", "   https://third.example/"]
    assert len(lines[9]) == 3 + 400 and lines[9].endswith("…")  # the snippet cut
    assert result.details == {"status": "ok", "provider": "searxng", "results": 3}
    assert result.untrusted_from == "web search results from searxng"
    assert result.content()[0].model_dump()["text"] == mark_untrusted(
        result.text, "web search results from searxng"
    )
    assert nothing.text == "No results for 'unheard of'." and not nothing.is_error
    assert fake.requests[0].path == "/search"
    assert fake.requests[0].query == {"q": "botd daemon", "format": "json"}


async def test_results_are_bounded_by_max_results() -> None:
    async with FakeSearxng(pages=HITS) as fake:
        result = await _searxng(fake, max_results=1).run({"query": "botd daemon"}, CONTEXT)
    assert result.text.count("\n1. ") == 1 and "\n2. " not in result.text


async def test_brave_gets_its_key_and_count_and_its_markup_is_removed() -> None:
    async with FakeBrave(api_key=KEY, pages=HITS) as fake:
        section = WebSearchSection(
            provider="brave", base_url=fake.base_url, api_key=KEY, allow_private=True
        )
        result = await WebSearchTool(section).run({"query": "botd daemon"}, CONTEXT)
        wrong = WebSearchSection(
            provider="brave", base_url=fake.base_url, api_key="not-it", allow_private=True
        )
        refused = await WebSearchTool(wrong).run({"query": "botd daemon"}, CONTEXT)
    assert "   botd daemon puts agents in chats" in result.text.split("\n")
    assert "<strong>" not in result.text
    assert result.details["results"] == 3
    request = fake.requests[0]
    assert request.path == "/res/v1/web/search"
    assert request.query == {"q": "botd daemon", "count": "5"}
    assert request.headers["X-Subscription-Token"] == KEY
    assert request.headers["Accept"] == "application/json"
    assert refused.is_error
    assert refused.text == "the search failed: 127.0.0.1 answered 401 Unauthorized"
    assert "not-it" not in refused.text


async def test_a_service_on_a_private_address_needs_allow_private() -> None:
    async with FakeSearxng(pages=HITS) as fake:
        section = WebSearchSection(provider="searxng", base_url=fake.base_url)
        result = await WebSearchTool(section).run({"query": "botd daemon"}, CONTEXT)
    assert result.is_error
    assert result.text == (
        "the search failed: refused to fetch from 127.0.0.1: a loopback address; an operator "
        "can allow it with agent.web_search.allow_private"
    )
    assert fake.requests == []


async def test_answers_too_large_or_not_json_are_one_error_line() -> None:
    async with FakeSearxng(pages=HITS) as fake:
        big = await _searxng(fake, max_bytes=100).run({"query": "botd daemon"}, CONTEXT)
        fake.answer = b"<html>not json</html>"
        garbled = await _searxng(fake).run({"query": "botd daemon"}, CONTEXT)
        fake.answer = b'{"results": "none"}'
        shaped = await _searxng(fake).run({"query": "botd daemon"}, CONTEXT)
    assert big.is_error and big.text == (
        "the search failed: the file at 127.0.0.1 is larger than 100 bytes"
    )
    assert garbled.is_error and garbled.text.startswith(
        "the search service's answer could not be read: Expecting value"
    )
    assert shaped.is_error and shaped.text == (
        "the search service's answer could not be read: the answer has no list of results"
    )


@pytest.mark.parametrize(
    ("agent", "words"),
    [
        ("  tools: [web_search]\n", "tools lists web_search: set web_search"),
        (
            "  tools: [web_search]\n  web_search: {provider: searxng}\n",
            "the searxng provider needs base_url",
        ),
        ("  web_search: {provider: brave}\n", "the brave provider needs api_key"),
        (
            "  web_search: {provider: searxng, base_url: 'localhost:8888'}\n",
            "is not an http:// or https:// URL",
        ),
    ],
)
def test_the_config_says_what_a_search_service_needs(agent: str, words: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(f"agent:\n{agent}channels:\n  console: {{}}\n", {})
    assert words in str(error.value)


async def test_the_model_reads_search_results_through_a_running_botd(tmp_path: Path) -> None:
    async with (
        FakeTelegramAPI() as telegram,
        FakeAnthropicAPI(api_key="sk-ant-test") as model,
        FakeSearxng(pages=HITS) as searxng,
    ):
        search = {"provider": "searxng", "base_url": searxng.base_url, "allow_private": True}
        agent = f"agent:\n  tools: [message, web_search]\n  web_search: {json.dumps(search)}\n"
        config = config_yaml(
            tmp_path, anthropic_yaml(model), agent, telegram_yaml(telegram, "dm_policy: open")
        )
        call = tool_use("s1", "web_search", json.dumps({"query": "botd daemon"}))
        model.push(stream(call, stop_reason="tool_use"), stream(text("found it")))
        async with daemon_running(config):
            telegram.push_text(42, "what is botd?", sender=user(42))
            await until(
                lambda: any(
                    c.params["text"] == "found it"
                    for c in telegram.calls_to("sendMessage", ok_only=True)
                ),
                '"found it" sent',
            )
        assert len(model.requests) == 2
        assert "web_search" in [tool["name"] for tool in model.requests[0].body["tools"]]
        last = model.requests[1].body["messages"][-1]
        assert last["role"] == "user"
        (result,) = last["content"]
        assert result["type"] == "tool_result" and not result.get("is_error")
        inner = result["content"]
        words = inner if isinstance(inner, str) else "".join(p["text"] for p in inner)
        assert words.startswith('<untrusted source="web search results from searxng">\n')
        assert "1. botd — chat agents\n   https://botd.example/\n" in words
        assert "2. Release & notes" in words
