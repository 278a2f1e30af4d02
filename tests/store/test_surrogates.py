"""Text botd cannot store or send as it came (a lone UTF-16 surrogate, ``"\\ud800"``), from a
chat or from the model, and a store write that fails in a run's cleanup.

Either way the message is answered, the user reads one line when something could not be
saved, and the run leaves no "typing…" behind, even when closing its output fails too. Real
python-telegram-bot and anthropic SDKs over the loopback fakes; the fakes' JSON escapes the
surrogate (``\\ud800``), so it reaches the SDKs as a real platform would send it.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from botd.agent.providers.scripted import ScriptedProvider
from botd.app import App
from botd.chat import InboundMessage, Target, storable
from botd.conversation import Conversations
from botd.conversation.notices import UNSAVED_NOTICE
from botd.delivery.outbox import RunOutbox
from botd.events import Message
from botd.store.sqlite import SqliteStore
from tests.channels.telegram.harness import GROUP, started
from tests.conversation.harness import ListSink, inbound, settings
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI, user
from tests.store.harness import fill_the_disk
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    daemon_store,
    telegram_yaml,
)

HANG_GUARD = 60.0
DM = 777
TOKEN = "123456:TEST-TOKEN"


def _typing_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("typing:") and not t.done()]


@asynccontextmanager
async def _botd(tmp_path: Path) -> AsyncIterator[tuple[App, FakeTelegramAPI, FakeAnthropicAPI]]:
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        config = config_yaml(
            tmp_path, anthropic_yaml(model), telegram_yaml(telegram, "dm_policy: open")
        )
        ready = lambda d: d.runtime is not None and "telegram" in d.runtime.adapters  # noqa: E731
        async with daemon_running(config, ready=ready) as daemon:
            yield daemon, telegram, model


async def _run_over(daemon: App) -> None:
    """Wait (within the hang guard) until every session is idle."""
    assert daemon.runtime is not None
    await asyncio.wait_for(daemon.runtime.dispatcher.drain(), HANG_GUARD)


def _transcript(store: SqliteStore) -> list[Message]:
    session = store.get_or_create_session(f"telegram:{DM}")
    return store.load_transcript(session.session_id)


def test_storable_replaces_each_lone_surrogate_and_keeps_the_rest() -> None:
    assert storable("a\ud800b\udfff") == "a\ufffdb\ufffd"
    assert storable("\ud83d\ude00") == "\U0001f600"  # a pair written as two halves is joined
    plain = "héllo 😀"
    assert storable(plain) is plain
    message = InboundMessage(
        "telegram",
        "1\ud800",
        "2",
        "x\ud800",
        "3",
        "k\udc00",
        sender_name="\udfff",
        thread_id="t\ud800",
        reply_to_message_id="r\ud800",
        dedupe_keys=("d\ud800",),
        target=Target("telegram", "c\ud800", thread_id="t\udc00"),
    )
    for value in (
        message.chat_id,
        message.text,
        message.conversation_key,
        message.sender_name,
        message.thread_id,
        message.reply_to_message_id,
        *message.dedupe_keys,
        message.reply_target().chat_id,
        message.reply_target().thread_id,
    ):
        assert value is not None
        value.encode("utf-8")  # storable: no surrogate left
        assert "\ufffd" in value


async def test_a_telegram_message_with_a_lone_surrogate_is_answered_and_stored(
    tmp_path: Path,
) -> None:
    async with _botd(tmp_path) as (daemon, telegram, model):
        # The model streams half a surrogate pair too.
        model.push(stream(text("Got it \ud83d, thanks.")))
        telegram.push_text(DM, "bad \ud800 text", sender=user(DM, first_name="Ev\udfffe"))
        await telegram.wait_for_call("sendMessage", 1, timeout=HANG_GUARD)
        await _run_over(daemon)
        assert _typing_tasks() == []
        assert daemon.runtime is not None
        stored = _transcript(daemon_store(daemon))

    assert telegram.visible(DM) == ["Got it \ufffd, thanks."]
    # The model was asked with the replacement character (the surrogate cannot be sent).
    assert "bad \ufffd text" in json.dumps(model.requests[0].body["messages"], ensure_ascii=False)
    texts = [json.dumps(m.model_dump(mode="json"), ensure_ascii=False) for m in stored]
    assert len(stored) == 2
    assert "bad \ufffd text" in texts[0]
    assert "Got it \ufffd, thanks." in texts[1]


async def test_a_store_write_failing_in_the_cleanup_still_answers_and_tells_the_user(
    tmp_path: Path,
) -> None:
    async with _botd(tmp_path) as (daemon, telegram, model):
        assert daemon.runtime is not None
        store = daemon_store(daemon)
        append = store.append_messages_later

        def failing_append(session_id: str, messages: Sequence[Message]) -> asyncio.Future[None]:
            # The run's closing write fails for its own reason (not a storage fault) when its
            # group commits.
            def write(conn: sqlite3.Connection) -> None:
                raise sqlite3.InterfaceError("Error binding parameter 2: type 'X' not supported")

            return store._commit_later("append_messages_soon", write)

        store.append_messages_later = failing_append  # type: ignore[method-assign]
        model.push(stream(text("Here is my answer.")))
        telegram.push_text(DM, "hello")
        await telegram.wait_for_call("sendMessage", 2, timeout=HANG_GUARD)
        await _run_over(daemon)
        assert _typing_tasks() == []

        # The store works again: the next message is answered and saved as usual.
        store.append_messages_later = append  # type: ignore[method-assign]
        model.push(stream(text("And again.")))
        telegram.push_text(DM, "still there?")
        await telegram.wait_for_call("sendMessage", 3, timeout=HANG_GUARD)
        await _run_over(daemon)
        assert _typing_tasks() == []

    assert telegram.visible(DM) == ["Here is my answer.", UNSAVED_NOTICE, "And again."]


async def test_a_group_mention_after_a_lone_surrogate_is_still_found(tmp_path: Path) -> None:
    # Entity offsets count UTF-16 units; the lone surrogate is one of them.
    sent = "\ud800 hey @botd_test_bot help"
    mention = {"type": "mention", "offset": 6, "length": len("@botd_test_bot")}
    with SqliteStore.open(tmp_path) as store:
        async with FakeTelegramAPI(TOKEN) as telegram:
            bot = await started(telegram, store)
            try:
                telegram.push_text(GROUP, sent, entities=[mention])
                message = await bot.next()
            finally:
                await bot.adapter.stop()
    assert message.mentions_bot
    assert message.text == "\ufffd hey help"


async def test_a_failing_output_close_still_stops_typing_and_tells_the_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Everything fails at once at the end of the run: the transcript write (a full disk) and
    # the output's close (a bug in the sender). The user still reads the one line.
    close = RunOutbox.close

    async def failing_close(self: RunOutbox) -> None:
        await close(self)
        raise RuntimeError("the sender lost its queue")

    monkeypatch.setattr(RunOutbox, "close", failing_close)
    with SqliteStore.open(tmp_path / "state") as store:
        sink = ListSink()
        manager = Conversations(store, ScriptedProvider(), sink, settings())
        await manager.submit(inbound("first", n=1))
        await asyncio.wait_for(manager.drain(), HANG_GUARD)
        session = manager.conversations["console:c1"]
        await manager.submit(inbound("second", n=2))  # the run starts after this returns
        fill_the_disk(store, session.session_id)
        await asyncio.wait_for(manager.drain(), HANG_GUARD)
        assert _typing_tasks() == []
        assert sink.texts("c1") == ["You said: first", "You said: second", UNSAVED_NOTICE]
        await manager.close()
