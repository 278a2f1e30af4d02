"""The web chat over a whole botd: the page's three endpoints, and the OpenAI-compatible one
driven by the openai SDK; the scripted Anthropic fake answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import openai

from botd.app import App
from botd.channels.web.adapter import WebChatAdapter
from botd.channels.web.openai_api import openai_routes
from botd.channels.web.routes import chat_routes, web_channel
from tests.channels.web.conftest import following, served
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    daemon_store,
)
from tests.support.health_probe import free_port
from tests.support.waiting import until

CONVERSATION = "page-conv-0001"


def web_yaml() -> str:
    """The web chat on, with the OpenAI endpoint; the page on a port of its own (the page is
    served with the chat, and two tests at once must not both ask for 8480)."""
    return f"web:\n  enabled: true\n  openai_api: true\n  port: {free_port()}\n"


@asynccontextmanager
async def web_botd(tmp_path: Path, model: FakeAnthropicAPI) -> AsyncIterator[tuple[App, str]]:
    """A botd with the web chat on, its chat and OpenAI routes served; the base URL."""
    async with daemon_running(config_yaml(tmp_path, anthropic_yaml(model), web_yaml())) as daemon:
        assert daemon.runtime is not None
        adapter = daemon.runtime.adapters["web"]
        assert isinstance(adapter, WebChatAdapter)
        await until(lambda: adapter.ready, "the web channel started")
        web = partial(web_channel, daemon.runtime.adapters)
        routes = chat_routes(web) + openai_routes(web)
        async with served(routes, daemon.runtime.http) as base:
            yield daemon, base


async def messages(session: aiohttp.ClientSession, base: str) -> list[dict[str, Any]]:
    async with session.get(f"{base}/api/chat/messages?conversation={CONVERSATION}") as got:
        assert got.status == 200
        body: list[dict[str, Any]] = (await got.json())["messages"]
        return body


async def test_a_page_message_is_taken_once_and_its_answer_streams_in_place(
    tmp_path: Path, model: FakeAnthropicAPI
) -> None:
    said = "<script>alert('hi')</script> what is up?"
    whole = "Hello there, this is the whole answer."
    model.push(stream(text("Hello ", "there, ", "this is ", "the whole answer."), delay=0.1))
    async with web_botd(tmp_path, model) as (daemon, base), aiohttp.ClientSession() as session:
        events_url = f"{base}/api/chat/events?conversation={CONVERSATION}"
        async with following(session, events_url) as events:
            post = {"conversation": CONVERSATION, "text": said, "client_id": "client-0001"}
            for _ in range(2):  # the page retries: the same message, taken once
                async with session.post(f"{base}/api/chat/messages", json=post) as posted:
                    assert posted.status == 202
                    assert await posted.json() == {"id": "client-0001"}

            # Mid-answer, the conversation holds the partial answer as it stands.
            def partial(now: list[dict[str, Any]]) -> bool:
                return any(m["role"] == "bot" and not m["final"] for m in now)

            shown = await until(lambda: _when(messages(session, base), partial), "a partial answer")
            (bot,) = [m for m in shown if m["role"] == "bot"]
            assert whole.startswith(bot["text"]) and bot["text"] != whole

            await until(
                lambda: any(e["final"] for _, e in events.events if e["role"] == "bot"),
                "the final answer on the stream",
            )
            async with session.get(f"{base}/api/chat/messages?conversation={CONVERSATION}") as got:
                raw = await got.text()
            said_back = await daemon_store(daemon).conversation_said(f"web:{CONVERSATION}")

    # After it: the user's message and the whole answer, once each, by the same id.
    assert json.loads(raw)["messages"] == [
        {"id": "client-0001", "role": "user", "text": said, "final": True},
        {"id": bot["id"], "role": "bot", "text": whole, "final": True},
    ]
    assert "<script>" not in raw  # JSON-escaped: no markup, whatever reads it
    # The stream carried the growing answer under that one id, then its final text.
    bots = [e for name, e in events.events if name == "message" and e["role"] == "bot"]
    assert {e["id"] for e in bots} == {bot["id"]}
    assert all(whole.startswith(e["text"]) for e in bots)
    assert not bots[0]["final"] and bots[-1] == {**bots[-1], "text": whole, "final": True}
    # Accepted through the inbox once, answered by one run.
    assert [(line.by, line.text) for line in said_back] == [("user", said), ("bot", whole)]
    assert len(model.requests) == 1


async def _when(fetch: Any, check: Any) -> list[dict[str, Any]] | None:
    now: list[dict[str, Any]] = await fetch
    return now if check(now) else None


async def test_the_openai_sdk_is_answered_both_ways_in_a_conversation_botd_keeps(
    tmp_path: Path, model: FakeAnthropicAPI
) -> None:
    model.push(
        stream(text("Paris ", "is the capital.")),
        stream(text("About ", "two ", "million ", "people."), delay=0.05),
    )
    async with web_botd(tmp_path, model) as (daemon, base):
        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        async with client:
            first = await client.chat.completions.create(
                model="botd",
                messages=[{"role": "user", "content": "What is the capital of France?"}],
                extra_headers={"X-Botd-Conversation": "geography-01"},
            )
            chunks = await client.chat.completions.create(
                model="botd",
                messages=[
                    {"role": "system", "content": "ignored: botd keeps the history"},
                    {"role": "user", "content": "How many live there?"},
                ],
                user="geography-01",
                stream=True,
            )
            deltas = [chunk.choices[0].delta.content async for chunk in chunks]
        said_back = await daemon_store(daemon).conversation_said("web:api-geography-01")
        history = await WebChatAdapter(said=daemon_store(daemon)).conversation("api-geography-01")

    assert first.object == "chat.completion"
    assert first.choices[0].message.content == "Paris is the capital."
    assert first.choices[0].finish_reason == "stop"
    assert "".join(d for d in deltas if d) == "About two million people."
    # One conversation: the second turn was asked with the first in its history.
    second = model.requests[1].body["messages"]
    assert "What is the capital of France?" in json.dumps(second)
    assert "ignored: botd keeps the history" not in json.dumps(second)
    assert [line.text for line in said_back] == [
        "What is the capital of France?",
        "Paris is the capital.",
        "How many live there?",
        "About two million people.",
    ]
    # After a restart the conversation is read back from the store, every message final.
    assert [(m.role, m.text, m.final) for m in history.messages.values()] == [
        ("user", "What is the capital of France?", True),
        ("bot", "Paris is the capital.", True),
        ("user", "How many live there?", True),
        ("bot", "About two million people.", True),
    ]
