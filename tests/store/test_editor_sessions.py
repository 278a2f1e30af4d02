"""The ACP channel's sessions (``EditorSessions``), on both backends: a session is kept with
its cwd and its first title, listed the most recently changed first, by cwd, in pages that
go on past the last of the page before; what a conversation said is read back from the inbox
and the outbox in order (presses, unsent pieces and other conversations left out), and what
each of its runs added to the transcript (a compaction's folded rows included, its copies
not read twice); and a database of the previous schema is upgraded."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import psycopg

from botd.agent.compaction import CompactionResult
from botd.chat import InboundMessage, Press, Target
from botd.events import ContentBlock, Message, TextContent, ThinkingContent, ToolCallContent
from botd.store import RunSteps, SaidLine, Store
from botd.store.postgres import PostgresStore
from botd.store.postgres import schema as pg_schema
from botd.store.sqlite import SqliteStore
from botd.store.sqlite import schema as sqlite_schema


def said_by(session: str, text: str, number: int) -> InboundMessage:
    return InboundMessage(
        channel="acp",
        chat_id=session,
        sender_id="editor",
        text=text,
        message_id=f"m{number}",
        conversation_key=f"acp:{session}",
        is_direct=True,
        dedupe_keys=(f"m{number}",),
    )


async def test_a_session_is_kept_with_its_cwd_and_its_first_title(store: Store) -> None:
    assert await store.editor_session("acp", "s1") is None
    await store.keep_editor_session("acp", "s1", "/a")
    await store.keep_editor_session("acp", "s1", "/a", title="Fix the parser")
    await store.keep_editor_session("acp", "s1", "/b", title="Something later")
    kept = await store.editor_session("acp", "s1")
    assert kept is not None
    assert (kept.session_id, kept.cwd, kept.title) == ("s1", "/b", "Fix the parser")
    assert await store.editor_session("acp.other", "s1") is None  # another instance's


async def test_sessions_are_listed_newest_first_by_cwd_in_pages(store: Store) -> None:
    for number in range(5):
        await store.keep_editor_session("acp", f"s{number}", "/a" if number % 2 else "/b")
    await store.keep_editor_session("acp.other", "x", "/a")
    await store.keep_editor_session("acp", "s0", "/b")  # changed last

    pages: list[list[str]] = []
    after = None
    while True:
        page = await store.editor_sessions("acp", after=after, limit=2)
        if not page:
            break
        pages.append([session.session_id for session in page])
        after = page[-1]
    assert pages == [["s0", "s4"], ["s3", "s2"], ["s1"]]
    in_a = await store.editor_sessions("acp", cwd="/a", limit=10)
    assert [session.session_id for session in in_a] == ["s3", "s1"]


async def test_what_a_conversation_said_is_read_back_in_order(store: Store) -> None:
    target = Target("acp", "s1")
    first = await store.accept_inbound("acp", ("m1",), said_by("s1", "remember me", 1))
    assert first is not None
    one = await store.outbox_add(first, 1, "block", target, "First answer,")
    two = await store.outbox_add(first, 2, "final", target, "in two blocks.")
    store.outbox_sent(one, ["r1"])
    store.outbox_sent(two, ["r2"])
    press = replace(said_by("s1", "(pressed: Approve)", 2), press=Press("m2", "a:approve", "r2"))
    await store.accept_inbound("acp", ("m2",), press)
    second = await store.accept_inbound("acp", ("m3",), said_by("s1", "who am I?", 3))
    assert second is not None
    await store.outbox_add(second, 1, "final", target, "not sent yet")
    await store.accept_inbound("acp", ("m4",), said_by("s2", "elsewhere", 4))

    said = await store.conversation_said("acp:s1")
    assert all(isinstance(line, SaidLine) for line in said)
    assert [line.at for line in said] == sorted(line.at for line in said)
    assert [(line.by, line.text) for line in said] == [
        ("user", "remember me"),
        ("bot", "First answer,"),
        ("bot", "in two blocks."),
        ("user", "who am I?"),
    ]
    assert await store.conversation_said("acp:nobody") == []
    assert [line.turn for line in said] == [first, first, first, second]


def _calling(call_id: str, *, thought: str = "") -> Message:
    blocks: list[ContentBlock] = [ThinkingContent(thinking=thought)] if thought else []
    blocks.append(ToolCallContent(id=call_id, name="web_fetch", arguments={"url": call_id}))
    return Message(role="assistant", content=blocks, stop_reason="tool_use")


def _result(call_id: str, text: str = "the page") -> Message:
    return Message(
        role="tool_result",
        content=[TextContent(text=text)],
        tool_call_id=call_id,
        tool_name="web_fetch",
    )


def _answer(words: str) -> Message:
    return Message(role="assistant", content=[TextContent(text=words)], stop_reason="end_turn")


async def test_what_each_run_added_to_the_transcript_is_read_back(store: Store) -> None:
    accepted = [
        await store.accept_inbound("acp", (f"m{n}",), said_by("s1", f"ask {n}", n))
        for n in range(1, 5)
    ]
    assert all(inbox_id is not None for inbox_id in accepted)
    one, two, three, four = (inbox_id for inbox_id in accepted if inbox_id is not None)
    session = await store.open_session("acp:s1")
    first = [_calling("a", thought="hmm"), _result("a"), _answer("First.")]
    store.start_inbox_run([one], session_id=session.session_id, run_id="r:1", user_turn=[_user(1)])
    store.append_messages_soon(session.session_id, first)
    # Two queued messages answered by one run.
    store.start_inbox_run(
        [two, three], session_id=session.session_id, run_id="r:2", user_turn=[_user(2), _user(3)]
    )
    store.append_messages_soon(session.session_id, [_answer("Second.")])
    elsewhere = await store.accept_inbound("acp", ("x",), said_by("s2", "elsewhere", 9))
    assert elsewhere is not None
    other = await store.open_session("acp:s2")
    store.start_inbox_run([elsewhere], session_id=other.session_id, run_id="o:1", user_turn=[])
    store.append_messages_soon(other.session_id, [_answer("not this one")])

    runs = await store.conversation_runs("acp:s1")
    assert all(isinstance(run, RunSteps) for run in runs)
    assert [(run.inbox_ids, list(run.messages)) for run in runs] == [
        ((one,), first),
        ((two, three), [_answer("Second.")]),
    ]

    # A compaction folds the first run into a summary and keeps the second: each run still
    # reads its own rows, once, and a run after it its own.
    history = await store.transcript(session.session_id)
    kept = history[-3:]
    summary = Message(role="user", content="[Summary of earlier conversation] ...")
    await store.compact(
        session.session_id,
        CompactionResult([summary, *kept], "summary", len(history) - 3, True, 100, 10),
    )
    store.start_inbox_run([four], session_id=session.session_id, run_id="r:3", user_turn=[_user(4)])
    store.append_messages_soon(
        session.session_id, [_calling("b"), _result("b", "404"), _answer("Done.")]
    )
    runs = await store.conversation_runs("acp:s1")
    assert [(run.inbox_ids, len(run.messages)) for run in runs] == [
        ((one,), 3),
        ((two, three), 1),
        ((four,), 3),
    ]
    assert await store.conversation_runs("acp:nobody") == []


def _user(number: int) -> Message:
    return Message(role="user", content=f"ask {number}")


# --- the upgrade from the previous schema ----------------------------------------------------


def before_the_editor_sessions(migrations: tuple[tuple[str, ...], ...]) -> int:
    return next(
        version
        for version, steps in enumerate(migrations)
        if any("CREATE TABLE editor_sessions" in statement for statement in steps)
    )


async def check_upgraded(store: Store) -> None:
    assert await store.editor_sessions("acp", limit=10) == []
    await store.keep_editor_session("acp", "s1", "/a", title="hi")
    [kept] = await store.editor_sessions("acp", limit=10)
    assert (kept.session_id, kept.cwd, kept.title) == ("s1", "/a", "hi")


async def test_sqlite_upgrades_to_the_editor_sessions(tmp_path: Path) -> None:
    previous = before_the_editor_sessions(sqlite_schema.MIGRATIONS)
    with sqlite3.connect(tmp_path / "botd.sqlite3") as conn:
        for steps in sqlite_schema.MIGRATIONS[:previous]:
            for statement in steps:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version={previous}")
    with SqliteStore.open(tmp_path) as store:
        await check_upgraded(store)


async def test_postgres_upgrades_to_the_editor_sessions(postgres_dsn: str) -> None:
    previous = before_the_editor_sessions(pg_schema.MIGRATIONS)
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
