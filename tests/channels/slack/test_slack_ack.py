"""Slack is acknowledged only once the message is in the durable inbox (Socket Mode and HTTP).

Bolt runs the listener before it acks: a delivery whose accept could not be written (here a
store whose first write fails, as a full disk would) is left unacknowledged, Slack delivers it
again, and it is accepted and answered once.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest

from botd.channels.base import Ack
from botd.channels.slack.adapter import SlackAdapter
from botd.chat import InboundMessage, Target
from botd.inbound.router import Router
from botd.store.sqlite import SqliteStore
from tests.channels.routed import OPEN, through_router
from tests.channels.slack.harness import Inbox, message_event, post_http, slack_adapter
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.support.waiting import until


class FailingStore(SqliteStore):
    """A real store whose next ``failures`` accepts fail as a full disk would."""

    failures = 0

    async def accept_inbound(
        self,
        channel: str,
        keys: Sequence[str],
        message: InboundMessage,
        *,
        consume_chatter: tuple[str, int] | None = None,
        unless_chatter_kept: bool = False,
        chatter_read_by: str | None = None,
    ) -> int | None:
        if self.failures:
            self.failures -= 1
            raise sqlite3.OperationalError("database or disk is full")
        return await super().accept_inbound(
            channel,
            keys,
            message,
            consume_chatter=consume_chatter,
            unless_chatter_kept=unless_chatter_kept,
            chatter_read_by=chatter_read_by,
        )

    def inbox_count(self) -> int:
        return int(self._connection().execute("SELECT count(*) FROM inbox").fetchone()[0])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FailingStore]:
    opened = FailingStore(tmp_path / "botd.db")
    yield opened
    opened.close()


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


class AckWatch:
    """The sink in front of the router: notes whether Slack was acked before it returned."""

    def __init__(self, fake: FakeSlack, store: SqliteStore, inbox: Inbox) -> None:
        self.acked_at_entry: list[int] = []
        self.failed = 0
        self._fake = fake
        self._route = through_router(store, inbox, "slack")

    async def __call__(self, message: InboundMessage, *, ack: Ack | None = None) -> None:
        self.acked_at_entry.append(len(self._fake.acks))
        try:
            await self._route(message, ack=ack)
        except Exception:
            self.failed += 1
            raise


async def test_socket_mode_acks_after_the_accept_and_not_after_a_failed_one(
    fake: FakeSlack, store: FailingStore
) -> None:
    inbox = Inbox()
    watch = AckWatch(fake, store, inbox)
    adapter: SlackAdapter = slack_adapter(fake)
    await adapter.start(watch)
    try:
        body = event_callback(message_event("D1", "500.000001", "keep this"), event_id="EvKEEP")
        store.failures = 1
        lost = await fake.send_event(body)
        await until(lambda: watch.failed == 1, "the failed accept")
        # Slack redelivers what was not acknowledged.
        again = await fake.send_event(body, retry_attempt=1)
        await until(lambda: again in fake.acks, "the redelivery acked")
        assert lost not in fake.acks
        assert watch.acked_at_entry == [0, 0]  # nothing was acked before the sink returned
        assert [m.text for m in inbox.messages] == ["keep this"]
        assert store.inbox_count() == 1
        # A further retry is acknowledged and dropped as seen.
        later = await fake.send_event(body, retry_attempt=2)
        await until(lambda: later in fake.acks, "the second retry acked")
        assert len(inbox.messages) == 1 and store.inbox_count() == 1
    finally:
        await adapter.stop()


async def test_http_answers_500_until_the_message_is_accepted(
    fake: FakeSlack, store: FailingStore
) -> None:
    inbox = Inbox()
    adapter = slack_adapter(fake, mode="http", http_port=0)
    await adapter.start(through_router(store, inbox, "slack"))
    try:
        body = event_callback(message_event("D1", "600.000001", "over http"), event_id="EvHTTP")
        store.failures = 1
        status, _ = await post_http(adapter, body)
        assert status == 500  # Slack retries a delivery not answered 2xx
        assert inbox.messages == [] and store.inbox_count() == 0
        status, _ = await post_http(adapter, body, **{"X-Slack-Retry-Num": "1"})
        assert status == 200
        assert [m.text for m in inbox.messages] == ["over http"]
        assert store.inbox_count() == 1
    finally:
        await adapter.stop()


async def test_the_ack_does_not_wait_for_what_follows_the_accept(
    fake: FakeSlack, store: FailingStore
) -> None:
    # The session takes long over the message (a /stop waiting for a run, say): Slack is
    # acknowledged once the message is accepted, not when the session is done with it.
    release = asyncio.Event()
    handed: list[InboundMessage] = []

    async def slow_session(message: InboundMessage) -> None:
        handed.append(message)
        await release.wait()

    async def no_reply(target: Target, text: str) -> None:
        raise AssertionError(text)

    router = Router(store, slow_session, no_reply, {"slack": OPEN})
    adapter = slack_adapter(fake)
    await adapter.start(router.handle)
    try:
        body = event_callback(message_event("D1", "700.000001", "/stop"), event_id="EvSLOW")
        envelope = await fake.send_event(body)
        await until(lambda: envelope in fake.acks, "the ack")
        assert [m.text for m in handed] == ["/stop"] and store.inbox_count() == 1
        release.set()
    finally:
        await adapter.stop()
