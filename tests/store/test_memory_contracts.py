"""What every store backend (the ``store`` fixture, one run per backend) promises through
``MemoryLedger``: a memory is its owner's alone, bounded in count, and a person's rows are
those of their channel and author (the key a later erasure deletes by)."""

from __future__ import annotations

from botd.store import MemoryLedger, MemoryOwner, Store

ALICE = MemoryOwner("telegram", "user", "1")
BOB = MemoryOwner("telegram", "user", "2")
GROUP = MemoryOwner("telegram", "group", "-100")


async def test_a_memory_keeps_what_it_was_given_for_its_owner_alone(store: Store) -> None:
    ledger: MemoryLedger = store
    first = await ledger.remember(ALICE, "1", "likes tea", max_items=5)
    second = await ledger.remember(ALICE, "1", "lives in Lyon", max_items=5)
    assert first is not None and second is not None
    await ledger.remember(GROUP, "1", "meets on Fridays", max_items=5)
    mine = await ledger.memories(ALICE)
    assert [(item.text, item.author) for item in mine] == [
        ("likes tea", "1"),
        ("lives in Lyon", "1"),
    ]
    assert [item.id for item in mine] == [first.id, second.id]
    assert await ledger.memories(BOB) == []
    # The same user id on another channel instance, and a group with that id, are others.
    assert await ledger.memories(MemoryOwner("slack", "user", "1")) == []
    assert await ledger.memories(MemoryOwner("telegram", "group", "1")) == []
    assert [item.text for item in await ledger.memories(GROUP)] == ["meets on Fridays"]


async def test_a_full_memory_takes_nothing_more(store: Store) -> None:
    ledger: MemoryLedger = store
    for n in range(3):
        assert await ledger.remember(ALICE, "1", f"fact {n}", max_items=3) is not None
    assert await ledger.remember(ALICE, "1", "one too many", max_items=3) is None
    assert [item.text for item in await ledger.memories(ALICE)] == ["fact 0", "fact 1", "fact 2"]
    # Another owner's memory has room of its own.
    assert await ledger.remember(BOB, "2", "fact", max_items=3) is not None


async def test_forgetting_drops_one_item_of_its_owner_only(store: Store) -> None:
    ledger: MemoryLedger = store
    kept = await ledger.remember(ALICE, "1", "likes tea", max_items=5)
    dropped = await ledger.remember(ALICE, "1", "likes coffee", max_items=5)
    assert kept is not None and dropped is not None
    # Bob cannot drop Alice's item by its id.
    assert not await ledger.forget_memory(BOB, dropped.id)
    assert await ledger.forget_memory(ALICE, dropped.id)
    assert not await ledger.forget_memory(ALICE, dropped.id)
    assert [item.id for item in await ledger.memories(ALICE)] == [kept.id]
    # A forgotten item frees its place.
    for n in range(4):
        assert await ledger.remember(ALICE, "1", f"fact {n}", max_items=5) is not None
    assert await ledger.remember(ALICE, "1", "full", max_items=5) is None
