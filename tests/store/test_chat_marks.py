"""Catch-up marks (``CatchUpMarks``), on both backends: an accepted message of a readable
history, or one kept as context, moves its chat's (or thread's) mark in its own transaction;
the mark only moves forward (ids compare by value); edits, presses, repeats and messages of
no readable history move nothing; and a database of the previous schema is upgraded."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import psycopg

from botd.chat import InboundMessage, Press
from botd.store import ChatMark, Store
from botd.store.postgres import PostgresStore
from botd.store.postgres import schema as pg_schema
from botd.store.sqlite import SqliteStore
from botd.store.sqlite import schema as sqlite_schema


def message(message_id: str, *, chat: str = "C1", thread: str | None = None) -> InboundMessage:
    return InboundMessage(
        channel="slack",
        chat_id=chat,
        sender_id="U1",
        text="hi",
        message_id=message_id,
        conversation_key=f"slack:{chat}" + (f":thread:{thread}" if thread else ""),
        thread_id=thread,
        in_history=True,
        dedupe_keys=(f"{chat}:{message_id}",),
    )


async def marks(store: Store) -> dict[tuple[str, str | None], str]:
    found = await store.chat_marks("slack", "default", limit=100)
    return {(mark.chat_id, mark.thread_id): mark.message_id for mark in found}


async def test_an_accept_marks_its_chat_and_thread(store: Store) -> None:
    first = message("1700000000.000100")
    await store.accept_inbound("slack", first.dedupe_keys, first)
    in_thread = message("1700000000.000300", thread="1700000000.000100")
    await store.accept_inbound("slack", in_thread.dedupe_keys, in_thread)
    assert await marks(store) == {
        ("C1", None): "1700000000.000100",
        ("C1", "1700000000.000100"): "1700000000.000300",
    }
    # Another account's chats are its own.
    assert await store.chat_marks("slack", "other", limit=10) == []


async def test_the_mark_only_moves_forward(store: Store) -> None:
    for message_id in ("1700000000.000200", "1700000000.000100", "999999999.000900"):
        taken = message(message_id)
        await store.accept_inbound("slack", taken.dedupe_keys, taken)
    assert await marks(store) == {("C1", None): "1700000000.000200"}
    # Snowflakes of more digits are later ones.
    for message_id in ("99999999999999999", "100000000000000000"):
        taken = message(message_id, chat="D1")
        await store.accept_inbound("slack", taken.dedupe_keys, taken)
    assert (await marks(store))[("D1", None)] == "100000000000000000"


async def test_kept_context_marks_too_and_edits_presses_repeats_do_not(store: Store) -> None:
    kept = message("1700000000.000100")
    assert not await store.keep_chatter("slack", kept.dedupe_keys, kept, limit=10)
    edit = replace(message("1700000000.000500"), edited=True, dedupe_keys=("e",))
    await store.keep_chatter("slack", edit.dedupe_keys, edit, limit=10)
    press = replace(
        message("press:1"), press=Press("cb", "v", "1700000000.000600"), dedupe_keys=("p",)
    )
    await store.accept_inbound("slack", press.dedupe_keys, press)
    elsewhere = replace(message("1700000000.000700"), in_history=False, dedupe_keys=("x",))
    await store.accept_inbound("slack", elsewhere.dedupe_keys, elsewhere)
    repeat = replace(message("1700000000.000800"), dedupe_keys=kept.dedupe_keys)
    assert await store.accept_inbound("slack", repeat.dedupe_keys, repeat) is None
    assert await marks(store) == {("C1", None): "1700000000.000100"}


async def test_the_most_recently_marked_come_first(store: Store) -> None:
    for chat in ("C1", "C2", "C3"):
        taken = message("1700000000.000100", chat=chat)
        await store.accept_inbound("slack", taken.dedupe_keys, taken)
    found = await store.chat_marks("slack", "default", limit=2)
    assert [mark.chat_id for mark in found] == ["C3", "C2"]
    assert all(isinstance(mark, ChatMark) and mark.where == mark.chat_id for mark in found)


# --- the upgrade from the previous schema ----------------------------------------------------


def before_the_marks(migrations: tuple[tuple[str, ...], ...]) -> int:
    return next(
        version
        for version, steps in enumerate(migrations)
        if any("CREATE TABLE chat_marks" in statement for statement in steps)
    )


async def check_upgraded(store: Store) -> None:
    assert await store.chat_marks("slack", "default", limit=10) == []
    taken = message("1700000000.000100")
    await store.accept_inbound("slack", taken.dedupe_keys, taken)
    assert await marks(store) == {("C1", None): "1700000000.000100"}


async def test_sqlite_upgrades_to_the_marks(tmp_path: Path) -> None:
    previous = before_the_marks(sqlite_schema.MIGRATIONS)
    with sqlite3.connect(tmp_path / "botd.sqlite3") as conn:
        for steps in sqlite_schema.MIGRATIONS[:previous]:
            for statement in steps:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version={previous}")
    with SqliteStore.open(tmp_path) as store:
        await check_upgraded(store)


async def test_postgres_upgrades_to_the_marks(postgres_dsn: str) -> None:
    previous = before_the_marks(pg_schema.MIGRATIONS)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await conn.execute("CREATE TABLE schema_version (version integer NOT NULL)")
        for steps in pg_schema.MIGRATIONS[:previous]:
            for statement in steps:
                await conn.execute(statement)
        await conn.execute("INSERT INTO schema_version VALUES (%s)", (previous,))
    store = await PostgresStore.open(postgres_dsn)
    try:
        await check_upgraded(store)
    finally:
        await store.aclose()
