"""What the PostgreSQL store promises beyond the shared contracts: several nodes accepting
into one conversation at once, a database server that crashes under it, and a DSN whose
password never shows."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import replace

import psycopg
import pytest

from botd.chat import InboundMessage, Target
from botd.events import Message
from botd.store import (
    ContentRefused,
    StoreError,
    StoreOpenError,
    StoreWriteError,
    UnknownSessionError,
)
from botd.store.postgres import PostgresStore
from botd.store.postgres.base import Conn, RecentFirstPool
from tests.fakes.tcp_proxy import SilentProxy
from tests.support.health_probe import free_port
from tests.support.pg_server import PostgresServer
from tests.support.waiting import until

PASSWORD = "pw-never-shown-7f3"


def message(n: int, key: str = "telegram:42") -> InboundMessage:
    return InboundMessage(
        channel="telegram",
        chat_id="42",
        sender_id=f"u{n}",
        text=f"m{n}",
        message_id=str(n),
        conversation_key=key,
    )


def with_password(dsn: str) -> str:
    """``dsn`` with a password (the tests' server trusts loopback and ignores it)."""
    return dsn.replace("botd@", f"botd:{PASSWORD}@", 1)


@pytest.fixture
async def pg(postgres_dsn: str) -> AsyncIterator[PostgresStore]:
    store = await PostgresStore.open(with_password(postgres_dsn))
    try:
        yield store
    finally:
        await store.aclose()


async def test_nodes_accepting_into_one_conversation_get_gap_free_seq_in_commit_order(
    postgres_dsn: str,
) -> None:
    """Four stores on their own pools (four nodes) accept 30 messages each into one
    conversation, each message offered by two of them (a platform redelivering to another
    node): each is accepted once, and seq counts 1..N in the order the accepts committed."""
    nodes, per_node = 4, 30
    async with AsyncExitStack() as stack:
        stores = [await PostgresStore.open(postgres_dsn, pool_size=3) for _ in range(nodes)]
        for store in stores:
            stack.push_async_callback(store.aclose)
        spans: dict[int, tuple[float, float]] = {}  # inbox id -> (started, returned)

        async def accept(store: PostgresStore, n: int) -> None:
            started = time.monotonic()
            inbox_id = await store.accept_inbound("telegram", [f"k{n}"], message(n))
            if inbox_id is not None:
                spans[inbox_id] = (started, time.monotonic())

        await asyncio.gather(
            *(
                accept(stores[(node + twice) % nodes], node * per_node + i)
                for node in range(nodes)
                for i in range(per_node)
                for twice in (0, 1)
            )
        )
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        cur = await conn.execute(
            "SELECT id, seq, message::json->>'message_id' FROM inbox "
            "WHERE conversation_key = 'telegram:42' ORDER BY seq"
        )
        rows = await cur.fetchall()
    total = nodes * per_node
    assert len(spans) == total  # each message accepted once, by one of its two offers
    assert [seq for _id, seq, _m in rows] == list(range(1, total + 1))
    assert len({m for _id, _seq, m in rows}) == total
    seq_of = {inbox_id: seq for inbox_id, seq, _m in rows}
    # An accept that returned before another started committed first: its seq is lower.
    ordered = sorted(spans.items(), key=lambda item: item[1][1])
    for earlier, (_s, returned) in ordered:
        for later, (started, _r) in spans.items():
            if started > returned:
                assert seq_of[earlier] < seq_of[later]


async def test_a_write_failing_for_its_own_reason_fails_only_its_caller(
    pg: PostgresStore,
) -> None:
    session = await pg.open_session("telegram:42")
    accepted, refused = await asyncio.gather(
        pg.accept_inbound("telegram", ["a"], message(1)),
        pg.append_messages_later("no-such-session", [Message(role="user", content="x")]),
        return_exceptions=True,
    )
    assert isinstance(accepted, int)
    assert isinstance(refused, UnknownSessionError)
    assert [e.id for e in await pg.unfinished_entries()] == [accepted]
    assert pg.health.ok
    assert (await pg.stored_session("telegram:42")) == session


async def test_a_record_refused_for_its_content_is_dropped_alone_and_its_batch_commits(
    pg: PostgresStore, caplog: pytest.LogCaptureFixture
) -> None:
    """One batch: a record the database refuses for its content (in pipeline mode it would
    fail the whole batch), an awaited write it refuses for its content (a dedupe key too big
    for the index), and writes of others before and after them."""

    async def poison(conn: Conn) -> None:
        await conn.execute("SELECT %s::integer", ("not a number",))  # SQLSTATE 22P02

    huge_key = os.urandom(50_000).hex()  # no btree index row holds it
    pg.set_offset_soon("telegram", "default", "5")
    pg._defer("poison", poison)
    pg.set_offset_soon("slack", "default", "6")
    with caplog.at_level(logging.WARNING, logger="botd.store.postgres.base"):
        accepted, refused, piece = await asyncio.gather(
            pg.accept_inbound("telegram", ["a"], message(1)),
            pg.seen_inbound("telegram", huge_key),
            pg.outbox_add(None, 1, "final", Target("telegram", "42"), "the answer"),
            return_exceptions=True,
        )
    assert isinstance(accepted, int) and isinstance(piece, int)
    assert isinstance(refused, ContentRefused)
    assert refused.kind == "seen_inbound" and "index row" in refused.reason
    assert PASSWORD not in str(refused)
    assert [e.id for e in await pg.unfinished_entries()] == [accepted]
    assert [p.text for p in await pg.unconfirmed_pieces()] == ["the answer"]
    assert await pg.get_offset("telegram", "default") == "5"
    assert await pg.get_offset("slack", "default") == "6"
    assert pg.health.ok
    dropped = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(dropped) == 1
    assert dropped[0].startswith("store: a poison record is dropped (refused for its content)")
    assert not await pg.seen_inbound("telegram", "b")  # the store goes on


async def test_a_crashed_database_degrades_the_store_which_recovers_by_itself(
    postgres_server: PostgresServer, pg: PostgresStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The server is stopped as by a crash between writes: writes fail with the server's
    words and the store is degraded; once it runs again the next write commits and clears
    it, and every accept acknowledged before the crash is still there."""
    acknowledged = [await pg.accept_inbound("telegram", [f"a{n}"], message(n)) for n in range(5)]
    postgres_server.stop("immediate")
    try:
        with caplog.at_level(logging.DEBUG):
            with pytest.raises(StoreWriteError) as failed:
                await pg.accept_inbound("telegram", ["during"], message(99))
            pg.set_offset_soon("telegram", "bot", "7")  # a record lost with the outage
            pg.commit_soon()
            with pytest.raises(StoreError):
                await pg.unfinished_entries()
    finally:
        postgres_server.start()
    assert not pg.health.ok
    assert pg.health.reason is not None and "Connection refused" in pg.health.reason
    assert failed.value.reason in pg.health.reason and "(and 1 other kind)" in pg.health.reason
    for text in (str(failed.value), pg.health.reason, caplog.text):
        assert PASSWORD not in text
    assert pg.where in str(failed.value)

    # Back: the first accept that goes through clears the fault, nothing acknowledged is lost.
    async def accepted_again() -> bool:
        try:
            return await pg.accept_inbound("telegram", ["after"], message(100)) is not None
        except StoreWriteError:
            return False

    await until(accepted_again, "an accept after the database came back")
    assert pg.health.ok
    entries = [e.id for e in await pg.unfinished_entries()]
    assert entries[:5] == acknowledged and len(entries) == 6


async def test_an_unreachable_database_is_refused_at_open_in_one_line_without_the_password(
    postgres_dsn: str,
) -> None:
    port = free_port()
    closed = with_password(postgres_dsn).rsplit(":", 1)[0] + f":{port}/nowhere"
    with pytest.raises(StoreOpenError) as refused:
        await PostgresStore.open(closed)
    text = str(refused.value)
    assert "\n" not in text and PASSWORD not in text
    assert text.startswith(f"postgresql://botd@127.0.0.1:{port}/nowhere: cannot be opened (")
    assert "check store.dsn" in text


async def test_a_node_saving_an_older_offset_never_moves_the_shared_one_back(
    postgres_dsn: str,
) -> None:
    """Two nodes save one account's Telegram offset: the one that polled before a takeover
    (paused meanwhile) saves its older position last, and the offset stays where the new
    poller put it; a position that is not a number is saved as given."""
    async with AsyncExitStack() as stack:
        old, new = [await PostgresStore.open(postgres_dsn, pool_size=2) for _ in range(2)]
        for node in (old, new):
            stack.push_async_callback(node.aclose)
        old.set_offset_soon("telegram", "main", "9")
        assert await old.get_offset("telegram", "main") == "9"
        new.set_offset_soon("telegram", "main", "12")
        assert await new.get_offset("telegram", "main") == "12"
        old.set_offset_soon("telegram", "main", "10")
        assert await old.get_offset("telegram", "main") == "12"
        new.set_offset_soon("telegram", "main", "100")  # more digits: compared as numbers
        assert await new.get_offset("telegram", "main") == "100"
        new.set_offset_soon("slack", "main", "cursor-b")
        old.set_offset_soon("slack", "main", "cursor-a")
        assert await old.get_offset("slack", "main") == "cursor-a"


async def test_records_sent_in_one_query_are_written_as_given(
    pg: PostgresStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Records go to the server rendered here, several in one query (``_in_few_round_trips``):
    text that looks like placeholders, quotes, backslashes, a NUL and non-ASCII come back as
    they were written (the NUL as U+FFFD, as every column keeps it), in order."""
    caplog.set_level(logging.DEBUG, logger="botd.store.postgres.base")
    session = await pg.open_session("telegram:42")
    texts = ["100% %s %(x)s {0}", "it's \\ 'quoted' \"twice\"", "nul\x00here", "ünï ✓ 🎉"]
    for text in texts:
        pg.append_messages_soon(session.session_id, [Message(role="user", content=text)])
    pg.set_offset_soon("telegram", "default", "%s'7")
    transcript = await pg.transcript(session.session_id)
    assert [m.content for m in transcript] == [t.replace("\x00", "\ufffd") for t in texts]
    assert await pg.get_offset("telegram", "default") == "%s'7"
    assert pg.health.ok
    assert not [r for r in caplog.records if "with care" in r.getMessage()]


async def test_an_awaited_write_rides_with_the_start_of_its_transaction(
    pg: PostgresStore, caplog: pytest.LogCaptureFixture
) -> None:
    """An awaited write's first statement (an accept) goes in one query with the batch's
    start, its lock and the records queued ahead of it, rendered here (``_Leading``): the
    write reads its own result (an id, or a repeat told apart), the text accepted comes back
    as it was (placeholder-like text, quotes, a backslash, a NUL as U+FFFD), the records
    ahead are written, and nothing is written again with care."""
    caplog.set_level(logging.DEBUG, logger="botd.store.postgres.base")
    session = await pg.open_session("telegram:42")
    pg.append_messages_soon(session.session_id, [Message(role="user", content="ahead")])
    text = "100% %s %(x)s it's \\ 'q' nul\x00 ünï ✓"
    first = await pg.accept_inbound("telegram", ["a1"], replace(message(1), text=text))
    assert first is not None
    assert await pg.accept_inbound("telegram", ["a1", "a2"], message(2)) is None
    [entry] = await pg.unfinished_entries()
    assert entry.id == first
    assert entry.message.text == text.replace("\x00", "\ufffd")
    assert [m.content for m in await pg.transcript(session.session_id)] == ["ahead"]
    assert pg.health.ok
    assert not [r for r in caplog.records if "with care" in r.getMessage()]


async def test_the_pool_hands_out_the_connection_given_back_last(postgres_dsn: str) -> None:
    """A connection used again soon after it came back is handed out without a check's round
    trip: the store's pool hands out the one given back last, not the one idle longest."""
    async with RecentFirstPool(postgres_dsn, min_size=3, max_size=3, open=False) as pool:
        await pool.wait()
        taken = [await pool.getconn() for _ in range(3)]
        for conn in taken:
            await pool.putconn(conn)
        again = await pool.getconn()
        assert again is taken[-1]
        await pool.putconn(again)
        assert await pool.getconn() is again


async def test_a_listener_whose_server_went_silent_listens_again_on_a_new_connection(
    postgres_dsn: str,
) -> None:
    """The arrivals' listener sleeps until its socket has something to read; after a third of
    the TTL with nothing, it asks the server, and a server that does not answer (a network
    gone silent) costs it that connection: it listens again on a new one (None: arrivals may
    have been missed meanwhile) and hears the arrivals after."""
    async with SilentProxy.to_database(postgres_dsn) as proxy:
        listening = await PostgresStore.open(proxy.dsn(postgres_dsn), lease_ttl=1.5)
        telling = await PostgresStore.open(postgres_dsn)
        arrivals = listening.listen_arrivals()
        try:
            assert await asyncio.wait_for(anext(arrivals), 10) is None  # listening
            await telling.signal_arrival("telegram:1")
            assert await asyncio.wait_for(anext(arrivals), 10) == "telegram:1"
            taken = proxy.taken
            proxy.cut()
            again = asyncio.ensure_future(anext(arrivals))
            await until(lambda: proxy.taken > taken, "the listener connecting again")
            proxy.mend()
            assert await asyncio.wait_for(again, 30) is None  # on a new connection
            await telling.signal_arrival("telegram:2")
            assert await asyncio.wait_for(anext(arrivals), 10) == "telegram:2"
        finally:
            await arrivals.aclose()  # type: ignore[attr-defined]
            await listening.aclose()
            await telling.aclose()
