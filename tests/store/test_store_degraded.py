"""A write that fails while botd runs: the store degraded, /healthz 503, the user told in one
line, the daemon up, recovery by itself once writes work again.

The disk fills for real as SQLite sees it (``tests/store/harness.fill_the_disk``); freeing
it is the operator making room.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest

from botd.agent.providers.scripted import ScriptedProvider
from botd.chat import Target
from botd.conversation import Conversations
from botd.conversation.notices import UNSAVED_NOTICE
from botd.inbound.access import AccessPolicy
from botd.inbound.router import STORE_FAILED_NOTICE, Router
from botd.store import StoreError, StoreHealth, StoreWriteError
from botd.store.sqlite import SqliteStore
from tests.conversation.harness import ListSink, inbound, settings
from tests.fakes.anthropic_api import FakeAnthropicAPI, answers_by_prompt, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.store.harness import fill_the_disk
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    daemon_store,
    telegram_yaml,
)
from tests.support.health_probe import free_port
from tests.support.waiting import until

HANG_GUARD = 60.0
DM = 777


@pytest.fixture
def store(sqlite_store: SqliteStore) -> SqliteStore:
    """These faults are SQLite's (a full disk, a read-only file): its ``store`` is SQLite's."""
    return sqlite_store


# --------------------------------------------------------------------------- the store


async def test_a_full_disk_degrades_the_store_until_that_write_works_again(
    store: SqliteStore,
) -> None:
    assert await store.seen_inbound("telegram", "1") is False
    assert store.health.ok and store.health.reason is None
    store.set_offset_soon("telegram", "default", "10")
    free = fill_the_disk(store)

    with pytest.raises(StoreWriteError, match="database or disk is full") as failed:
        await store.seen_inbound("telegram", "2")
    assert failed.value.reason == "database or disk is full"
    assert store.health.reason == "database or disk is full (writing seen_inbound)"
    # A small in-place update still fits: it works, and does not hide the failing inserts.
    store.set_offset_soon("telegram", "default", "11")
    assert not store.health.ok

    free()
    assert await store.seen_inbound("telegram", "2") is False  # nothing was half-recorded
    assert store.health.ok
    assert await store.get_offset("telegram", "default") == "11"


def test_a_read_only_database_at_run_time_degrades_the_store(store: SqliteStore) -> None:
    conn = store._connection()
    conn.execute("PRAGMA query_only=1")
    with pytest.raises(StoreWriteError, match="attempt to write a readonly database"):
        store.get_or_create_session("console:c1")
    assert store.health.reason is not None and "get_or_create_session" in store.health.reason
    conn.execute("PRAGMA query_only=0")
    store.get_or_create_session("console:c1")
    assert store.health.ok


def test_a_constraint_error_is_not_a_storage_fault(store: SqliteStore) -> None:
    with pytest.raises(sqlite3.IntegrityError), store._transaction("test_insert") as conn:
        conn.execute("INSERT INTO inbound_seen (channel, message_id, seen_at) VALUES (NULL, 1, 0)")
    assert store.health.ok


def test_health_names_the_latest_failure_and_counts_the_others() -> None:
    now = [100.0]
    health = StoreHealth(clock=lambda: now[0])
    health.failed("seen_inbound", "database or disk is full")
    now[0] += 1
    health.failed("append_messages", "disk I/O error")
    assert health.reason == "disk I/O error (writing append_messages) (and 1 other kind)"
    health.succeeded("set_offset")  # never failed: proves nothing about the others
    assert health.reason == "disk I/O error (writing append_messages) (and 1 other kind)"
    health.succeeded("seen_inbound")  # a failed kind works again: the fault is over
    assert health.ok and health.reason is None


# --------------------------------------------------------------------------- router, sessions


async def test_a_message_the_store_cannot_take_is_answered_with_one_line(
    store: SqliteStore, caplog: pytest.LogCaptureFixture
) -> None:
    sink = ListSink()
    manager = Conversations(store, ScriptedProvider(), sink, settings())

    async def reply(target: Target, text: str) -> None:
        await sink.send_text(target, text)

    router = Router(store, manager.submit, reply, {"console": AccessPolicy(dm_policy="open")})
    message = replace(inbound("hello"), is_direct=True)
    free = fill_the_disk(store)
    with caplog.at_level(logging.WARNING, logger="botd.inbound.router"):
        # The adapter must leave the message unconfirmed, so the platform hands it over again.
        with pytest.raises(StoreError):
            await router.handle(message)
        with pytest.raises(StoreError):
            await router.handle(message)  # the platform's redelivery while the disk is full
    assert sink.texts("c1") == [STORE_FAILED_NOTICE]  # told once, not per redelivery
    assert any(
        "could not be handled" in r.getMessage() and "console:c1" in r.getMessage()
        for r in caplog.records
    )

    free()
    # The platform's retry of the same message is not taken for a repeat: it was never kept.
    assert (await router.handle(message)).accepted
    await asyncio.wait_for(manager.drain(), HANG_GUARD)
    assert sink.texts("c1") == [STORE_FAILED_NOTICE, "You said: hello"]
    assert store.health.ok


async def test_a_message_held_back_behind_a_failed_one_is_told_once_if_it_is_for_the_bot(
    store: SqliteStore,
) -> None:
    sink = ListSink()
    manager = Conversations(store, ScriptedProvider(), sink, settings())

    async def reply(target: Target, text: str) -> None:
        await sink.send_text(target, text)

    policy = AccessPolicy(dm_policy="open", group_policy="open")
    router = Router(store, manager.submit, reply, {"console": policy})
    first = replace(inbound("hello", chat="c1"), is_direct=True)
    held = replace(inbound("me too", chat="c2"), is_direct=True)
    chatter = replace(inbound("not for the bot", chat="g1"), is_direct=False)
    await router.held_back(held)  # the store never failed: nothing to tell
    assert sink.texts("c2") == []

    free = fill_the_disk(store)
    with pytest.raises(StoreError):
        await router.handle(first)
    await router.held_back(held)
    await router.held_back(held)  # held back again at Telegram's next delivery
    await router.held_back(chatter)
    assert sink.texts("c1") == [STORE_FAILED_NOTICE]
    assert sink.texts("c2") == [STORE_FAILED_NOTICE]  # told once
    assert sink.texts("g1") == []  # a group line not addressed to the bot: nobody asked
    with pytest.raises(StoreError):
        await router.handle(held)  # its own write fails later: not told again
    assert sink.texts("c2") == [STORE_FAILED_NOTICE]

    free()
    assert (await router.handle(first)).accepted
    assert (await router.handle(held)).accepted
    await asyncio.wait_for(manager.drain(), HANG_GUARD)
    assert sink.texts("c1") == [STORE_FAILED_NOTICE, "You said: hello"]
    assert sink.texts("c2") == [STORE_FAILED_NOTICE, "You said: me too"]


async def test_an_answer_whose_transcript_cannot_be_saved_is_shown_and_the_user_told(
    store: SqliteStore,
) -> None:
    sink = ListSink()
    manager = Conversations(store, ScriptedProvider(), sink, settings())
    await manager.submit(inbound("first", n=1))
    await asyncio.wait_for(manager.drain(), HANG_GUARD)

    session = manager.conversations["console:c1"]
    await manager.submit(inbound("second", n=2))  # the run starts after this returns
    free = fill_the_disk(store, session.session_id)
    await asyncio.wait_for(manager.drain(), HANG_GUARD)
    assert sink.texts("c1") == ["You said: first", "You said: second", UNSAVED_NOTICE]
    assert store.health.reason is not None and "append_messages" in store.health.reason

    free()
    stored = store.load_transcript(session.session_id)
    assert len(session.history) == len(stored) == 2  # the first exchange, as stored
    await manager.submit(inbound("third", n=3))
    await asyncio.wait_for(manager.drain(), HANG_GUARD)
    assert sink.texts("c1")[-1] == "You said: third"
    assert store.health.ok
    assert len(store.load_transcript(session.session_id)) == len(stored) + 2


# --------------------------------------------------------------------------- the daemon


async def _healthz(port: int) -> tuple[int, dict[str, object]]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/healthz") as resp,
    ):
        return resp.status, await resp.json()


async def test_telegram_user_is_told_healthz_names_the_store_and_botd_recovers(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            telegram_yaml(telegram, "dm_policy: open"),
            f"health:\n  enabled: true\n  port: {free_port()}\n",
        )
        ready = lambda d: d.health is not None and d.health.port is not None  # noqa: E731
        async with daemon_running(config, ready=ready) as daemon:
            assert daemon.health is not None and daemon.health.port is not None
            port = daemon.health.port
            assert daemon.runtime is not None
            store = daemon_store(daemon)

            model.push(stream(text("Hello!")))
            telegram.push_text(DM, "hi")
            await telegram.wait_for_call("sendMessage", 1, timeout=HANG_GUARD)
            status, body = await _healthz(port)
            assert status == 200 and body["components"]["store"] == {"status": "ok"}

            free = fill_the_disk(store)
            model.push(stream(text("Yes, here.")))
            telegram.push_text(DM, "are you there?")
            await telegram.wait_for_call("sendMessage", 2, timeout=HANG_GUARD)
            status, body = await _healthz(port)
            assert status == 503
            assert body["status"] == "degraded"
            assert body["components"]["store"] == {
                "status": "degraded",
                "reason": "database or disk is full (writing accept_inbound)",
            }
            assert body["problems"] == ["store: database or disk is full (writing accept_inbound)"]

            free()  # the operator made room; the daemon stayed up meanwhile
            # Never confirmed, the update comes again and is answered now.
            await telegram.wait_for_call("sendMessage", 3, timeout=HANG_GUARD)
            model.push(stream(text("Back again.")))
            telegram.push_text(DM, "and now?")
            await telegram.wait_for_call("sendMessage", 4, timeout=HANG_GUARD)
            status, body = await _healthz(port)
            assert status == 200 and body["status"] == "ok"

    texts = [c.params["text"] for c in telegram.calls_to("sendMessage", ok_only=True)]
    assert texts == ["Hello!", STORE_FAILED_NOTICE, "Yes, here.", "Back again."]
    # The message the store could not take reached the model once, after the recovery.
    assert len(model.requests) == 3
    assert json.dumps(model.requests[1].body["messages"]).count("are you there?") == 1
    assert json.dumps(model.requests[2].body["messages"]).count("are you there?") == 1


async def test_two_telegram_users_writing_while_the_disk_is_full_are_each_told_once(
    tmp_path: Path,
) -> None:
    # The second update comes after the first, which the store could not take: it is held
    # back (Telegram hands both again, in order) and never reaches the store, yet its
    # sender is told too, once, and both are answered once the disk has room again.
    other = DM + 1
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        config = config_yaml(
            tmp_path, anthropic_yaml(model), telegram_yaml(telegram, "dm_policy: open")
        )
        async with daemon_running(config) as daemon:
            store = daemon_store(daemon)
            await telegram.wait_for_call("getUpdates", 1, timeout=HANG_GUARD)  # polling
            free = fill_the_disk(store)
            telegram.push_text(DM, "first, while the disk is full")
            telegram.push_text(other, "second, while the disk is full")

            def told() -> list[str]:
                return telegram.visible(DM) + telegram.visible(other)

            await until(lambda: told() == [STORE_FAILED_NOTICE] * 2, "both senders told")
            # Telegram hands the two over again (backing off) while the disk is still full:
            # nobody is told twice.
            polls = len(telegram.calls_to("getUpdates"))
            await telegram.wait_for_call("getUpdates", polls + 2, timeout=HANG_GUARD)
            assert told() == [STORE_FAILED_NOTICE] * 2

            # Each answer named by its prompt: the two conversations run side by side.
            model.responder = answers_by_prompt({"first,": "One.", "second,": "Two."})
            free()
            await until(lambda: len(told()) == 4, "both answered")
    assert telegram.visible(DM) == [STORE_FAILED_NOTICE, "One."]
    assert telegram.visible(other) == [STORE_FAILED_NOTICE, "Two."]
    assert len(model.requests) == 2
