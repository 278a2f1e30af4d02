"""Model failover, /model and token usage end to end: the real daemon, Telegram's SDK over
the loopback Bot API, the Anthropic SDK over its fake as the primary and the
OpenAI-compatible fake as the fallback."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from botd import wiring
from botd.agent.providers.scripted import ScriptedProvider
from botd.app import App
from botd.config import ConfigError, parse_config, secret_values
from botd.conversation import Conversations
from botd.conversation.models import ModelBook, usage_of
from botd.events import Message
from botd.store import ModelUsage
from botd.store.sqlite import SqliteStore
from tests.conversation.harness import ListSink, inbound, settings, settle
from tests.fakes.anthropic_api import FakeAnthropicAPI, http_error, stream, text, thinking
from tests.fakes.openai_api import ChatStream, ErrorReply, FakeOpenAI
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import ANTHROPIC_KEY, config_yaml, daemon_running
from tests.support.daemon_inprocess import telegram_yaml as telegram_section
from tests.support.health_probe import free_port
from tests.support.waiting import guarded, until

ALICE = 111
BOB = 222
PRIMARY, FALLBACK = "claude-test", "gpt-fake"
OVERLOADED = [http_error(529, "overloaded_error", "Overloaded")] * 4  # a try and 3 retries


@pytest.fixture
async def anthropic_api() -> AsyncIterator[FakeAnthropicAPI]:
    async with FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as api:
        yield api


@pytest.fixture
async def openai_api() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as api:
        yield api


def _config(
    tmp_path: Path,
    telegram: FakeTelegramAPI,
    anthropic_api: FakeAnthropicAPI,
    openai_api: FakeOpenAI,
    *,
    health_port: int = 0,
    thinking_budget: int | None = None,
) -> str:
    # max_retry_wait 0: the primary's retries do not wait, so it gives up at once.
    model = f"""model:
  provider: anthropic
  name: {PRIMARY}
  api_key: {json.dumps(ANTHROPIC_KEY)}
  base_url: {json.dumps(anthropic_api.base_url)}
  max_retry_wait: 0
  thinking: {json.dumps(thinking_budget)}
  fallbacks:
    - provider: openai
      name: {FALLBACK}
      base_url: {json.dumps(openai_api.base_url)}
"""
    health = f"health: {{enabled: true, port: {health_port}}}\n" if health_port else ""
    channel = telegram_section(telegram, "poll_timeout: 1", "dm_policy: open")
    return config_yaml(tmp_path, model, channel, health)


async def _say(daemon: App, telegram: FakeTelegramAPI, text: str) -> str:
    """Send ``text`` to the bot; the one new message it shows in answer."""
    before = len(telegram.visible(ALICE))
    telegram.push_text(ALICE, text)
    await until(lambda: len(telegram.visible(ALICE)) > before, f"an answer to {text!r}")
    # Anything more the run would post, it posts before it ends.
    assert daemon.runtime is not None
    await guarded(daemon.runtime.dispatcher.drain(), f"the run of {text!r} to end")
    new = telegram.visible(ALICE)[before:]
    assert len(new) == 1, new
    return new[0]


async def test_an_overloaded_primary_is_covered_by_the_fallback(
    tmp_path: Path,
    telegram: FakeTelegramAPI,
    anthropic_api: FakeAnthropicAPI,
    openai_api: FakeOpenAI,
) -> None:
    port = free_port()
    anthropic_api.push(*OVERLOADED)
    openai_api.enqueue(
        ChatStream(FALLBACK).text("Hello ", "from the fallback").finish("stop").usage(12, 3)
    )
    config = _config(tmp_path, telegram, anthropic_api, openai_api, health_port=port)
    async with daemon_running(config) as daemon:
        assert await _say(daemon, telegram, "hi") == "Hello from the fallback"
        assert len(anthropic_api.requests) == 4
        status = await _say(daemon, telegram, "/status")
        assert f"Model: {PRIMARY} (agent's); the last answer came from {FALLBACK}." in status
        # The primary is back for the next run, and says what it used.
        anthropic_api.push(
            stream(
                text("Back again"),
                usage={
                    "input_tokens": 20,
                    "output_tokens": 5,
                    "cache_read_input_tokens": 7,
                    "cache_creation_input_tokens": 2,
                },
            )
        )
        assert await _say(daemon, telegram, "again") == "Back again"
        usage = await _say(daemon, telegram, "/usage")
        assert usage.splitlines()[0] == (
            "This conversation: 2 runs, 32 input, 8 output, 7 cache read, 2 cache write tokens."
        )
        assert usage.splitlines()[1].endswith(
            "UTC), this conversation: 2 runs, 32 input, 8 output, 7 cache read, "
            "2 cache write tokens."
        )
        # Another user, in their own chat, sees their own totals and nothing of Alice's.
        telegram.push_text(BOB, "/usage")
        await until(lambda: telegram.visible(BOB), "Bob's /usage answered")
        [bobs] = telegram.visible(BOB)
        assert bobs.splitlines()[0] == (
            "This conversation: 0 runs, 0 input, 0 output, 0 cache read, 0 cache write tokens."
        )
        assert bobs.splitlines()[1].endswith(
            "UTC), this conversation: 0 runs, 0 input, 0 output, 0 cache read, "
            "0 cache write tokens."
        )
        assert "32" not in bobs
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/metrics") as resp,
        ):
            metrics = await resp.text()
    [tokens] = [f for f in text_string_to_metric_families(metrics) if f.name == "botd_tokens"]
    assert tokens.type == "counter"
    samples = {
        (s.labels["model"], s.labels["kind"]): s.value
        for s in tokens.samples
        if s.name == "botd_tokens_total"
    }
    assert samples == {
        (FALLBACK, "input"): 12,
        (FALLBACK, "output"): 3,
        (PRIMARY, "input"): 20,
        (PRIMARY, "output"): 5,
        (PRIMARY, "cache_read"): 7,
        (PRIMARY, "cache_write"): 2,
    }


async def test_the_fallback_gets_none_of_the_primarys_thinking(
    tmp_path: Path,
    telegram: FakeTelegramAPI,
    anthropic_api: FakeAnthropicAPI,
    openai_api: FakeOpenAI,
) -> None:
    anthropic_api.push(
        stream(thinking("deep ", "thought", signature="sig-primary"), text("First answer"))
    )
    config = _config(tmp_path, telegram, anthropic_api, openai_api, thinking_budget=1024)
    async with daemon_running(config) as daemon:
        assert await _say(daemon, telegram, "one") == "First answer"
        anthropic_api.push(*OVERLOADED)
        openai_api.enqueue(ChatStream(FALLBACK).text("Second answer").finish("stop"))
        assert await _say(daemon, telegram, "two") == "Second answer"
    [request] = openai_api.requests
    sent = json.dumps(request.body)
    assert "First answer" in sent  # the conversation goes over
    assert "deep thought" not in sent and "sig-primary" not in sent and "thinking" not in sent


async def test_every_model_failing_is_one_clear_line(
    tmp_path: Path,
    telegram: FakeTelegramAPI,
    anthropic_api: FakeAnthropicAPI,
    openai_api: FakeOpenAI,
) -> None:
    anthropic_api.push(*OVERLOADED)
    openai_api.enqueue(*[ErrorReply(503, {"error": {"message": "busy"}})] * 4)
    async with daemon_running(_config(tmp_path, telegram, anthropic_api, openai_api)) as daemon:
        line = await _say(daemon, telegram, "hi")
    assert "\n" not in line
    assert line.startswith("⚠️ The agent stopped with an error: No model could answer (")
    assert f"anthropic/{PRIMARY}" in line and f"openai/{FALLBACK}: HTTP 503" in line


async def test_model_lists_switches_and_goes_back_across_a_restart(
    tmp_path: Path,
    telegram: FakeTelegramAPI,
    anthropic_api: FakeAnthropicAPI,
    openai_api: FakeOpenAI,
) -> None:
    config = _config(tmp_path, telegram, anthropic_api, openai_api)
    async with daemon_running(config) as daemon:
        assert await _say(daemon, telegram, "/model") == (
            f"Models:\n1: {PRIMARY} (primary) ← current\n2: {FALLBACK} (fallback)\n"
            "/model <name or number> switches; /model default goes back."
        )
        assert await _say(daemon, telegram, "/model 2") == (
            f"This conversation now uses {FALLBACK}; fallbacks: {PRIMARY}."
        )
        openai_api.enqueue(ChatStream(FALLBACK).text("from the chosen one").finish("stop"))
        assert await _say(daemon, telegram, "hi") == "from the chosen one"
        assert await _say(daemon, telegram, "/model nope") == (
            f"Unknown model 'nope'. Configured: 1: {PRIMARY}, 2: {FALLBACK}."
        )
    assert anthropic_api.requests == []

    async with daemon_running(config) as daemon:  # the choice is kept
        listing = await _say(daemon, telegram, "/model")
        assert f"2: {FALLBACK} (fallback) ← current" in listing
        openai_api.enqueue(ChatStream(FALLBACK).text("still the chosen one").finish("stop"))
        assert await _say(daemon, telegram, "after the restart") == "still the chosen one"
        assert await _say(daemon, telegram, "/model default") == (
            f"This conversation now uses {PRIMARY} (the default); fallbacks: {FALLBACK}."
        )
        anthropic_api.push(stream(text("the primary again")))
        assert await _say(daemon, telegram, "and now") == "the primary again"
        assert len(openai_api.requests) == 2

    async with daemon_running(config) as daemon:
        assert f"1: {PRIMARY} (primary) ← current" in await _say(daemon, telegram, "/model")


# ---------------------------------------------------------------- the parts on their own


def test_fallbacks_are_validated_with_their_key_paths(tmp_path: Path) -> None:
    text = """model:
  provider: scripted
  fallbacks:
    - {provider: openai, name: gpt-fake}
    - {provider: anthropic, name: claude-other}
    - {provider: gemini, name: g}
"""
    with pytest.raises(ConfigError) as caught:
        parse_config(text, {})
    found = {p.path: p.message for p in caught.value.problems}
    assert set(found) == {"model.fallbacks[1]", "model.fallbacks[2].provider"}
    assert "needs api_key" in found["model.fallbacks[1]"]


def test_a_fallback_key_is_a_secret_and_settings_default_to_the_primarys() -> None:
    config = parse_config(
        """model:
  provider: anthropic
  api_key: ${PRIMARY_KEY}
  max_retry_wait: 5
  fallbacks:
    - {provider: anthropic, name: claude-b, api_key: "${FALLBACK_KEY}", idle_timeout: 9}
    - {provider: openai, name: gpt-fake}
""",
        {"PRIMARY_KEY": "sk-primary-1", "FALLBACK_KEY": "sk-fallback-2"},
    )
    assert "sk-fallback-2" in secret_values(config)
    assert wiring.fallback_settings(config, 0) == {
        "max_retry_wait": 5.0,
        "idle_timeout": 9.0,
        "api_key": "sk-fallback-2",
    }
    assert wiring.fallback_settings(config, 1)["base_url"] == "https://api.openai.com/v1"
    assert wiring.model_names(config) == ["claude-sonnet-4-5", "claude-b", "gpt-fake"]


async def test_a_choice_the_config_no_longer_has_falls_back_to_the_primary(tmp_path: Path) -> None:
    with SqliteStore.open(tmp_path) as store:
        await store.set_model_choice("telegram:1", "gone-model")
        book = ModelBook(store, ["a", "b"], time.time)
        assert await book.current("telegram:1") == "a"
        assert await book.current("telegram:2") == "a"
        assert (await book.answer("telegram:2", "B")).startswith("This conversation now uses b;")
        assert await store.model_choice("telegram:2") == "b"
        assert (await book.answer("telegram:2", "3")).startswith("Unknown model '3'")
        assert (
            await book.answer("telegram:2", "1")
            == "This conversation now uses a (the default); fallbacks: b."
        )
        assert await store.model_choice("telegram:2") is None


def test_usage_is_counted_per_model_that_answered() -> None:
    def answer(model: str | None, stop: str, **usage: int) -> Message:
        return Message(role="assistant", model=model, stop_reason=stop, usage=usage)

    messages = [
        Message(role="user", content="hi"),
        answer("a", "tool_use", input_tokens=10, output_tokens=2, cache_read_input_tokens=4),
        Message(role="tool_result", content="ok", tool_call_id="t", tool_name="x"),
        answer("b", "end_turn", input_tokens=5, output_tokens=1, cache_creation_input_tokens=3),
        answer("a", "end_turn", input_tokens=1, output_tokens=1),
        answer("c", "error"),  # failed without a token: not an answer
        answer(None, "end_turn"),  # no counts reported: its model answered all the same
    ]
    assert usage_of(messages, "default") == [
        ModelUsage("a", input=11, output=3, cache_read=4),
        ModelUsage("b", input=5, output=1, cache_write=3),
        ModelUsage("default"),
    ]


async def test_a_runs_usage_commits_with_its_last_transcript_write(tmp_path: Path) -> None:
    with SqliteStore.open(tmp_path / "state") as store:
        statements: list[str] = []
        store._connection().set_trace_callback(statements.append)
        manager = Conversations(store, ScriptedProvider(), ListSink(), settings())
        await manager.submit(inbound("hello there"))
        await settle(manager)
        store._connection().set_trace_callback(None)
        transactions: list[list[str]] = []
        for statement in statements:
            if statement.strip().upper().startswith("BEGIN"):
                transactions.append([])
            elif transactions:
                transactions[-1].append(statement)
        [carrying] = [t for t in transactions if any("INTO run_usage" in s for s in t)]
        # No transaction of its own: it rides with the run's assistant message.
        assert any("INSERT INTO messages" in s for s in carrying)
        totals = await store.usage_totals(conversation_key="console:c1")
        assert totals.runs == 1 and totals.input > 0 and totals.output > 0
        assert await store.last_model("console:c1") == "scripted"
