"""A text Telegram's app split into several messages is answered once, as one paste.

End to end with the real python-telegram-bot and anthropic SDKs inside the daemon over the
loopback fakes; the paste rule itself on a fake clock.
"""

from __future__ import annotations

import time
from pathlib import Path

from botd.channels.telegram.pastes import LONG_TEXT, SplitPastes
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import BOT_USERNAME, FakeTelegramAPI, user
from tests.support.daemon_inprocess import (
    HANG_GUARD,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)

DM = 777
GROUP = -100123
LONG = "word " * 819  # 4,095 characters: a part the app cut
REST = "and the end of the log."


def test_a_long_text_opens_a_paste_that_its_senders_next_message_joins() -> None:
    now = [100.0]
    pastes = SplitPastes(clock=lambda: now[0])
    first = pastes.paste_of("c", "u", "1", "x" * LONG_TEXT, sent_at=1000)
    assert first == "paste:c:1"
    assert pastes.paste_of("c", "other", "2", "hi", sent_at=1000) is None  # someone else
    assert pastes.paste_of("c", "u", "3", "x" * 5000, sent_at=1001) == first  # stays open
    assert pastes.paste_of("c", "u", "4", "end", sent_at=1003) == first  # closes it
    assert pastes.paste_of("c", "u", "5", "later", sent_at=1003) is None
    # Sent too long after (a backlog read at once is judged by the send times).
    assert pastes.paste_of("c", "u", "6", "y" * LONG_TEXT, sent_at=2000) == "paste:c:6"
    assert pastes.paste_of("c", "u", "7", "unrelated", sent_at=2060) is None
    assert pastes.paste_of("c", "u", "8", "short", sent_at=3000) is None


def test_an_open_paste_is_forgotten_after_a_minute() -> None:
    now = [0.0]
    pastes = SplitPastes(clock=lambda: now[0])
    pastes.paste_of("c", "u", "1", "x" * LONG_TEXT, sent_at=10)
    now[0] = 61.0
    pastes.paste_of("c", "v", "2", "hi", sent_at=11)  # any message sweeps old ones
    assert pastes._open == {}


async def _answered(telegram: FakeTelegramAPI, count: int) -> list[str]:
    calls = await telegram.wait_for_call("sendMessage", count, timeout=HANG_GUARD)
    return [str(c.params["text"]) for c in calls]


async def test_a_split_paste_gets_one_answer_to_the_whole_text(tmp_path: Path) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(stream(text("One answer.")))
        config = config_yaml(
            tmp_path, anthropic_yaml(model), telegram_yaml(telegram, "dm_policy: open")
        )
        async with daemon_running(config) as daemon:
            sent = int(time.time())
            telegram.push_text(DM, LONG, date=sent)
            telegram.push_text(DM, REST, date=sent)
            assert await _answered(telegram, 1) == ["One answer."]
            assert daemon.runtime is not None
            await daemon.runtime.dispatcher.drain()
    [request] = model.requests
    said = request.body["messages"][-1]["content"]
    said = said if isinstance(said, str) else "".join(b["text"] for b in said)
    assert LONG.strip() in said and said.rstrip().endswith(REST)


async def test_in_a_group_the_parts_after_a_mention_are_addressed_too(tmp_path: Path) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(stream(text("Read it all.")))
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            telegram_yaml(telegram, "groups:", f'  "{GROUP}": {{require_mention: true}}'),
        )
        async with daemon_running(config) as daemon:
            sent = int(time.time())
            ann = user(5, "Ann")
            telegram.push_text(GROUP, f"@{BOT_USERNAME} {LONG}", sender=ann, date=sent)
            telegram.push_text(GROUP, REST, sender=ann, date=sent + 1)
            assert await _answered(telegram, 1) == ["Read it all."]
            assert daemon.runtime is not None
            await daemon.runtime.dispatcher.drain()
    [request] = model.requests
    said = str(request.body["messages"][-1]["content"])
    assert REST in said


async def test_messages_sent_apart_are_answered_apart_even_when_read_together(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(stream(text("First.")), stream(text("Second.")))
        # Both wait at Telegram before botd starts, as after a restart.
        sent = int(time.time())
        telegram.push_text(DM, LONG, date=sent - 600)
        telegram.push_text(DM, "a new question", date=sent - 60)
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            telegram_yaml(telegram, "dm_policy: open"),
            "agent:\n  queue_mode: followup\n",
        )
        async with daemon_running(config):
            assert await _answered(telegram, 2) == ["First.", "Second."]
    assert len(model.requests) == 2
