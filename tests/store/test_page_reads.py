"""What the web page reads of the store (``PageReads``), on both backends: the
conversations with their queue, latest first; one conversation's messages and pieces in
order with their delivery state (a pending piece of a finished run is in doubt; presses and
other conversations left out); the pending approval requests only."""

from __future__ import annotations

from dataclasses import replace

from botd.chat import InboundMessage, Press, Target
from botd.store import Store, StoredApproval


def said(chat: str, text: str, number: int) -> InboundMessage:
    return InboundMessage(
        channel="telegram",
        chat_id=chat,
        sender_id="42",
        sender_name="Ann",
        text=text,
        message_id=f"m{number}",
        conversation_key=f"telegram:{chat}",
    )


async def test_conversations_and_their_pieces_with_delivery_states(store: Store) -> None:
    target = Target("telegram", "7")
    first = await store.accept_inbound("telegram", ("m1",), said("7", "<script>hi</script>", 1))
    assert first is not None
    sent = await store.outbox_add(first, 1, "block", target, "Sent block.")
    store.outbox_sent(sent, ["r1"])
    failed = await store.outbox_add(first, 2, "block", target, "Refused block.")
    store.outbox_failed(failed)
    await store.outbox_add(first, 3, "final", target, "Never confirmed.")
    store.finish_inbox([first], "answered")
    press = replace(said("7", "(pressed)", 2), press=Press("q", "approval:x:approve", "r1"))
    pressed = await store.accept_inbound("telegram", ("m2",), press)
    assert pressed is not None
    store.finish_inbox([pressed], "answered")
    second = await store.accept_inbound("telegram", ("m3",), said("7", "and now?", 3))
    assert second is not None
    store.start_inbox_run([second], session_id="s1", run_id="run-1")
    await store.outbox_add(second, 1, "block", target, "Being sent.")
    waiting = await store.accept_inbound("telegram", ("m4",), said("8", "elsewhere", 4))
    assert waiting is not None

    pieces = await store.conversation_pieces("telegram:7")
    assert [(p.by, p.text, p.delivery) for p in pieces] == [
        ("user", "<script>hi</script>", "received"),
        ("bot", "Sent block.", "sent"),
        ("bot", "Refused block.", "failed"),
        ("bot", "Never confirmed.", "in doubt"),
        ("user", "and now?", "received"),
        ("bot", "Being sent.", "pending"),
    ]
    assert pieces[0].sender == "Ann" and pieces[1].turn == first
    assert await store.conversation_pieces("telegram:nobody") == []

    summaries = await store.conversation_summaries()
    assert [(s.key, s.channel, s.waiting, s.running) for s in summaries] == [
        ("telegram:8", "telegram", 1, 0),
        ("telegram:7", "telegram", 0, 1),
    ]
    assert summaries[0].last_activity >= summaries[1].last_activity
    assert len(await store.conversation_summaries(limit=1)) == 1


async def test_only_pending_approvals_are_listed_oldest_first(store: Store) -> None:
    def request(key: str, at: float) -> StoredApproval:
        return StoredApproval(
            key=f"telegram:7/1/{key}",
            token=f"t-{key}",
            session_id="s1",
            call_id=key,
            tool_name="exec",
            summary="exec(command=ls)",
            deadline=at + 600,
            created_at=at,
        )

    await store.open_approval(request("later", 200.0))
    await store.open_approval(request("first", 100.0))
    await store.open_approval(request("done", 50.0))
    await store.decide_approval("t-done", "approved", "Ann")
    pending = await store.pending_approvals()
    assert [a.token for a in pending] == ["t-first", "t-later"]
    assert all(a.state == "pending" for a in pending)
