"""Discord catches up on what it missed (issue 35): the real daemon in-process, discord.py
against the loopback REST API and gateway, the SQLite store kept between two runs.

Messages posted while botd is stopped are answered once each, in order, after it starts
again (read with ``GET /channels/{id}/messages?after=``); one older than ``catch_up``'s age
is not, and the log counts it; a message that arrives live while the history brings it too
is answered once; ``catch_up: off`` reads nothing.
"""

from __future__ import annotations

import logging
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import discord
import pytest

from tests.fakes.discord_api import (
    BOT_ID,
    CHANNEL_ID,
    DM_CHANNEL_ID,
    USER_ID,
    FakeDiscordAPI,
    user,
)
from tests.support.daemon_inprocess import config_yaml, daemon_running, discord_yaml
from tests.support.waiting import until

ALICE = user(USER_ID, "alice")
FOLLOWUP = "agent:\n  queue_mode: followup\n"
"""Each message its own answer, so each shows in the chat."""


def snowflake(ago: timedelta) -> int:
    """A message id made ``ago`` before now."""
    return discord.utils.time_snowflake(datetime.now(UTC) - ago)


def answers(fake: FakeDiscordAPI, channel: int = DM_CHANNEL_ID) -> list[str]:
    return fake.visible(channel)


def inbox_texts(tmp_path: Path) -> list[str]:
    """The texts the daemon accepted, in the order it accepted them."""
    conn = sqlite3.connect(f"file:{tmp_path / 'state' / 'botd.sqlite3'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT json_extract(message, '$.text') FROM inbox ORDER BY id")
        return [str(row[0]) for row in rows]
    finally:
        conn.close()


def config(tmp_path: Path, fake: FakeDiscordAPI, *options: str) -> str:
    section = discord_yaml(fake, "dm_policy: open", "command_menu: false", *options)
    return config_yaml(tmp_path, section, FOLLOWUP)


async def test_messages_posted_while_stopped_are_answered_once_in_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeDiscordAPI() as fake:
        async with daemon_running(config(tmp_path, fake)):
            # Long ago (the mark is old): what came after it is read from there.
            first = fake.message(
                "first",
                channel_id=DM_CHANNEL_ID,
                author=ALICE,
                guild=False,
                message_id=snowflake(timedelta(hours=3)),
            )
            await fake.dispatch_message(first)
            await until(lambda: answers(fake) == ["You said: first"], "the first answer")
        # botd is stopped: one message from two hours ago (past the hour), three now.
        fake.message(
            "too old",
            channel_id=DM_CHANNEL_ID,
            author=ALICE,
            guild=False,
            message_id=snowflake(timedelta(hours=2)),
        )
        missed = [
            fake.message(text, channel_id=DM_CHANNEL_ID, author=ALICE, guild=False)
            for text in ("second", "third", "fourth")
        ]
        caplog.set_level(logging.INFO, logger="botd.channels.catch_up")
        async with daemon_running(config(tmp_path, fake)):
            # The last one also arrives live (Discord's event racing the history read).
            await fake.dispatch_message(missed[-1])
            expected = ["first", "second", "third", "fourth"]
            await until(
                lambda: answers(fake) == [f"You said: {text}" for text in expected],
                "the missed messages answered",
            )
        assert inbox_texts(tmp_path) == expected
        assert any(r.path == f"/channels/{DM_CHANNEL_ID}/messages" for r in fake.requests)
        assert any(
            "3 missed message(s) taken, 1 older than 60 min skipped" in record.getMessage()
            for record in caplog.records
        )


async def test_a_group_where_the_bot_only_listens_is_caught_up_too(tmp_path: Path) -> None:
    bot = user(BOT_ID, "botd", bot=True)
    groups = f'groups: {{"{CHANNEL_ID}": {{require_mention: true}}}}'
    async with FakeDiscordAPI() as fake:
        async with daemon_running(config(tmp_path, fake, groups)):
            await fake.dispatch_message(fake.message("just chatting", author=ALICE))
            await until(lambda: marks(tmp_path) == 1, "the chatter kept, its chat marked")
        fake.message(f"<@{BOT_ID}> are you there?", author=ALICE, mentions=(bot,))
        async with daemon_running(config(tmp_path, fake, groups)):
            await until(lambda: answers(fake, CHANNEL_ID) != [], "the missed mention answered")
        [answer] = answers(fake, CHANNEL_ID)
        assert "just chatting" in answer and answer.endswith("are you there?")


def marks(tmp_path: Path) -> int:
    """How many chats the daemon's store has catch-up marks for."""
    conn = sqlite3.connect(f"file:{tmp_path / 'state' / 'botd.sqlite3'}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM chat_marks").fetchone()[0])
    finally:
        conn.close()


async def test_catch_up_off_reads_nothing(tmp_path: Path) -> None:
    async with FakeDiscordAPI() as fake:
        async with daemon_running(config(tmp_path, fake, "catch_up: off")):
            first = fake.message("first", channel_id=DM_CHANNEL_ID, author=ALICE, guild=False)
            await fake.dispatch_message(first)
            await until(lambda: answers(fake) == ["You said: first"], "the first answer")
        fake.message("missed", channel_id=DM_CHANNEL_ID, author=ALICE, guild=False)
        async with daemon_running(config(tmp_path, fake, "catch_up: off")):
            later = fake.message("later", channel_id=DM_CHANNEL_ID, author=ALICE, guild=False)
            await fake.dispatch_message(later)
            await until(lambda: len(answers(fake)) == 2, "the live message answered")
        assert answers(fake) == ["You said: first", "You said: later"]
        assert fake.history_reads == []
