"""Each store backend (``store``) as an ``ApprovalLedger``: a request kept once by the call
it gates, its messages recorded, decided once whoever presses first, and the transcript of an
interrupted run kept up to the call still waiting for its decision."""

from __future__ import annotations

import asyncio

from botd.chat import InboundMessage, MessageRef, Target
from botd.events import ContentBlock, Message, TextContent, ToolCallContent
from botd.store import ApprovalLedger, Store, StoredApproval

TARGET = Target("telegram", "42")


def request(
    key: str = "telegram:42/7/toolu_1", token: str = "t1", **fields: object
) -> StoredApproval:
    values: dict[str, object] = {
        "key": key,
        "token": token,
        "session_id": "s1",
        "call_id": "toolu_1",
        "tool_name": "web_fetch",
        "summary": 'web_fetch(url="https://example.com")',
        "deadline": 2_000_000_000.0,
        "created_at": 1_000.0,
    }
    values.update(fields)
    return StoredApproval(**values)  # type: ignore[arg-type]


async def test_a_request_is_kept_once_by_its_key_and_found_by_key_and_token(
    store: Store,
) -> None:
    ledger: ApprovalLedger = store
    kept = await ledger.open_approval(request())
    assert kept == request()
    # The resumed run asks again with a new token and deadline: it gets the first request.
    again = await ledger.open_approval(request(token="t2", deadline=3_000_000_000.0))
    assert again == kept
    assert await ledger.approval("telegram:42/7/toolu_1") == kept
    assert await ledger.approval_for_token("t1") == kept
    assert await ledger.approval_for_token("t2") is None
    assert await ledger.approval("other") is None

    refs = [MessageRef(TARGET, "100"), MessageRef(Target("telegram", "7", thread_id="3"), "5")]
    await ledger.approval_posted(kept.key, refs)
    found = await ledger.approval(kept.key)
    assert found is not None and found.messages == tuple(refs)


async def test_a_request_is_decided_once_and_the_second_decision_changes_nothing(
    store: Store,
) -> None:
    ledger: ApprovalLedger = store
    await ledger.open_approval(request())
    decided = await ledger.decide_approval("t1", "approved", "Alice")
    assert decided is not None
    assert (decided.state, decided.decided_by) == ("approved", "Alice")
    assert decided.decided_at is not None
    assert await ledger.decide_approval("t1", "denied", "Bob") is None
    assert await ledger.decide_approval("unknown", "denied", "Bob") is None
    found = await ledger.approval_for_token("t1")
    assert found is not None and (found.state, found.decided_by) == ("approved", "Alice")


async def test_of_decisions_made_at_once_exactly_one_is_taken(store: Store) -> None:
    ledger: ApprovalLedger = store
    await ledger.open_approval(request())
    outcomes = await asyncio.gather(
        ledger.decide_approval("t1", "approved", "Alice"),
        ledger.decide_approval("t1", "denied", "Bob"),
        ledger.decide_approval("t1", "expired"),
    )
    assert len([o for o in outcomes if o is not None]) == 1


async def test_an_interrupted_run_keeps_its_call_waiting_for_approval_and_drops_others(
    store: Store,
) -> None:
    """trim_interrupted keeps an assistant message whose call has a request (the resumed run
    goes on with it) and still drops one whose calls have none (the model is asked again)."""
    store = store
    message = InboundMessage(
        channel="telegram",
        chat_id="42",
        sender_id="u1",
        text="fetch it",
        message_id="1",
        conversation_key="telegram:42",
    )
    inbox_id = await store.accept_inbound("telegram", ["1"], message)
    assert inbox_id is not None
    session = await store.open_session("telegram:42")
    user = Message(role="user", content="fetch it")
    store.start_inbox_run([inbox_id], session_id=session.session_id, run_id="r:1", user_turn=[user])

    def calling(*ids: str) -> Message:
        calls: list[ContentBlock] = [
            ToolCallContent(id=i, name="web_fetch", arguments={"url": "u"}) for i in ids
        ]
        return Message(role="assistant", content=calls, stop_reason="tool_use")

    def result(call_id: str) -> Message:
        return Message(
            role="tool_result",
            content=[TextContent(text="done")],
            tool_call_id=call_id,
            tool_name="web_fetch",
        )

    steps = [calling("a"), result("a"), calling("b", "c"), result("b")]
    store.append_messages_soon(session.session_id, steps)
    (entry,) = await store.unfinished_entries()
    assert entry.user_turn_id is not None
    await store.open_approval(request(session_id=session.session_id, call_id="c"))
    assert await store.trim_interrupted(session.session_id, entry.user_turn_id)
    assert await store.transcript(session.session_id) == [user, *steps]

    # Without a request for its open call, the last step is dropped as before.
    store.append_messages_soon(session.session_id, [calling("d")])
    assert await store.trim_interrupted(session.session_id, entry.user_turn_id)
    assert await store.transcript(session.session_id) == [user, *steps]
