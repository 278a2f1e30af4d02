"""One bot's Telegram budget end to end: the whole daemon, the real python-telegram-bot, the
fake Bot API answering 429 past Telegram's limits (``limit_like_telegram``).

At saturation (many DMs at once, status reactions on by default) botd gets no 429 and answers
every message once; in a busy group (a message each time the last one is answered) the
reactions do not count against the group's 20 messages a minute, so every answer goes and
none is refused; once answers spent a group's limit, no reaction or typing of that group goes
before the answer held back. The limiter is also called as python-telegram-bot calls it
(``BotAPI``): the order calls went in, the class a status line or a final edit is given.
What is asserted is what the fake saw and the order calls went in, never how long it took.
"""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from botd.app import App
from botd.channels.base import SendScope
from botd.channels.budget import Budget, Priority, Window, paced_as, waits_for_turn
from botd.channels.telegram import budget as telegram_budget
from botd.channels.telegram.adapter import TelegramAdapter
from botd.channels.telegram.budget import GROUP as GROUP_WINDOW
from botd.channels.telegram.budget import TelegramBudget
from tests.cluster.script import ModelScript, answer, ask_every_dm, every_dm_answered, prompt
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.telegram_api import FakeTelegramAPI, RateLimits, user
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)
from tests.support.waiting import until

TOKEN = "123456:TEST-TOKEN"
DMS = 60
FIRST_DM = 1000
GROUP = -100777
GROUP_MESSAGES = 16
FORUM = -100888
TOPIC = 10
"""The forum's first topic's id (the General topic's messages carry none)."""
SPENT_GROUP = Window(2, 60.0)
"""A group's limit small enough for two answers to spend it for the rest of a test."""


class BotAPI:
    """What PTB's limiter wraps: each call, recorded as it is made (in the order it went)."""

    def __init__(self, budget: TelegramBudget) -> None:
        self.budget = budget
        self.went: list[tuple[str, Any]] = []

    async def call(self, endpoint: str, chat: int, pace: int | None = None) -> bool:
        async def made() -> bool:
            self.went.append((endpoint, chat))
            return True

        result = await self.budget.process_request(made, (), {}, endpoint, {"chat_id": chat}, pace)
        return result is True


def answers_in_group(telegram: FakeTelegramAPI, count: int) -> bool:
    return len(telegram.visible(GROUP)) == count


async def test_one_node_at_saturation_gets_no_429_and_answers_every_message_once(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        ModelScript(model)
        telegram.limit_like_telegram()
        section = telegram_yaml(telegram, "dm_policy: open")
        async with daemon_running(config_yaml(tmp_path, anthropic_yaml(model), section)):
            ask_every_dm(telegram, FIRST_DM, DMS)
            await until(partial(every_dm_answered, telegram, FIRST_DM, DMS), "every DM answered")
            await until(lambda: len(telegram.reactions) == DMS, "every message's reaction")
        assert telegram.rate_limited == []
        for k in range(DMS):
            assert telegram.visible(FIRST_DM + k) == [answer(prompt(k, 0))]
        # Each message shows done (👍), whether or not its taken reaction went before it.
        assert set(telegram.reactions.values()) == {"👍"}


async def test_a_busy_groups_answers_are_not_held_back_by_reactions(tmp_path: Path) -> None:
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        ModelScript(model)
        telegram.limit_like_telegram()
        section = telegram_yaml(telegram, "groups:", f'  "{GROUP}": {{require_mention: false}}')
        async with daemon_running(config_yaml(tmp_path, anthropic_yaml(model), section)):
            for n in range(GROUP_MESSAGES):
                telegram.push_text(GROUP, prompt(0, n), sender=user(500 + n))
                await until(partial(answers_in_group, telegram, n + 1), f"answer {n}")
            await until(
                lambda: len(telegram.reactions) == GROUP_MESSAGES, "every message's reaction"
            )
        assert telegram.rate_limited == []
        assert telegram.visible(GROUP) == [answer(prompt(0, n)) for n in range(GROUP_MESSAGES)]
        reactions = telegram.calls_to("setMessageReaction", ok_only=True)
        assert len(reactions) >= GROUP_MESSAGES  # decorations went too, uncounted by the group


async def test_no_reaction_goes_to_a_group_before_its_held_back_answer() -> None:
    """The group's 20 messages a minute spent by answers: the next answer waits for the
    window, and so do the group's reactions (they go after it, never before); a reaction in
    another chat goes meanwhile. Called as python-telegram-bot calls its limiter."""
    api = BotAPI(TelegramBudget("1"))
    try:
        for _ in range(GROUP_WINDOW.count):
            assert await api.call("sendMessage", GROUP)
        held = asyncio.create_task(api.call("sendMessage", GROUP))
        await until(lambda: waits_for_turn(held), "the next answer held back by the window")
        reaction = asyncio.create_task(api.call("setMessageReaction", GROUP))
        await until(lambda: waits_for_turn(reaction), "the group's reaction waiting")
        assert await api.call("setMessageReaction", FIRST_DM)  # another chat's goes
        typing = asyncio.create_task(api.call("sendChatAction", GROUP))
        await until(lambda: waits_for_turn(typing), "the group's typing waiting")
        went_so_far = list(api.went)
        held.cancel()  # the answer withdrawn (its conversation stopped): the rest may go
        assert await reaction
        assert await typing
    finally:
        await api.budget.shutdown()
    assert went_so_far == [
        *[("sendMessage", GROUP)] * GROUP_WINDOW.count,
        ("setMessageReaction", FIRST_DM),
    ]
    assert api.went[-2:] == [("setMessageReaction", GROUP), ("sendChatAction", GROUP)]


async def test_a_status_line_goes_after_previews_and_a_final_edit_as_an_answer() -> None:
    """The class the delivery gives a call reaches the budget through PTB's
    ``rate_limit_args``: a status line's post is a ``STATUS``, a final edit an answer."""
    assert paced_as(SendScope(status_line=True)) == Priority.STATUS
    assert paced_as(SendScope(final=True)) == Priority.ANSWER
    assert paced_as(SendScope()) is None
    api = BotAPI(TelegramBudget("1"))
    try:
        assert await api.call("sendMessage", GROUP, paced_as(SendScope(status_line=True)))
        assert await api.call("editMessageText", GROUP, paced_as(SendScope(status_line=True)))
        assert await api.call("editMessageText", GROUP, paced_as(SendScope(final=True)))
        assert await api.call("editMessageText", GROUP)
    finally:
        await api.budget.shutdown()
    assert api.budget.budget.granted == {
        Priority.STATUS: 2,
        Priority.ANSWER: 1,
        Priority.PREVIEW: 1,
    }


def telegram_budget_of(daemon: App) -> Budget:
    assert daemon.runtime is not None
    adapter = daemon.runtime.adapters["telegram"]
    assert isinstance(adapter, TelegramAdapter) and adapter.budget is not None
    return adapter.budget


async def test_a_group_whose_answer_is_held_back_gets_no_reaction_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole daemon, default reactions, a forum group whose topics are conversations of
    their own: once answers spent the group's limit, the next answers wait for it, and a
    message that comes meanwhile gets neither its taken reaction nor "typing…" before its
    answer (nor before the answer held back ahead of it). Telegram refuses nothing."""
    monkeypatch.setattr(telegram_budget, "GROUP", SPENT_GROUP)
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        ModelScript(model)
        telegram.limit_like_telegram(RateLimits(group=(SPENT_GROUP.count, SPENT_GROUP.seconds)))
        section = telegram_yaml(
            telegram, "dm_policy: open", "groups:", f'  "{FORUM}": {{require_mention: false}}'
        )
        config = config_yaml(tmp_path, anthropic_yaml(model), section)
        async with daemon_running(config) as daemon:
            budget = telegram_budget_of(daemon)

            def say(topic: int) -> int:
                """A message in the forum's topic ``TOPIC + topic`` (a conversation of its own)."""
                sent = telegram.push_text(
                    FORUM,
                    prompt(topic, 0),
                    sender=user(700 + topic),
                    is_forum=True,
                    thread_id=TOPIC + topic,
                )
                return int(sent["message_id"])

            for topic in range(SPENT_GROUP.count):
                say(topic)
                await until(partial(answers_in, telegram, topic + 1), f"answer {topic}")
            say(SPENT_GROUP.count)
            await until(lambda: budget.waiting(Priority.ANSWER) == 1, "an answer held back")
            late = say(SPENT_GROUP.count + 1)
            await until(lambda: budget.waiting(Priority.ANSWER) == 2, "its answer held back too")
            # A DM's reactions, asked for after the late message's, go (they would go after
            # the late message's if those did not wait behind the group's answer).
            telegram.push_text(FIRST_DM, prompt(0, 0))
            await until(partial(reacted_in, telegram, FIRST_DM), "the DM's reaction")
            reactions = telegram.calls_to("setMessageReaction")
            typing = telegram.calls_to("sendChatAction")
            refused = list(telegram.rate_limited)
            # Seen what it came for, the test lets the rest go rather than wait out the
            # minute: Telegram's limits lifted, the calls waiting let go (as at a stop).
            telegram.limits = None
            await budget.close()
            await until(partial(answers_in, telegram, SPENT_GROUP.count + 2), "every answer")
            await until(partial(reacted_in, telegram, FORUM, late), "the late message's reaction")
        assert refused == []
        assert [c for c in reactions if str(c.params.get("message_id")) == str(late)] == []
        late_topic = SPENT_GROUP.count + 1
        assert [
            c for c in typing if c.params.get("message_thread_id") in (late_topic, str(late_topic))
        ] == []


def answers_in(telegram: FakeTelegramAPI, count: int) -> bool:
    return len(telegram.visible(FORUM)) == count


def reacted_in(telegram: FakeTelegramAPI, chat: int, message: int | None = None) -> bool:
    """Whether a reaction was set in ``chat`` (on ``message``, when given)."""
    return any(
        str(c.params.get("chat_id")) == str(chat)
        and (message is None or str(c.params.get("message_id")) == str(message))
        for c in telegram.calls_to("setMessageReaction", ok_only=True)
    )
