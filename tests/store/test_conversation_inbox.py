"""Each store backend (the ``store`` fixture) as the dispatcher's ``ConversationInbox``:
one conversation's entries in accept order, what a takeover reads, the conversations with
unfinished work, and the arrival signal. Only the protocols are used here: the SQLite store
(whose inbox ids serve as ``seq``) and the PostgreSQL store (a ``seq`` per conversation)
answer alike."""

from __future__ import annotations

import asyncio

from botd.chat import InboundMessage, Target
from botd.store import Store

A, B = "telegram:1", "telegram:2"


async def accepted(store: Store, key: str, n: int) -> int:
    message = InboundMessage(
        channel="telegram",
        chat_id=key.rsplit(":", 1)[1],
        sender_id="u1",
        text=f"{key} m{n}",
        message_id=f"{key}-{n}",
        conversation_key=key,
    )
    inbox_id = await store.accept_inbound("telegram", [message.message_id], message)
    assert inbox_id is not None
    return inbox_id


async def committed(store: Store) -> None:
    """Until the records queued so far are written (a read made after them)."""
    await store.unfinished_entries()


async def test_a_conversations_entries_are_pulled_in_accept_order_past_the_last_taken(
    store: Store,
) -> None:
    ids = [await accepted(store, key, n) for n, key in enumerate([A, B, A, A, B])]
    in_a = await store.accepted_after(A, 0)
    assert [e.id for e in in_a] == [ids[0], ids[2], ids[3]]
    assert all(e.message.conversation_key == A and e.state == "accepted" for e in in_a)
    assert [e.message.inbox_id for e in in_a] == [e.id for e in in_a]
    seqs = [e.seq for e in in_a]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    assert [e.id for e in await store.accepted_after(A, seqs[0])] == [ids[2], ids[3]]
    assert await store.accepted_after(A, seqs[-1]) == []
    # The same entries by place alone (inbox id and seq), without their messages.
    places = await store.accepted_places_after(A, seqs[0])
    assert places == [(e.id, e.seq) for e in in_a[1:]]
    # A running entry is no longer pulled; a finished one is gone from every read.
    session = await store.open_session(A)
    store.start_inbox_run([ids[2]], session_id=session.session_id, run_id="r")
    store.finish_inbox([ids[0]], "answered")
    await committed(store)
    assert [e.id for e in await store.accepted_after(A, 0)] == [ids[3]]
    heads = await store.accepted_heads([A, B, "telegram:3"])
    assert heads == {A: seqs[-1], B: (await store.accepted_after(B, 0))[-1].seq}


async def test_a_takeover_reads_the_unfinished_entries_and_the_pieces_of_their_runs(
    store: Store,
) -> None:
    done, waiting, other = (
        await accepted(store, A, 1),
        await accepted(store, A, 2),
        await accepted(store, B, 3),
    )
    target = Target("telegram", "1")
    sent = await store.outbox_add(done, 1, "block", target, "shown")
    store.outbox_sent(sent, ["m1"])
    unconfirmed = await store.outbox_add(done, 2, "block", target, "not confirmed")
    elsewhere = await store.outbox_add(other, 1, "block", Target("telegram", "2"), "B's")
    unanchored = await store.outbox_add(None, 1, "block", target, "of no entry")
    store.finish_inbox([done], "answered")

    entries, pieces = await store.conversation_backlog(A)
    assert [(e.id, e.state) for e in entries] == [(waiting, "accepted")]
    assert [p.id for p in pieces] == [unconfirmed]  # of a finished run too
    assert [p.id for p in (await store.conversation_backlog(B))[1]] == [elsewhere]
    assert [p.id for p in await store.unanchored_pieces()] == [unanchored]


async def test_conversations_with_unfinished_entries_are_found_the_longest_waiting_first(
    store: Store,
) -> None:
    first = await accepted(store, B, 1)
    await accepted(store, A, 2)
    finished = await accepted(store, "telegram:3", 3)
    store.finish_inbox([finished], "skipped")
    await committed(store)
    assert await store.unowned_conversations() == [B, A]  # nobody holds a lease
    store.finish_inbox([first], "answered")
    await committed(store)
    assert await store.unowned_conversations() == [A]


async def test_an_arrival_is_heard_by_a_listener(store: Store) -> None:
    arrivals = store.listen_arrivals()
    try:
        assert await asyncio.wait_for(anext(arrivals), 10) is None  # listening now
        await store.signal_arrival(A)
        assert await asyncio.wait_for(anext(arrivals), 10) == A
    finally:
        await arrivals.aclose()  # type: ignore[attr-defined]


async def test_an_entry_accepted_here_is_known_to_follow_the_last_taken_without_a_read(
    store: Store,
) -> None:
    first, second = await accepted(store, A, 1), await accepted(store, A, 2)
    seqs = [e.seq for e in await store.accepted_after(A, 0)]
    known = store.next_place(first, 0)
    if known is None:
        # SQLite: ids have gaps between a conversation's entries; the places are read.
        assert store.next_place(second, seqs[0]) is None
        return
    # PostgreSQL: each entry's seq, known once, and only right after the one before it.
    assert known == seqs[0]
    assert store.next_place(second, 0) is None  # something (the first) lies between
    assert store.next_place(second, seqs[0]) is None  # asked once: forgotten
    third = await accepted(store, A, 3)
    assert store.next_place(third, seqs[1]) == seqs[1] + 1
