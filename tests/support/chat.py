"""One-line behaviour tests: a person's Telegram DM with botd.

    async def test_echo(chat: Chat) -> None:
        await chat.send("hi")
        assert await chat.reply() == "You said: hi"

``chat`` (the fixture in ``tests/conftest.py``) is botd's whole daemon in the test's event loop
(``tests/support/daemon_inprocess.py``) with the real python-telegram-bot against the loopback
Bot API (``tests/fakes/telegram_api.py``), the scripted model and an open DM policy. A test that
needs other settings or the real anthropic SDK opens its own with :func:`chatting`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from botd.app import App
from botd.store.sqlite import SqliteStore
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    daemon_store,
    telegram_yaml,
)
from tests.support.waiting import guarded, until

DM = 777
"""The chat (and the person) of the DM: a Telegram private chat's id is its user's."""


class Chat:
    """A person's DM with a running botd: what they send, and the bot's messages in the DM
    read in order, each once."""

    def __init__(self, daemon: App, telegram: FakeTelegramAPI, chat_id: int = DM) -> None:
        self.daemon, self.telegram, self.chat_id = daemon, telegram, chat_id
        self.read = len(telegram.visible(chat_id))
        """How many of the bot's messages in the chat the test has read (those shown before
        this botd ran count as read)."""

    async def send(self, text: str) -> None:
        """``text`` sent by the person, as Telegram hands it to the bot's next poll."""
        self.telegram.push_text(self.chat_id, text)

    async def idle(self) -> None:
        """Wait (hang-guarded) until no conversation of botd's has work left."""
        assert self.daemon.runtime is not None
        await guarded(self.daemon.runtime.dispatcher.drain(), "botd to finish its runs")

    @property
    def store(self) -> SqliteStore:
        """The running daemon's store."""
        return daemon_store(self.daemon)

    def shown(self) -> list[str]:
        """The texts of the bot's messages in the chat as they show now, oldest first."""
        return self.telegram.visible(self.chat_id)

    def unread(self) -> list[str]:
        """The bot's messages in the chat shown now that the test has not read."""
        return self.shown()[self.read :]

    async def reply(self) -> str:
        """The bot's next message in the chat not read yet, as it shows once botd is idle
        (a streamed answer has had its last edit)."""
        await until(lambda: len(self.shown()) > self.read, f"reply {self.read + 1} in the chat")
        await self.idle()
        self.read += 1
        return self.shown()[self.read - 1]


def telegram_ready(daemon: App) -> bool:
    """Whether ``daemon`` is polling Telegram."""
    return daemon.runtime is not None and "telegram" in daemon.runtime.adapters


@asynccontextmanager
async def chatting(
    tmp_path: Path,
    telegram: FakeTelegramAPI,
    *,
    model: FakeAnthropicAPI | None = None,
    telegram_options: Sequence[str] = ("dm_policy: open",),
    sections: Sequence[str] = (),
) -> AsyncIterator[Chat]:
    """botd running over ``telegram`` (its section's lines ``telegram_options``) and answering
    with the scripted model, or through the anthropic SDK with ``model``; ``sections``: more
    of the config. The DM with it until the block ends."""
    parts = [telegram_yaml(telegram, "poll_timeout: 1", *telegram_options), *sections]
    if model is not None:
        parts.insert(0, anthropic_yaml(model))
    async with daemon_running(config_yaml(tmp_path, *parts), ready=telegram_ready) as daemon:
        yield Chat(daemon, telegram)
