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


async def test_a_grant_stands_once_decided_always_until_revoked_and_the_pruner_keeps_it(
    store: Store,
) -> None:
    ledger: ApprovalLedger = store
    chat = "telegram:default:42"
    granting = request(token="g1", grant="digest-1", grant_chat=chat)
    await ledger.open_approval(granting)
    # Pending, or decided otherwise, a request with a grant key grants nothing.
    assert await ledger.granted("digest-1") is None
    await ledger.open_approval(
        request(key="telegram:42/8/toolu_2", token="g2", grant="digest-2", grant_chat=chat)
    )
    await ledger.decide_approval("g2", "approved", "Alice")
    assert await ledger.granted("digest-2") is None

    decided = await ledger.decide_approval("g1", "always", "Alice")
    assert decided is not None and decided.grant == "digest-1"
    standing = await ledger.granted("digest-1")
    assert standing is not None and standing.decided_by == "Alice"
    assert [grant.token for grant in await ledger.grants(chat)] == ["g1"]
    assert await ledger.grants("telegram:default:43") == []

    # Old decided requests are pruned; a standing grant is not.
    await store.prune_finished(-60.0)
    assert await ledger.approval_for_token("g2") is None
    assert await ledger.granted("digest-1") is not None

    assert await ledger.revoke_grant("g1", "Bob") is True
    assert await ledger.revoke_grant("g1", "Bob") is False
    assert await ledger.granted("digest-1") is None
    assert await ledger.grants(chat) == []
    revoked = await ledger.approval_for_token("g1")
    assert revoked is not None and (revoked.state, revoked.decided_by) == ("revoked", "Bob")
    # A request without a grant key, decided always (an ACP agent's), is no grant to revoke.
    await ledger.open_approval(request(key="telegram:42/9/toolu_3", token="g3"))
    await ledger.decide_approval("g3", "always", "Alice")
    assert await ledger.revoke_grant("g3", "Bob") is False
