"""What every store backend promises through ``Forgetting`` and ``Pruning.prune_kept``:
forgetting a person leaves no row of theirs in any table, read straight from the database,
and every row of another person stays; a table without a forget rule fails here; retention
drops old transcript turns and memories and keeps new ones."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from botd.chat import Button, InboundMessage, MessageRef, Target
from botd.events import Message
from botd.store import MemoryOwner, Person, Store
from botd.store.pairing import PairingFile
from botd.store.postgres import PostgresStore
from botd.store.postgres import forget as pg_forget
from botd.store.postgres.pairing import PostgresPairing
from botd.store.records import (
    ModelUsage,
    PostedButtons,
    RunRecord,
    StatusLine,
    StoredApproval,
    StoredJob,
)
from botd.store.sqlite import SqliteStore
from botd.store.sqlite import forget as sqlite_forget

CHANNEL = "telegram"
ALICE, BOB = "alice-77", "bob-88"
GROUP = "grp-99"
NAMES = {ALICE: "Alice", BOB: "Bob"}


def _message(user: str, n: int, *, direct: bool, key: str | None = None) -> InboundMessage:
    chat = user if direct else GROUP
    return InboundMessage(
        channel=CHANNEL,
        chat_id=chat,
        sender_id=user,
        text=f"[{NAMES[user]} (id {user})] hello {n}",
        message_id=f"m-{user}-{n}",
        conversation_key=key or f"{CHANNEL}:{chat}",
        sender_name=NAMES[user],
        is_direct=direct,
        dedupe_keys=(f"d-{user}-{n}",),
        in_history=direct,
    )


def _user_turn(user: str, text: str) -> Message:
    return Message(role="user", content=f"[{NAMES[user]} (id {user})] {text}")


async def _a_conversation(
    store: Store, user: str, key: str, message: InboundMessage, read_chatter: bool = False
) -> None:
    """A whole conversation of ``user`` under ``key``: its inbox row, transcript, answer,
    usage, model, status line, preview, approval, buttons and a scheduled job;
    ``read_chatter``: its message is shown the group's chatter (a user-scoped one)."""
    consume = None
    if read_chatter:
        lines = await store.kept_chatter(f"{CHANNEL}:{GROUP}")
        consume = (f"{CHANNEL}:{GROUP}", lines[-1].id)
    inbox = await store.accept_inbound(
        CHANNEL,
        message.dedupe_keys,
        message,
        consume_chatter=consume,
        chatter_read_by=key if read_chatter else None,
    )
    assert inbox is not None
    session = await store.open_session(key)
    store.start_inbox_run(
        [inbox],
        session_id=session.session_id,
        run_id=f"{session.session_id}:1",
        user_turn=[Message(role="user", content=message.text)],
    )
    store.append_messages_soon(session.session_id, [Message(role="assistant", content="hi")])
    store.record_usage_soon(key, session.session_id, "r1", [ModelUsage("m", 1, 2)])
    target = Target(CHANNEL, message.chat_id)
    await store.outbox_add(inbox, 0, "final", target, f"answer to {user}")
    if message.is_direct:  # a piece of no inbox message is theirs by its (direct) chat
        await store.outbox_add(None, 0, "final", target, f"reminder for {user}")
    store.finish_inbox([inbox], "answered")
    await store.set_model_choice(key, "other-model")
    await store.set_voice_replies(key, True)
    await store.keep_status_line(key, StatusLine("message", target, f"s-{user}"))
    await store.preview_keep(inbox, [MessageRef(target, f"p-{user}")])
    await store.open_approval(
        StoredApproval(
            f"k-{user}", f"t-{user}", session.session_id, "c1", "exec", "ls", time.time() + 60
        )
    )
    store.buttons_posted_soon(
        PostedButtons(
            MessageRef(target, f"b-{user}"),
            ((Button("Yes", "v"),),),
            time.time(),
            conversation=key,
        )
    )
    await store.save_job(
        StoredJob(
            f"job-{user}",
            "cron",
            {"cron": "0 9 * * *"},
            "daily",
            "hi",
            target,
            key,
            next_run_time=datetime.now(UTC),
        )
    )
    await store.add_job_run(RunRecord(f"job-{user}", datetime.now(UTC), "submitted"), keep=5)
    await store.keep_editor_session(CHANNEL, message.chat_id, "/tmp", title="t")
    store.commit_soon()


async def _people(store: Store) -> None:
    """Alice and Bob each with a DM, a user-scoped conversation in a group, messages and
    chatter in the group's own conversation, memories and (on PostgreSQL) pairing."""
    group_key = f"{CHANNEL}:{GROUP}"
    for user in (ALICE, BOB):
        await _a_conversation(store, user, f"{CHANNEL}:{user}", _message(user, 1, direct=True))
        # A kept line's inbound id is not kept with it: a platform's opaque id stays until
        # the inbound ledger's pruning (docs/privacy.md).
        chatter = replace(_message(user, 4, direct=False), dedupe_keys=(f"d-line-{NAMES[user]}",))
        await store.keep_chatter(CHANNEL, chatter.dedupe_keys, chatter, limit=50)
        scoped = f"{group_key}:user:{user}"
        scoped_message = _message(user, 2, direct=False, key=scoped)
        await _a_conversation(store, user, scoped, scoped_message, read_chatter=True)
        said = _message(user, 3, direct=False)
        assert await store.accept_inbound(CHANNEL, said.dedupe_keys, said) is not None
        await store.remember(
            MemoryOwner(CHANNEL, "user", user), user, f"{user} likes tea", max_items=9
        )
        await store.remember(
            MemoryOwner(CHANNEL, "group", GROUP), user, "a group fact", max_items=9
        )
    group = await store.open_session(group_key)
    store.append_messages_soon(
        group.session_id,
        [
            _user_turn(ALICE, "question"),
            Message(role="assistant", content="answer"),
            _user_turn(BOB, "another"),
            Message(role="assistant", content="more"),
            Message(
                role="user",
                content=f"[In reply to Alice (id {ALICE}):]\n> a question\n[Bob (id {BOB})] yes",
            ),
            Message(role="assistant", content="noted"),
        ],
    )
    store.commit_soon()
    await store.memories(MemoryOwner(CHANNEL, "user", ALICE))  # after the queued writes


async def _pairing_rows(store: Store, state: Path | None) -> None:
    if isinstance(store, PostgresStore):
        book: PairingFile | PostgresPairing = store.pairing()
    else:
        assert state is not None
        book = PairingFile(state / "pairing.json")
    for user in (ALICE, BOB):
        code, _ = await book.issue(CHANNEL, user, NAMES[user])
        await book.approve(CHANNEL, code)
        await book.issue(CHANNEL, user, NAMES[user])


async def _tables(store: Store, dsn: str | None) -> dict[str, list[str]]:
    """Every table of the database and its rows, each as text."""
    if isinstance(store, SqliteStore):
        conn = sqlite3.connect(store.path)
        try:
            names = [
                str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            return {n: [repr(r) for r in conn.execute(f'SELECT * FROM "{n}"')] for n in names}
        finally:
            conn.close()
    assert dsn is not None
    async with await psycopg.AsyncConnection.connect(dsn) as aconn:
        cur = await aconn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        )
        names = [str(r[0]) for r in await cur.fetchall()]
        tables: dict[str, list[str]] = {}
        for name in names:
            cur = await aconn.execute(f'SELECT * FROM "{name}"')
            tables[name] = [repr(r) for r in await cur.fetchall()]
        return tables


def _rules(store: Store) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    if isinstance(store, SqliteStore):
        return sqlite_forget.RULES, sqlite_forget.KEPT
    return pg_forget.RULES, pg_forget.KEPT


@pytest.fixture
def dsn(request: pytest.FixtureRequest, store: Store) -> str | None:
    if isinstance(store, PostgresStore):
        return str(request.getfixturevalue("migrated_postgres_dsn"))
    return None


async def test_every_table_has_a_forget_rule_or_a_reason_to_keep_it(
    store: Store, dsn: str | None
) -> None:
    rules, kept = _rules(store)
    tables = set(await _tables(store, dsn))
    assert not set(rules) & set(kept)
    missing = tables - set(rules) - set(kept)
    assert not missing, f"tables with no forget rule (add one to RULES or KEPT): {missing}"
    assert not (set(rules) | set(kept)) - tables - {"sqlite_sequence"}


async def test_forgetting_a_person_leaves_no_row_of_theirs_and_every_row_of_another(
    store: Store, dsn: str | None, tmp_path: Path
) -> None:
    state = store.path.parent if isinstance(store, SqliteStore) else None
    await _people(store)
    await _pairing_rows(store, state)
    before = await _tables(store, dsn)
    holding = {t for t, rows in before.items() if any(BOB in row for row in rows)}
    rules, _ = _rules(store)
    # Every table with a rule holds rows of both, so the test shows each rule at work.
    assert set(rules) - holding <= {"leases"}, set(rules) - holding

    done = await store.forget_person(Person(CHANNEL, ALICE))

    after = await _tables(store, dsn)
    left = {t: [r for r in rows if ALICE in r] for t, rows in after.items()}
    assert not {t: rows for t, rows in left.items() if rows}
    for table in holding:
        assert any(BOB in row for row in after[table]), table
    assert done.redacted == 2  # her turn, and Bob's that quotes her
    assert done.conversations == {f"{CHANNEL}:{ALICE}", f"{CHANNEL}:{GROUP}:user:{ALICE}"}
    assert done.removed["messages"] >= 4 and done.removed["memories"] == 2
    summary = done.summary()
    assert "hello" not in summary and "tea" not in summary
    if state is not None:
        kept = json.loads((state / "pairing.json").read_text())
        assert ALICE not in json.dumps(kept) and BOB in json.dumps(kept)
        assert done.removed["pairing.json"] == 3  # a code, an approval, a welcome
    # The group's transcript keeps Bob's turn and the answers; Alice's turn is a stand-in.
    group = await store.open_session(f"{CHANNEL}:{GROUP}")
    turns = await store.transcript(group.session_id)
    assert [m.role for m in turns] == ["user", "assistant"] * 3
    assert "removed" in str(turns[0].content) and BOB in str(turns[2].content)
    # Forgetting again finds nothing.
    assert (await store.forget_person(Person(CHANNEL, ALICE))).total == 0


async def test_retention_drops_old_turns_and_memories_and_keeps_new_ones(store: Store) -> None:
    now = time.time()
    clock = {"now": now - 10 * 86400}
    store._clock = lambda: clock["now"]  # type: ignore[attr-defined]
    idle = await store.open_session("telegram:idle")
    store.append_messages_soon(idle.session_id, [_user_turn(ALICE, "old")])
    used = await store.open_session("telegram:used")
    store.append_messages_soon(
        used.session_id, [_user_turn(BOB, "old"), Message(role="assistant", content="old")]
    )
    await store.remember(MemoryOwner(CHANNEL, "user", ALICE), ALICE, "old fact", max_items=9)
    clock["now"] = now
    store.append_messages_soon(
        used.session_id, [_user_turn(BOB, "new"), Message(role="assistant", content="new")]
    )
    await store.remember(MemoryOwner(CHANNEL, "user", ALICE), ALICE, "new fact", max_items=9)

    pruned = await store.prune_kept(7 * 86400)

    assert pruned == 4
    assert await store.transcript(idle.session_id) == []
    kept = await store.transcript(used.session_id)
    assert [str(m.content) for m in kept] == [f"[Bob (id {BOB})] new", "new"]
    memories = await store.memories(MemoryOwner(CHANNEL, "user", ALICE))
    assert [m.text for m in memories] == ["new fact"]
