"""A write a database refuses for what it carries, on every backend (``any_store``): a value
it cannot hold (a number out of range, text it cannot encode) fails only its own caller, with
``ContentRefused``, or drops only its own record, and the writes queued with it commit."""

from __future__ import annotations

import asyncio

import pytest

from botd.chat import InboundMessage, Target
from botd.store import ContentRefused, ModelUsage, Store

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
        sender_name=f"User {n}",
        is_direct=direct,
    )


async def test_a_write_refused_for_its_content_fails_alone_and_its_batch_commits(
    any_store: Store,
) -> None:
    session = await any_store.open_session(KEY)
    # One batch: a record nobody waits for that neither database can hold, an awaited write
    # that neither can hold, and writes of others around them.
    any_store.record_usage_soon(KEY, session.session_id, "r1", [ModelUsage("m", input=TOO_BIG)])
    any_store.set_offset_soon("telegram", "default", "17")
    refused, accepted, piece = await asyncio.gather(
        any_store.outbox_add(None, TOO_BIG, "final", TARGET, "never"),
        any_store.accept_inbound("telegram", ["p1"], line(1, "hello", direct=True)),
        any_store.outbox_add(None, 1, "final", TARGET, "kept"),
        return_exceptions=True,
    )
    assert isinstance(refused, ContentRefused)
    assert "outbox_add" in str(refused)
    assert isinstance(accepted, int) and isinstance(piece, int)
    assert [e.id for e in await any_store.unfinished_entries()] == [accepted]
    assert [p.text for p in await any_store.unconfirmed_pieces()] == ["kept"]
    assert await any_store.get_offset("telegram", "default") == "17"
    assert (await any_store.usage_totals(conversation_key=KEY)).runs == 0
    assert any_store.health.ok  # content is no storage fault


async def test_a_lone_surrogate_slipping_past_storable_is_refused_as_content(
    any_store: Store,
) -> None:
    # Every text a platform or a model hands botd is made storable where it comes in; a
    # string that skipped that is its write's problem alone, on both backends.
    with pytest.raises(ContentRefused):
        await any_store.outbox_add(None, 1, "final", TARGET, "half \ud800")
    assert await any_store.accept_inbound("telegram", ["p1"], line(2, "next")) is not None
