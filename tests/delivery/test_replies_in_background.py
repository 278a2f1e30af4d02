"""A one-shot reply (a command's answer, a pairing code) retried through one chat's outage
holds up no other chat: the channel goes on taking input and answering.

python-telegram-bot hands botd one update at a time, so anything the inbound path waited
for would stall every chat of the bot. Real daemon, real SDK, the loopback Bot API.
"""

from __future__ import annotations

from pathlib import Path

from tests.fakes.telegram_api import FakeTelegramAPI, server_error
from tests.support.daemon_inprocess import HANG_GUARD as GUARD
from tests.support.daemon_inprocess import config_yaml, daemon_running, telegram_yaml
from tests.support.waiting import until

ALICE, BOB, STRANGER = 111, 222, 333


def _config(tmp_path: Path, telegram: FakeTelegramAPI, dm_policy: str) -> str:
    options = ("poll_timeout: 1", f"dm_policy: {dm_policy}", f'allow_from: ["{BOB}"]')
    return config_yaml(tmp_path, telegram_yaml(telegram, *options))


async def _until_visible(telegram: FakeTelegramAPI, chat: int, count: int) -> list[str]:
    await until(
        lambda: len(telegram.visible(chat)) >= count, "len(telegram.visible(chat)) >= count"
    )
    return telegram.visible(chat)


async def test_a_command_answer_being_retried_holds_up_no_other_chat(
    tmp_path: Path, telegram: FakeTelegramAPI
) -> None:
    async with daemon_running(_config(tmp_path, telegram, "open")):
        telegram.fail_next("sendMessage", server_error(502), times=10_000, chat_id=ALICE)
        telegram.push_text(ALICE, "/status")
        await telegram.wait_for_call("sendMessage", 1, timeout=GUARD)  # Alice's, failing
        telegram.push_text(BOB, "hello")
        assert await _until_visible(telegram, BOB, 1) == ["You said: hello"]
        assert telegram.visible(ALICE) == []  # still being retried
        telegram.clear_faults()  # Alice's chat is reachable again
        [status] = await _until_visible(telegram, ALICE, 1)
        assert status.startswith("No conversation yet")
    assert telegram.visible(ALICE) == [status]  # once


async def test_a_pairing_reply_being_retried_holds_up_no_other_chat(
    tmp_path: Path, telegram: FakeTelegramAPI
) -> None:
    async with daemon_running(_config(tmp_path, telegram, "pairing")):
        telegram.fail_next("sendMessage", server_error(503), times=10_000, chat_id=STRANGER)
        telegram.push_text(STRANGER, "let me in")
        await telegram.wait_for_call("sendMessage", 1, timeout=GUARD)
        telegram.push_text(BOB, "hello")
        assert await _until_visible(telegram, BOB, 1) == ["You said: hello"]
        telegram.clear_faults()
        [offer] = await _until_visible(telegram, STRANGER, 1)
        assert "pairing code" in offer
