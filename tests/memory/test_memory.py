"""``botd.memory`` over a real SQLite store: whose memory a message reaches, the limits and
their messages, the numbering the tools and ``/memory`` share, and which items a turn's note
gives (word overlap, then the newest; bounded in count and size)."""

from __future__ import annotations

from dataclasses import replace

from botd.chat import InboundMessage
from botd.config.schema import MemorySection
from botd.memory import Memory, memory_owner, relevant
from botd.store import MemoryItem, MemoryOwner
from botd.store.sqlite import SqliteStore

DM = InboundMessage(
    channel="telegram",
    chat_id="7",
    sender_id="7",
    text="hi",
    message_id="1",
    conversation_key="telegram:7",
    is_direct=True,
)
IN_GROUP = replace(DM, chat_id="-5", conversation_key="telegram:-5", is_direct=False)
JOB = replace(DM, sender_id="scheduler", message_id="job:j1:2030-01-01T09:00:00+00:00")


def test_a_direct_chat_reaches_the_senders_memory_a_group_the_groups_a_job_none() -> None:
    assert memory_owner(DM) == MemoryOwner("telegram", "user", "7")
    assert memory_owner(IN_GROUP) == MemoryOwner("telegram", "group", "-5")
    assert memory_owner(replace(IN_GROUP, thread_id="9")) == MemoryOwner("telegram", "group", "-5")
    assert memory_owner(JOB) is None


async def test_limits_refuse_with_the_way_out_and_numbers_are_shared(
    sqlite_store: SqliteStore,
) -> None:
    memory = Memory(sqlite_store, lambda: MemorySection(max_items=2, max_chars=20))
    here = memory.here(DM)
    assert here is not None
    assert (await here.remember("likes tea")).text == "Kept as item 1 (1 of 2)."
    too_long = await here.remember("x" * 21)
    assert too_long.failed and "at most 20" in too_long.text
    assert not (await here.remember("lives in Lyon")).failed
    full = await here.remember("one more")
    assert full.failed and full.text.startswith("Memory is full (2 items)")
    assert "/memory forget <n>" in full.text
    assert (await here.recall()).text == "1. likes tea\n2. lives in Lyon"
    assert (await here.recall("Is it Lyon?")).text == "2. lives in Lyon"
    assert (await here.forget(3)).failed
    assert await memory.command(DM, "forget 1") == "Forgot item 1: likes tea"
    assert (await memory.command(DM, "forget one")).startswith("Usage: /memory lists")
    assert await memory.command(DM, "") == (
        "What I keep in your memory (1 of 2):\n1. lives in Lyon\n/memory forget <n> drops one."
    )
    assert memory.here(JOB) is None
    assert await memory.note(JOB, "tea") == ""
    assert await memory.command(IN_GROUP, "") == (
        "I keep nothing in this group's memory.\n"
        "(Your own memory is shown only in a direct chat with me.)"
    )


def test_the_note_takes_shared_words_first_then_the_newest_within_bounds() -> None:
    items = [
        MemoryItem(1, "prefers tea in the morning", "7", 0.0),
        MemoryItem(2, "has a cat named Tom", "7", 0.0),
        MemoryItem(3, "works as a nurse", "7", 0.0),
        MemoryItem(4, "x" * 40, "7", 0.0),
    ]
    chosen = relevant(items, "Should I make tea for the cat?", count=2, chars=100)
    assert [item.id for item in chosen] == [2, 1]  # one word each: the newest first
    assert [item.id for item in relevant(items, "hello", count=2, chars=100)] == [4, 3]
    # An item too long for the room left is passed over for a shorter one.
    assert [item.id for item in relevant(items, "hello", count=2, chars=36)] == [3, 2]
    assert relevant(items, "tea", count=0, chars=100) == []
