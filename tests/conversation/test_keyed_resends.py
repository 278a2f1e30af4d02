"""A crash between a reply's send and its sent mark, on the platforms that can tell a piece
sent again (Discord's nonce) or find it (Slack's message metadata): after the restart the
chat shows the reply once.

Each process is one real store, the real conversations and delivery, and the real adapter
(discord.py, slack_sdk) against its loopback fake; the model is the scripted one, which
echoes. The crash is the promise machine's: the send lands on the platform but its answer
never comes back (the connection is reset), the database is copied as a crash leaves it
(what is committed: the piece written, not sent), the process is dropped and a new one opens
the copy and resumes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from botd.agent.loop import LoopConfig
from botd.agent.providers.scripted import ScriptedProvider
from botd.channels.base import Ack, ChannelAdapter
from botd.chat import InboundMessage, PieceKey, Target
from botd.conversation import Conversations, SessionSettings
from botd.conversation.dispatcher import Dispatcher
from botd.delivery import ChannelDelivery
from botd.delivery.retrying import Retrier, RetrySettings
from botd.store.sqlite import DB_FILENAME, SqliteStore
from botd.subscriber import ChunkingConfig, SubscriberConfig
from tests.channels.discord.harness import make_adapter as discord_adapter
from tests.channels.slack.harness import slack_adapter
from tests.conversation.harness import dispatching
from tests.fakes.discord_api import FakeDiscordAPI
from tests.fakes.slack_api import FakeSlack
from tests.support.waiting import until

DISCORD_CHANNEL = 1300000000000000077
SLACK_CHANNEL = "C0KEYED"
ANSWER = "You said: keep this once"


@dataclass
class Process:
    store: SqliteStore
    conversations: Conversations
    dispatcher: Dispatcher
    adapter: ChannelAdapter


class Dying:
    """The first process's retry wait: it lasts until the crash, then the process is gone."""

    def __init__(self) -> None:
        self.crashed = asyncio.Event()

    async def sleep(self, _seconds: float) -> None:
        await self.crashed.wait()
        raise ProcessGone


class ProcessGone(Exception):
    """What every call of a crashed process meets."""


async def _no_wait(_seconds: float) -> None:
    await asyncio.sleep(0)


@asynccontextmanager
async def process(
    state: Path, adapter: ChannelAdapter, *, sleep: Callable[[float], object]
) -> AsyncIterator[Process]:
    """One botd process over ``state``: its channel started, then its dispatcher (whose
    first poll resumes what the state holds unfinished)."""
    store = SqliteStore.open(state)
    delivery = ChannelDelivery(
        {adapter.name: adapter},
        retrier=Retrier(RetrySettings(budget=3600, first=0, cap=0), sleep=sleep),  # type: ignore[arg-type]
    )
    settings = SessionSettings(
        loop=LoopConfig(model="scripted"),
        subscriber=SubscriberConfig(chunking=ChunkingConfig(1, 4000)),
        typing_delay=3600,
    )
    conversations = Conversations(store, ScriptedProvider(), delivery, settings)
    try:

        async def sink(_message: InboundMessage, *, ack: Ack | None = None) -> None:
            return None

        await adapter.start(sink)
        async with dispatching(conversations, store) as dispatcher:
            yield Process(store, conversations, dispatcher, adapter)
    finally:
        await conversations.close(grace=0)
        await adapter.stop()
        store.close()


def crash_copy(state: Path, into: Path) -> Path:
    """The database as a crash leaves it: what is committed, nothing else."""
    into.mkdir()
    source = sqlite3.connect(state / DB_FILENAME)
    copy = sqlite3.connect(into / DB_FILENAME)
    try:
        source.backup(copy)
    finally:
        copy.close()
        source.close()
    return into


def pieces(state: Path) -> list[tuple[str, str]]:
    db = sqlite3.connect(state / DB_FILENAME)
    try:
        rows = db.execute("SELECT state, text FROM outbox ORDER BY id").fetchall()
    finally:
        db.close()
    return [(str(row[0]), str(row[1])) for row in rows]


async def accept(store: SqliteStore, channel: str, chat_id: str) -> InboundMessage:
    message = InboundMessage(
        channel=channel,
        chat_id=chat_id,
        sender_id="u1",
        text="keep this once",
        message_id="m1",
        conversation_key=f"{channel}:{chat_id}",
        is_direct=True,
    )
    inbox_id = await store.accept_inbound(channel, [message.message_id], message)
    assert inbox_id is not None
    return replace(message, inbox_id=inbox_id)


async def crash_after_landing(
    tmp_path: Path, adapter: ChannelAdapter, channel: str, chat_id: str, landed: Callable[[], bool]
) -> Path:
    """Run the first process until its reply's send landed and its answer was lost; return
    the database a crash at that moment leaves."""
    first, dying = tmp_path / "first", Dying()
    async with process(first, adapter, sleep=dying.sleep) as alive:
        message = await accept(alive.store, channel, chat_id)
        await alive.dispatcher.arrived(message)
        await until(landed, "the reply's send to land")
        crashed = crash_copy(first, tmp_path / "crashed")
        dying.crashed.set()
    assert pieces(crashed) == [("pending", ANSWER)]  # written, never confirmed
    return crashed


async def test_discord_a_reply_that_landed_before_a_crash_is_shown_once(tmp_path: Path) -> None:
    async with FakeDiscordAPI() as fake:
        fake.reset_next("POST", land=True)
        crashed = await crash_after_landing(
            tmp_path,
            discord_adapter(fake),
            "discord",
            str(DISCORD_CHANNEL),
            lambda: bool(fake.faulted),
        )
        assert fake.visible(DISCORD_CHANNEL) == [ANSWER]

        async with process(crashed, discord_adapter(fake), sleep=_no_wait) as again:
            await again.dispatcher.drain()
        assert fake.visible(DISCORD_CHANNEL) == [ANSWER]
        assert len(fake.nonce_repeats) == 1  # sent again, recognised by its nonce
        assert pieces(crashed) == [("sent", ANSWER)]


async def test_slack_a_reply_that_landed_before_a_crash_is_found_not_posted_again(
    tmp_path: Path,
) -> None:
    async with FakeSlack(clock=time.time) as fake:
        fake.reset_next("chat.postMessage", land=True)
        crashed = await crash_after_landing(
            tmp_path,
            slack_adapter(fake),
            "slack",
            SLACK_CHANNEL,
            lambda: bool(fake.posted(SLACK_CHANNEL)),
        )
        assert [m["text"] for m in fake.posted(SLACK_CHANNEL)] == [ANSWER]

        async with process(crashed, slack_adapter(fake), sleep=_no_wait) as again:
            await again.dispatcher.drain()
        assert [m["text"] for m in fake.posted(SLACK_CHANNEL)] == [ANSWER]
        assert fake.calls_to("conversations.history")  # looked for it first
        assert pieces(crashed) == [("sent", ANSWER)]


async def test_slack_a_reply_that_never_landed_is_posted_once_after_the_look(
    tmp_path: Path,
) -> None:
    async with FakeSlack(clock=time.time) as fake:
        fake.reset_next("chat.postMessage")  # refused before Slack took it
        crashed = await crash_after_landing(
            tmp_path,
            slack_adapter(fake),
            "slack",
            SLACK_CHANNEL,
            lambda: bool(fake.calls_to("chat.postMessage")),
        )
        assert fake.visible(SLACK_CHANNEL) == []

        async with process(crashed, slack_adapter(fake), sleep=_no_wait) as again:
            await again.dispatcher.drain()
        assert fake.visible(SLACK_CHANNEL) == [ANSWER]
        assert fake.calls_to("conversations.history")  # looked first, found nothing
        assert pieces(crashed) == [("sent", ANSWER)]


def keyed_delivery(adapter: ChannelAdapter) -> ChannelDelivery:
    return ChannelDelivery(
        {adapter.name: adapter},
        retrier=Retrier(RetrySettings(budget=3600, first=0, cap=0), sleep=_no_wait),
    )


async def test_discord_a_retry_after_a_send_that_landed_shows_it_once() -> None:
    async with FakeDiscordAPI() as fake:
        adapter = discord_adapter(fake)

        async def sink(_message: InboundMessage, *, ack: Ack | None = None) -> None:
            return None

        await adapter.start(sink)
        try:
            fake.reset_next("POST", land=True)
            target = Target("discord", str(DISCORD_CHANNEL))
            await keyed_delivery(adapter).send_text(target, ANSWER, piece=PieceKey.of(7, ANSWER))
        finally:
            await adapter.stop()
        assert fake.visible(DISCORD_CHANNEL) == [ANSWER]
        assert len(fake.nonce_repeats) == 1


async def test_slack_a_retry_after_a_send_that_landed_looks_first_and_posts_nothing() -> None:
    async with FakeSlack(clock=time.time) as fake:
        adapter = slack_adapter(fake)
        await adapter.start(_ignore)
        try:
            fake.reset_next("chat.postMessage", land=True)
            target = Target("slack", SLACK_CHANNEL)
            await keyed_delivery(adapter).send_text(target, ANSWER, piece=PieceKey.of(7, ANSWER))
        finally:
            await adapter.stop()
        assert fake.visible(SLACK_CHANNEL) == [ANSWER]
        assert len(fake.calls_to("chat.postMessage")) == 1
        assert fake.calls_to("conversations.history")


async def _ignore(_message: InboundMessage, *, ack: Ack | None = None) -> None:
    return None


def test_a_message_key_fits_a_discord_nonce() -> None:
    text = "x" * 5000
    for row in (1, 36**7 - 1, 36**9):
        for index, part in ((0, 0), (99, 7), (36**3, 36**2)):
            token = PieceKey.of(row, text).message(index).token(part)
            assert len(token) <= 25, token
    first = PieceKey.of(5, "a").message(0)
    assert len({first.token(), first.token(1), PieceKey.of(5, "a").message(1).token()}) == 3
    assert PieceKey.of(5, "a").message(0).token() != PieceKey.of(5, "b").message(0).token()
