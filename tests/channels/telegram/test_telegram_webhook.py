"""Telegram's webhook mode: the real python-telegram-bot, its route on botd's HTTP server,
and the fake Bot API POSTing updates to it as Telegram does (the secret header, again until
answered 200).
"""

from __future__ import annotations

import json
import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from botd.channels.base import Ack
from botd.channels.telegram.adapter import TelegramAdapter
from botd.chat import InboundMessage, Target
from botd.http.routes import HttpServers
from botd.inbound.router import STORE_FAILED_NOTICE, Router
from botd.store.sqlite import DB_FILENAME, SqliteStore
from tests.channels.routed import OPEN
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream
from tests.fakes.anthropic_api import text as answer
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_process import ended, reap, start_daemon
from tests.support.waiting import HANG_GUARD, until

TOKEN = "123456:TEST-TOKEN"
SECRET = "s3cret-token_1"
DM = 777


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramAPI]:
    async with FakeTelegramAPI(TOKEN) as api:
        yield api


class Taken:
    """A router on a real store in front of the adapter, as the daemon wires it: what it
    accepted, and what it told senders."""

    def __init__(self, store: SqliteStore) -> None:
        self.messages: list[InboundMessage] = []
        self.told: list[str] = []
        self.router = Router(store, self._accepted, self._tell, {"telegram": OPEN})

    async def _accepted(self, message: InboundMessage) -> None:
        self.messages.append(message)

    async def _tell(self, target: Target, text: str) -> None:
        self.told.append(text)

    async def sink(self, message: InboundMessage, *, ack: Ack | None = None) -> None:
        await self.router.handle(message, ack=ack)


@pytest.fixture
async def http() -> AsyncIterator[HttpServers]:
    """botd's HTTP servers, which the webhook's route is served on."""
    servers = HttpServers()
    try:
        yield servers
    finally:
        await servers.close()


@pytest.fixture
def store(sqlite_store: SqliteStore) -> SqliteStore:
    """SQLite's store: a refused accept is made by holding its database file's write lock."""
    return sqlite_store


@pytest.fixture
async def hooked(
    fake: FakeTelegramAPI, store: SqliteStore, unused_port: int, http: HttpServers
) -> AsyncIterator[tuple[TelegramAdapter, Taken]]:
    adapter = TelegramAdapter(
        TOKEN,
        offsets=store,
        api_base_url=fake.base_url,
        mode="webhook",
        webhook_url=f"http://127.0.0.1:{unused_port}/tg/hook",
        webhook_secret=SECRET,
        listen=("127.0.0.1", unused_port, "/tg/hook"),
        command_menu=False,
        http=http,
    )
    taken = Taken(store)
    await adapter.start(taken.sink)
    try:
        yield adapter, taken
    finally:
        await adapter.stop()


async def test_updates_come_by_webhook_and_are_answered_once_accepted(
    fake: FakeTelegramAPI, hooked: tuple[TelegramAdapter, Taken], unused_port: int
) -> None:
    adapter, taken = hooked
    [registered] = fake.calls_to("setWebhook")
    assert registered.params["url"] == f"http://127.0.0.1:{unused_port}/tg/hook"
    assert registered.params["secret_token"] == SECRET
    assert int(registered.params["max_connections"]) == 1
    assert not fake.calls_to("getUpdates")  # no polling beside it

    fake.push_text(DM, "hello by webhook")
    await until(lambda: taken.messages, "the message accepted")
    assert [m.text for m in taken.messages] == ["hello by webhook"]
    await until(lambda: fake.webhook_posts, "the POST answered")
    assert fake.webhook_posts == [(1, 200)]

    # Replies go out through the Bot API as in polling mode.
    await adapter.send(Target("telegram", str(DM)), "an answer")
    assert fake.visible(DM)[-1] == "an answer"


async def test_a_post_without_the_secret_is_refused_and_not_taken(
    fake: FakeTelegramAPI, hooked: tuple[TelegramAdapter, Taken]
) -> None:
    _adapter, taken = hooked
    forged = {
        "update_id": 900,
        "message": {
            "message_id": 9,
            "date": 1700000000,
            "chat": {"id": DM, "type": "private", "first_name": "Eve"},
            "from": {"id": DM, "is_bot": False, "first_name": "Eve"},
            "text": "forged",
        },
    }
    assert await fake.post_to_webhook(forged, "wrong-secret") == 403
    assert await fake.post_to_webhook(forged, None) == 403
    assert await fake.post_to_webhook(forged, SECRET[:-1]) == 403

    fake.push_text(DM, "the real one")
    await until(lambda: taken.messages, "the real message accepted")
    assert [m.text for m in taken.messages] == ["the real one"]


async def test_a_store_that_cannot_accept_answers_503_and_telegram_sends_it_again(
    fake: FakeTelegramAPI, hooked: tuple[TelegramAdapter, Taken], tmp_path: Path
) -> None:
    _adapter, taken = hooked
    # Another writer holds the database: the accept cannot commit.
    lock = sqlite3.connect(tmp_path / "store" / DB_FILENAME, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    try:
        fake.push_text(DM, "are you there?")
        await until(lambda: fake.webhook_posts, "the first POST answered")
        assert fake.webhook_posts[0] == (1, 503)
        assert fake.last_error_message.startswith("Wrong response from the webhook: 503")
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    await until(lambda: taken.messages, "the message accepted once the store works")
    await until(lambda: fake.webhook_posts[-1] == (1, 200), "the update answered 200")
    assert [m.text for m in taken.messages] == ["are you there?"]
    assert [status for _, status in fake.webhook_posts].count(200) == 1
    assert taken.told == [STORE_FAILED_NOTICE]  # told once, however often it came


async def test_stopping_leaves_the_webhook_and_its_updates_with_telegram(
    fake: FakeTelegramAPI, store: SqliteStore, unused_port: int, http: HttpServers
) -> None:
    adapter = TelegramAdapter(
        TOKEN,
        api_base_url=fake.base_url,
        mode="webhook",
        webhook_url=f"http://127.0.0.1:{unused_port}/telegram",
        webhook_secret=SECRET,
        listen=("127.0.0.1", unused_port, "/telegram"),
        command_menu=False,
        http=http,
    )
    taken = Taken(store)
    await adapter.start(taken.sink)
    assert http.listening() == [("127.0.0.1", unused_port)]
    await adapter.stop_inbound()
    assert http.listening() == []  # its own address: nothing else is served there
    await adapter.stop()
    fake.push_text(DM, "while botd is down")
    await until(lambda: fake.webhook_posts, "Telegram trying to deliver")
    assert fake.webhook_posts[0][1] != 200
    assert not fake.calls_to("deleteWebhook")
    assert fake.webhook_url  # still set: the update waits with Telegram
    assert taken.messages == []


async def test_the_daemon_answers_a_webhook_update_once_after_the_store_refused_it(
    tmp_path: Path, unused_port: int
) -> None:
    state = tmp_path / "state"
    config = tmp_path / "botd.yaml"
    config.write_text(
        f"""
state_dir: {json.dumps(str(state))}
health: {{enabled: false}}
shutdown_grace: 1
model:
  provider: anthropic
  name: claude-test
  api_key: ${{ANTHROPIC_TEST_KEY}}
  base_url: BASE_URL
  max_retry_wait: 1
channels:
  telegram:
    token: ${{TELEGRAM_TEST_TOKEN}}
    api_base_url: API_URL
    dm_policy: open
    command_menu: false
    mode: webhook
    webhook_url: https://bot.example.org/telegram
    webhook_secret: ${{TELEGRAM_HOOK}}
    listen: {{host: 127.0.0.1, port: {unused_port}, path: /telegram}}
""",
        encoding="utf-8",
    )
    async with (
        FakeTelegramAPI(TOKEN) as telegram,
        FakeAnthropicAPI(api_key="sk-ant-test") as model,
    ):
        text = config.read_text(encoding="utf-8")
        text = text.replace("BASE_URL", model.base_url).replace("API_URL", telegram.base_url)
        config.write_text(text, encoding="utf-8")
        # The reverse proxy: what reaches the public URL goes to botd's listen address.
        telegram.webhook_forward = f"http://127.0.0.1:{unused_port}/telegram"
        daemon = await start_daemon(
            config,
            tmp_path,
            ANTHROPIC_TEST_KEY="sk-ant-test",
            TELEGRAM_TEST_TOKEN=TOKEN,
            TELEGRAM_HOOK=SECRET,
        )
        lock = None
        try:
            await telegram.wait_for_call("setWebhook", timeout=HANG_GUARD)
            assert telegram.webhook_url == "https://bot.example.org/telegram"
            # Another writer holds the database: the accept cannot commit.
            lock = sqlite3.connect(state / DB_FILENAME, isolation_level=None)
            lock.execute("BEGIN IMMEDIATE")
            telegram.push_text(DM, "still there?")
            await until(lambda: telegram.webhook_posts, "the first POST answered")
            assert telegram.webhook_posts[0] == (1, 503)
            # The sender is told once that the message could not be taken.
            await telegram.wait_for_call("sendMessage", 1, ok_only=True, timeout=HANG_GUARD)
            model.push(stream(answer("Yes.")))
            lock.execute("ROLLBACK")
            lock.close()
            lock = None
            await telegram.wait_for_call("sendMessage", 2, ok_only=True, timeout=HANG_GUARD)
            daemon.send_signal(signal.SIGTERM)
            assert await ended(daemon) == 0
        finally:
            if lock is not None:
                lock.execute("ROLLBACK")
                lock.close()
            await reap(daemon)
    sent = [str(c.params["text"]) for c in telegram.calls_to("sendMessage", ok_only=True)]
    assert sent == [STORE_FAILED_NOTICE, "Yes."]
    statuses = [status for _, status in telegram.webhook_posts]
    assert statuses[-1] == 200 and statuses.count(200) == 1
    assert set(statuses[:-1]) == {503}
    assert not telegram.calls_to("deleteWebhook")  # left set at shutdown
