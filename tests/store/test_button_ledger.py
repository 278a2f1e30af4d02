"""The buttons botd put under its messages (``ButtonLedger``), on both backends: recorded by
message, read back with whether a press of the message counted, replaced when the message
shows other buttons, forgotten with the old rows; and filled, at the upgrade, from what the
previous schema kept (the sent pieces' buttons and the approval requests' messages)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import psycopg

from botd.chat import Button, MessageRef, Target
from botd.store import PostedButtons, Store
from botd.store.postgres import PostgresStore
from botd.store.postgres import schema as pg_schema
from botd.store.rows import buttons_json, refs_json
from botd.store.sqlite import SqliteStore
from botd.store.sqlite import schema as sqlite_schema

CHAT = Target("telegram", "-100123")
MESSAGE = MessageRef(CHAT, "42")
ROWS = ((Button("Yes", "b:0"), Button("No", "b:1")),)
ANSWERED = "buttons:default:-100123:42"


async def test_buttons_are_read_back_by_their_message_only(store: Store) -> None:
    store.buttons_posted_soon(PostedButtons(MESSAGE, ROWS, 1000.5))
    found = await store.posted_buttons(MESSAGE, ANSWERED)
    assert found == PostedButtons(MESSAGE, ROWS, 1000.5, answered=False)
    assert found.button("b:1") == Button("No", "b:1")
    assert found.button("b:7") is None
    # The same id in another chat, on another account, on another platform: not these.
    for other in (
        MessageRef(Target("telegram", "777"), "42"),
        MessageRef(Target("telegram", "-100123", "support"), "42"),
        MessageRef(Target("slack", "-100123"), "42"),
        MessageRef(CHAT, "43"),
    ):
        assert await store.posted_buttons(other, ANSWERED) is None


async def test_a_counted_press_shows_as_answered(store: Store) -> None:
    store.buttons_posted_soon(PostedButtons(MESSAGE, ROWS, 1000.0))
    assert await store.seen_inbound("telegram", ANSWERED) is False
    found = await store.posted_buttons(MESSAGE, ANSWERED)
    assert found is not None and found.answered


async def test_a_message_showing_other_buttons_is_recorded_again(store: Store) -> None:
    store.buttons_posted_soon(PostedButtons(MESSAGE, ROWS, 1000.0))
    later = ((Button("Approve", "approval:t:approve"),),)
    store.buttons_posted_soon(PostedButtons(MESSAGE, later, 2000.0))
    assert await store.posted_buttons(MESSAGE, ANSWERED) == PostedButtons(MESSAGE, later, 2000.0)


async def test_the_conversation_that_posted_them_is_kept_through_an_edit(store: Store) -> None:
    key = "telegram:-100123:user:7"
    store.buttons_posted_soon(PostedButtons(MESSAGE, ROWS, 1000.0, conversation=key))
    found = await store.posted_buttons(MESSAGE, ANSWERED)
    assert found is not None and found.conversation == key
    # Shown again by an edit that does not name it (a request's outcome): still theirs.
    store.buttons_posted_soon(PostedButtons(MESSAGE, ROWS, 2000.0))
    found = await store.posted_buttons(MESSAGE, ANSWERED)
    assert found == PostedButtons(MESSAGE, ROWS, 2000.0, conversation=key)


async def test_old_records_are_pruned(store: Store) -> None:
    store.buttons_posted_soon(PostedButtons(MESSAGE, ROWS, 0.0))
    recent = MessageRef(CHAT, "43")
    store.buttons_posted_soon(PostedButtons(recent, ROWS, 1e12))
    await store.prune_finished(3600)
    assert await store.posted_buttons(MESSAGE, ANSWERED) is None
    assert await store.posted_buttons(recent, ANSWERED) is not None


# --- the upgrade from the previous schema --------------------------------------------------

SENT_REFS = refs_json([MessageRef(CHAT, "41"), MESSAGE])
"""A long piece sent as two messages: its buttons are under the last one."""
APPROVAL_REFS = refs_json([MessageRef(Target("telegram", "777"), "9")])


def previous_rows(placeholder: str) -> list[tuple[str, tuple[object, ...]]]:
    """What the previous release wrote: a sent piece with buttons, a pending request."""
    p = placeholder
    return [
        (
            "INSERT INTO outbox (anchor, seq, kind, target, text, state, refs, buttons, "
            f"created_at, updated_at) VALUES (1, 1, 'final', '{{}}', 'Deploy?', 'sent', {p}, "
            f"{p}, 100.0, 101.0)",
            (SENT_REFS, buttons_json(ROWS)),
        ),
        (
            "INSERT INTO approvals (key, token, session_id, call_id, tool_name, summary, "
            f"deadline, state, messages, created_at) VALUES ('k', 'tok', 's', 'c', 'exec', "
            f"'exec()', 9e9, 'pending', {p}, 200.0)",
            (APPROVAL_REFS,),
        ),
    ]


async def check_upgraded(store: Store) -> None:
    found = await store.posted_buttons(MESSAGE, ANSWERED)
    assert found == PostedButtons(MESSAGE, ROWS, 101.0)
    assert await store.posted_buttons(MessageRef(CHAT, "41"), ANSWERED) is None
    request = MessageRef(Target("telegram", "777"), "9")
    approval = await store.posted_buttons(request, "buttons:default:777:9")
    assert approval is not None and approval.posted_at == 200.0
    assert approval.rows == (
        (Button("Approve", "approval:tok:approve"), Button("Deny", "approval:tok:deny")),
    )


def before_the_ledger(migrations: Sequence[Sequence[str]]) -> int:
    """The schema version before the migration that made the button ledger."""
    return next(
        version
        for version, steps in enumerate(migrations)
        if any("CREATE TABLE button_messages" in statement for statement in steps)
    )


async def test_sqlite_fills_the_record_from_the_previous_schema(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    previous = before_the_ledger(sqlite_schema.MIGRATIONS)
    with sqlite3.connect(tmp_path / "botd.sqlite3") as conn:
        for steps in sqlite_schema.MIGRATIONS[:previous]:
            for statement in steps:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version={previous}")
        for statement, params in previous_rows("?"):
            conn.execute(statement, params)
    with SqliteStore.open(tmp_path) as store:
        await check_upgraded(store)


async def test_postgres_fills_the_record_from_the_previous_schema(postgres_dsn: str) -> None:
    previous = before_the_ledger(pg_schema.MIGRATIONS)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await conn.execute("CREATE TABLE schema_version (version integer NOT NULL)")
        for steps in pg_schema.MIGRATIONS[:previous]:
            for statement in steps:
                await conn.execute(statement)
        await conn.execute("INSERT INTO schema_version VALUES (%s)", (previous,))
        for statement, params in previous_rows("%s"):
            await conn.execute(statement, params)
    store = await PostgresStore.open(postgres_dsn)
    try:
        await check_upgraded(store)
    finally:
        await store.aclose()
