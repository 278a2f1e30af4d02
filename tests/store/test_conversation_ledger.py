"""Each store backend (the ``store`` fixture) as a ``ConversationLedger``: the transitions of
``Promise`` written through it read back as the state machine says (``botd.conversation``)."""

from __future__ import annotations

from botd.chat import InboundMessage, MessageRef, Target
from botd.conversation.promise import Promise
from botd.delivery import Outgoing
from botd.events import Message
from botd.store import StatusLine, Store, StoredPreview
from botd.store.postgres import PostgresStore
from botd.store.protocols import ConversationLedger
from botd.store.sqlite import SqliteStore
from botd.subscriber import BlockReply

TARGET = Target("console", "c1")


async def inbox_state(store: Store, inbox_id: int) -> str | None:
    """An entry's state as the backend's own helper reads it (no protocol asks for one)."""
    if isinstance(store, SqliteStore):
        return store.inbox_state(inbox_id)
    assert isinstance(store, PostgresStore)
    return await store.inbox_state(inbox_id)


async def accepted(store: Store, n: int) -> int:
    message = InboundMessage(
        channel="console",
        chat_id="c1",
        sender_id="u1",
        text=f"m{n}",
        message_id=f"c1-{n}",
        conversation_key="console:c1",
    )
    inbox_id = await store.accept_inbound("console", [message.message_id], message)
    assert inbox_id is not None
    return inbox_id


async def test_entries_go_accepted_running_answered_through_the_ledger(store: Store) -> None:
    ledger: ConversationLedger = store
    promise = Promise(ledger)
    first, second = await accepted(store, 1), await accepted(store, 2)
    session = await ledger.open_session("console:c1")
    turn = [Message(role="user", content="m1")]
    promise.running([first], session_id=session.session_id, run_id="r:1", user_turn=turn)
    entries = await ledger.unfinished_entries()
    assert [(e.id, e.state) for e in entries] == [(first, "running"), (second, "accepted")]
    assert entries[0].user_turn_id is not None
    assert await ledger.transcript(session.session_id) == turn
    promise.answered([first])
    promise.skipped([second, None])
    assert await ledger.unfinished_entries() == []
    assert [await inbox_state(store, first), await inbox_state(store, second)] == [
        "answered",
        "skipped",
    ]


async def test_pieces_go_written_then_sent_or_failed_and_resume_supersedes_or_sends(
    store: Store,
) -> None:
    ledger: ConversationLedger = store
    promise = Promise(ledger)
    done, going_on = await accepted(store, 1), await accepted(store, 2)
    session = await ledger.open_session("console:c1")
    for inbox_id in (done, going_on):
        promise.running(
            [inbox_id],
            session_id=session.session_id,
            run_id=f"r:{inbox_id}",
            user_turn=[Message(role="user", content=f"m{inbox_id}")],
        )
    finished, ongoing = promise.journal(done, TARGET), promise.journal(going_on, TARGET)
    sent = await finished.written(Outgoing(1, "block", BlockReply(text="one")), "one")
    refused = await finished.written(Outgoing(2, "block", BlockReply(text="two")), "two")
    unconfirmed = await finished.written(Outgoing(3, "final", BlockReply(text="three")), "three")
    cut = await ongoing.written(Outgoing(1, "block", BlockReply(text="four")), "four")
    finished.sent(sent, [])
    finished.failed(refused)
    promise.answered([done])
    assert await promise.posted_before(done) == ["one"]

    # As the next holder finds it (a restart's takeover, or another node's).
    plan = await promise.plan(*await store.conversation_backlog("console:c1"))
    assert [e.id for e in plan.entries] == [going_on]
    assert set(plan.resumed_turns) == {going_on}  # its run goes on from its transcript
    assert [p.id for p in plan.unsent] == [unconfirmed]  # a finished run's: sent at once
    (waiting,) = await ledger.unconfirmed_pieces()
    assert waiting.id == unconfirmed
    assert waiting.written_at > 0  # when it was written: a keyed resend's look-back starts there
    assert cut not in [p.id for p in plan.unsent]  # superseded: its run makes it again


async def test_a_status_line_is_kept_until_forgotten(store: Store) -> None:
    ledger: ConversationLedger = store
    thread = Target("slack", "D1", thread_id="17.000001")
    line = StatusLine("message", Target("telegram", "42"), "9")
    assistant = StatusLine("assistant", thread, "17.000001")
    assert await ledger.status_lines("telegram:42") == []

    await ledger.keep_status_line("telegram:42", line)
    await ledger.keep_status_line("telegram:42", line)  # kept again: still one
    await ledger.keep_status_line("slack:D1:thread:17.000001", assistant)
    assert await ledger.status_lines("telegram:42") == [line]
    assert await ledger.status_lines("slack:D1:thread:17.000001") == [assistant]

    await ledger.forget_status_line("telegram:42", "message", "9")
    await ledger.forget_status_line("telegram:42", "message", "9")  # already gone: fine
    assert await ledger.status_lines("telegram:42") == []
    assert await ledger.status_lines("slack:D1:thread:17.000001") == [assistant]


async def test_a_runs_preview_is_kept_by_its_anchor_replaced_as_it_grows_and_pruned_after(
    store: Store,
) -> None:
    ledger: ConversationLedger = store
    anchor, other = await accepted(store, 1), await accepted(store, 2)
    assert await ledger.preview_of(anchor) is None
    thread = Target("slack", "D1", thread_id="1700000000.000001")
    first = MessageRef(thread, "1700000000.000002")
    await ledger.preview_keep(anchor, [first], streaming=True)
    kept = await ledger.preview_of(anchor)
    assert kept == StoredPreview(refs=(first,), streaming=True)

    second = MessageRef(thread, "1700000000.000003")
    await ledger.preview_keep(anchor, [first, second])  # the stream stopped, a piece followed
    assert await ledger.preview_of(anchor) == StoredPreview(refs=(first, second))
    assert await ledger.preview_of(other) is None

    # Pruned only once the run's entry is finished (a running one may still resume).
    await store.prune_finished(-1.0)
    assert await ledger.preview_of(anchor) is not None
    Promise(ledger).answered([anchor])
    await store.prune_finished(-1.0)
    assert await ledger.preview_of(anchor) is None
