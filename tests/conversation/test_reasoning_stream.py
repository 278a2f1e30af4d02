"""``agent.reasoning: stream``, end to end: the real daemon, python-telegram-bot over the
loopback Bot API and the Anthropic SDK over its fake, streaming thinking blocks.

Each message's reasoning is posted once, as a message of its own, before that message's
answer, and journaled in the outbox like every block; in ``edit`` mode it goes above the
preview; in ``final`` mode it leads the final answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from botd.app import App
from botd.store.sqlite import SqliteStore
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, thinking, tool_use
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    daemon_store,
    telegram_yaml,
)
from tests.support.waiting import until

DM = 777
REASONING = "Reasoning:\nFirst I check.\nThen I answer."
"""How Telegram shows the formatted reasoning (its lines in italics)."""


class Chat:
    def __init__(self, daemon: App, telegram: FakeTelegramAPI) -> None:
        self.daemon, self.telegram = daemon, telegram

    @property
    def store(self) -> SqliteStore:
        return daemon_store(self.daemon)

    async def say(self, words: str, *, answer: str) -> list[str]:
        """Send ``words``; once ``answer`` shows and the run is over, what the bot posted
        since, oldest first."""
        before = len(self.telegram.visible(DM))
        self.telegram.push_text(DM, words)
        await until(lambda: answer in self.telegram.visible(DM)[before:], repr(answer))
        assert self.daemon.runtime is not None
        await asyncio.wait_for(self.daemon.runtime.dispatcher.drain(), 60)
        return self.telegram.visible(DM)[before:]


def _ready(daemon: App) -> bool:
    return daemon.runtime is not None and "telegram" in daemon.runtime.adapters


@asynccontextmanager
async def chat(
    tmp_path: Path, *telegram_options: str
) -> AsyncIterator[tuple[Chat, FakeAnthropicAPI]]:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            "agent:\n  reasoning: stream\n",
            telegram_yaml(telegram, "dm_policy: open", *telegram_options),
        )
        async with daemon_running(config, ready=_ready) as daemon:
            yield Chat(daemon, telegram), model


def thought(signature: str = "sig") -> object:
    return thinking("First I check.\n", "Then I answer.", signature=signature)


async def test_blocks_mode_posts_each_messages_reasoning_before_its_answer(tmp_path: Path) -> None:
    async with chat(tmp_path) as (bot, model):
        model.push(
            stream(
                thinking("I need a tool.", signature="s1"),
                text("Looking."),
                tool_use("t1", "no_such_tool", "{}"),
                stop_reason="tool_use",
            ),
            stream(thought("s2"), text("It is 42.")),
        )
        said = await bot.say("what is it?", answer="It is 42.")
        assert said == ["Reasoning:\nI need a tool.", "Looking.", REASONING, "It is 42."]
        # Journaled in the outbox like every block, in the order posted.
        assert await bot.store.outbox_sent_texts([1]) == [
            "Reasoning:\n_I need a tool._",
            "Looking.",
            "Reasoning:\n_First I check._\n_Then I answer._",
            "It is 42.",
        ]


async def test_blocks_mode_reasoning_is_not_joined_to_coalesced_blocks(tmp_path: Path) -> None:
    coalesce = ["coalesce: {min_chars: 1, max_chars: 2000, idle_ms: 60000}"]
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            "agent:\n  reasoning: stream\n  block_streaming:\n    " + coalesce[0] + "\n",
            telegram_yaml(telegram, "dm_policy: open"),
        )
        async with daemon_running(config, ready=_ready) as daemon:
            bot = Chat(daemon, telegram)
            model.push(stream(thought(), text("It is 42.")))
            assert await bot.say("what is it?", answer="It is 42.") == [REASONING, "It is 42."]


async def test_edit_mode_posts_the_reasoning_above_the_preview(tmp_path: Path) -> None:
    async with chat(tmp_path, "delivery: edit") as (bot, model):
        model.push(stream(thought(), text("It is ", "42.")))
        assert await bot.say("what is it?", answer="It is 42.") == [REASONING, "It is 42."]


async def test_final_mode_leads_the_answer_with_its_reasoning(tmp_path: Path) -> None:
    async with chat(tmp_path, "delivery: final") as (bot, model):
        model.push(stream(thought(), text("It is 42.")))
        assert await bot.say("what is it?", answer="It is 42.") == [REASONING, "It is 42."]


async def test_edit_mode_leaves_out_reasoning_that_would_land_below_the_answer(
    tmp_path: Path,
) -> None:
    async with chat(tmp_path, "delivery: edit") as (bot, model):
        model.push(
            stream(
                thinking("I need a tool.", signature="s1"),
                text("Looking."),
                tool_use("t1", "no_such_tool", "{}"),
                stop_reason="tool_use",
            ),
            stream(thought("s2"), text("It is 42.")),
        )
        said = await bot.say("what is it?", answer="It is 42.")
        # The first step's reasoning came before the preview; the second step's came while
        # the preview showed "Looking.": posted, it would have read as coming after it.
        assert said[0] == "Reasoning:\nI need a tool."
        assert REASONING not in said and said[-1] == "It is 42."
