"""One bot's Telegram budget end to end: the whole daemon, the real python-telegram-bot, the
fake Bot API answering 429 past Telegram's limits (``limit_like_telegram``).

At saturation (many DMs at once, status reactions on by default) botd gets no 429 and answers
every message once; in a busy group (a message each time the last one is answered) the
reactions do not count against the group's 20 messages a minute, so every answer goes and
none is refused. What is asserted is what the fake saw, never how long it took.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from tests.cluster.script import ModelScript, answer, prompt
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.telegram_api import FakeTelegramAPI, user
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
            for k in range(DMS):
                telegram.push_text(FIRST_DM + k, prompt(k, 0))

            def answered() -> bool:
                return all(telegram.visible(FIRST_DM + k) for k in range(DMS))

            await until(answered, "every DM answered")
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
