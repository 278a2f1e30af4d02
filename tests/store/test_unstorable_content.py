"""Content a database cannot take as it came, on every backend (``store``): a NUL
(U+0000, which PostgreSQL refuses in any text column) is written as U+FFFD wherever it comes
from (a chat line, a model's reply, a tool's result, a job's prompt) and read back so on
both backends; a write refused for what it carries (a number out of range) fails only its
own caller, with ``ContentRefused``, or drops only its own record, and the writes queued with
it commit."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from botd.chat import InboundMessage, Target, storable
from botd.events import Message, TextContent, ToolCallContent
from botd.store import ContentRefused, ModelUsage, Store, StoredJob

NUL = "\x00"
TARGET = Target("telegram", "42")
KEY = "telegram:42"
TOO_BIG = 2**70
"""A number no integer column of either backend holds (a model's usage, a seq gone wild)."""


def line(n: int, text: str, *, direct: bool = False) -> InboundMessage:
    return InboundMessage(
        channel="telegram",
        chat_id="42",
        sender_id=f"u{n}",
        text=text,
        message_id=str(n),
        conversation_key=KEY,
        sender_name=f"Ev{NUL}e",
        is_direct=direct,
    )


def test_storable_replaces_each_nul_and_returns_clean_text_itself() -> None:
    assert storable(f"a{NUL}b{NUL}") == "a\ufffdb\ufffd"
    assert storable(f"{NUL}\ud800 é") == "\ufffd\ufffd é"
    plain, accented = "plain text", "café"
    assert storable(plain) is plain and storable(accented) is accented
    # Every text field of an inbound message, as the adapters make it.
    message = replace(line(1, f"x{NUL}"), dedupe_keys=(f"k{NUL}",), thread_id=f"t{NUL}")
    assert (message.text, message.sender_name) == ("x\ufffd", "Ev\ufffde")
    assert (message.dedupe_keys, message.thread_id) == (("k\ufffd",), "t\ufffd")


async def test_a_nul_in_a_kept_line_and_an_accepted_message_is_read_back_as_u_fffd(
    store: Store,
) -> None:
    assert not await store.keep_chatter("telegram", ["k1"], line(1, f"a{NUL}b"), limit=10)
    inbox_id = await store.accept_inbound("telegram", ["p2"], line(2, f"c{NUL}d", direct=True))
    assert inbox_id is not None
    [kept] = await store.kept_chatter(KEY)
    assert (kept.text, kept.sender_name) == ("a\ufffdb", "Ev\ufffde")
    [entry] = await store.unfinished_entries()
    assert (entry.message.text, entry.message.sender_name) == ("c\ufffdd", "Ev\ufffde")


async def test_a_nul_in_a_piece_a_transcript_and_a_job_is_read_back_as_u_fffd(
    store: Store,
) -> None:
    session = await store.open_session(KEY)
    turn = [
        Message(role="user", content=f"look{NUL}"),
        Message(
            role="assistant",
            content=[
                TextContent(text=f"fetching{NUL}"),
                ToolCallContent(id="t1", name="web_fetch", arguments={"url": f"x{NUL}"}),
            ],
            stop_reason="tool_use",
        ),
        Message(
            role="tool_result",
            content=[TextContent(text=f"page{NUL}body")],
            tool_call_id="t1",
            tool_name="web_fetch",
        ),
    ]
    # Written in one batch: every write of it commits.
    piece, _, _ = await asyncio.gather(
        store.outbox_add(None, 1, "final", TARGET, f"the{NUL}answer"),
        store.append_messages_later(session.session_id, turn),
        store.save_job(
            StoredJob(
                id="j1",
                kind="at",
                trigger={"run_date": "2030-01-01T09:00:00+00:00"},
                name=f"at 9: {NUL}",
                prompt=f"say{NUL}hi",
                target=TARGET,
                next_run_time=datetime(2030, 1, 1, 9, tzinfo=UTC),
            )
        ),
    )
    [waiting] = await store.unconfirmed_pieces()
    assert (waiting.id, waiting.text) == (piece, "the\ufffdanswer")
    stored = await store.transcript(session.session_id)
    assert stored == [
        Message(role="user", content="look\ufffd"),
        Message(
            role="assistant",
            content=[
                TextContent(text="fetching\ufffd"),
                ToolCallContent(id="t1", name="web_fetch", arguments={"url": "x\ufffd"}),
            ],
            stop_reason="tool_use",
        ),
        Message(
            role="tool_result",
            content=[TextContent(text="page\ufffdbody")],
            tool_call_id="t1",
            tool_name="web_fetch",
        ),
    ]
    [job] = await store.load_jobs()
    assert (job.name, job.prompt) == ("at 9: \ufffd", "say\ufffdhi")


async def test_a_write_refused_for_its_content_fails_alone_and_its_batch_commits(
    store: Store,
) -> None:
    session = await store.open_session(KEY)
    # One batch: a record nobody waits for that neither database can hold, an awaited write
    # that neither can hold, and writes of others around them.
    store.record_usage_soon(KEY, session.session_id, "r1", [ModelUsage("m", input=TOO_BIG)])
    store.set_offset_soon("telegram", "default", "17")
    refused, accepted, piece = await asyncio.gather(
        store.outbox_add(None, TOO_BIG, "final", TARGET, "never"),
        store.accept_inbound("telegram", ["p1"], line(1, "hello", direct=True)),
        store.outbox_add(None, 1, "final", TARGET, "kept"),
        return_exceptions=True,
    )
    assert isinstance(refused, ContentRefused)
    assert "outbox_add" in str(refused)
    assert isinstance(accepted, int) and isinstance(piece, int)
    assert [e.id for e in await store.unfinished_entries()] == [accepted]
    assert [p.text for p in await store.unconfirmed_pieces()] == ["kept"]
    assert await store.get_offset("telegram", "default") == "17"
    assert (await store.usage_totals(conversation_key=KEY)).runs == 0
    assert store.health.ok  # content is no storage fault


async def test_a_lone_surrogate_slipping_past_storable_is_refused_as_content(
    store: Store,
) -> None:
    # Every text a platform or a model hands botd is made storable where it comes in; a
    # string that skipped that is its write's problem alone, on both backends.
    with pytest.raises(ContentRefused):
        await store.outbox_add(None, 1, "final", TARGET, "half \ud800")
    assert await store.accept_inbound("telegram", ["p1"], line(2, "next")) is not None
