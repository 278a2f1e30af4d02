"""A one-shot reply (a command's answer, a pairing code) retried through one chat's outage
holds up no other chat: the channel goes on taking input and answering.

python-telegram-bot hands botd one update at a time, so anything the inbound path waited
for would stall every chat of the bot. Real daemon, real SDK, the loopback Bot API.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from botd.config import parse_config
from botd.daemon import Daemon
from tests.fakes.telegram_api import FakeTelegramAPI, server_error

TOKEN = "123456:TEST-TOKEN"
GUARD = 60.0  # seconds: a hang guard only
ALICE, BOB, STRANGER = 111, 222, 333


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegramAPI]:
    async with FakeTelegramAPI(TOKEN) as api:
        yield api


async def _running(
    tmp_path: Path, telegram: FakeTelegramAPI, dm_policy: str
) -> tuple[Daemon, asyncio.Task[int]]:
    config = parse_config(
        f"""
state_dir: {json.dumps(str(tmp_path / "state"))}
channels:
  telegram:
    token: {json.dumps(TOKEN)}
    api_base_url: {json.dumps(telegram.base_url)}
    poll_timeout: 1
    dm_policy: {dm_policy}
    allow_from: ["{BOB}"]
""",
        {},
    )
    daemon = Daemon(config, env={})
    task = asyncio.create_task(daemon.run())
    async with asyncio.timeout(GUARD):
        while not telegram.calls_to("getUpdates"):
            await asyncio.sleep(0.02)
    return daemon, task


async def _stopped(daemon: Daemon, task: asyncio.Task[int]) -> None:
    daemon.request_stop()
    assert await asyncio.wait_for(task, GUARD) == 0


async def _until_visible(telegram: FakeTelegramAPI, chat: int, count: int) -> list[str]:
    async with asyncio.timeout(GUARD):
        while len(telegram.visible(chat)) < count:
            await asyncio.sleep(0.02)
    return telegram.visible(chat)


async def test_a_command_answer_being_retried_holds_up_no_other_chat(
    tmp_path: Path, telegram: FakeTelegramAPI
) -> None:
    daemon, task = await _running(tmp_path, telegram, "open")
    try:
        telegram.fail_next("sendMessage", server_error(502), times=10_000, chat_id=ALICE)
        telegram.push_text(ALICE, "/status")
        await telegram.wait_for_call("sendMessage", 1, timeout=GUARD)  # Alice's, failing
        telegram.push_text(BOB, "hello")
        assert await _until_visible(telegram, BOB, 1) == ["You said: hello"]
        assert telegram.visible(ALICE) == []  # still being retried
        telegram.clear_faults()  # Alice's chat is reachable again
        [status] = await _until_visible(telegram, ALICE, 1)
        assert status.startswith("No conversation yet")
    finally:
        await _stopped(daemon, task)
    assert telegram.visible(ALICE) == [status]  # once


async def test_a_pairing_reply_being_retried_holds_up_no_other_chat(
    tmp_path: Path, telegram: FakeTelegramAPI
) -> None:
    daemon, task = await _running(tmp_path, telegram, "pairing")
    try:
        telegram.fail_next("sendMessage", server_error(503), times=10_000, chat_id=STRANGER)
        telegram.push_text(STRANGER, "let me in")
        await telegram.wait_for_call("sendMessage", 1, timeout=GUARD)
        telegram.push_text(BOB, "hello")
        assert await _until_visible(telegram, BOB, 1) == ["You said: hello"]
        telegram.clear_faults()
        [offer] = await _until_visible(telegram, STRANGER, 1)
        assert "pairing code" in offer
    finally:
        await _stopped(daemon, task)
