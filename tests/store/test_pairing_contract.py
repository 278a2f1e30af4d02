"""The pairing contract (``store.protocols.Pairing``) on both backends: ``pairing.json`` for
SQLite and the database for PostgreSQL. Two instances on one backend stand for two processes
(the daemon and ``botd pairing``, or two nodes)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from botd.chat import InboundMessage, Target
from botd.inbound.access import AccessPolicy
from botd.inbound.router import Router
from botd.store import Pairing, Welcome
from botd.store.pairing import (
    HELD_AT_MOST,
    MAX_PENDING_PER_CHANNEL,
    PAIRING_ALPHABET,
    PAIRING_TTL_SECONDS,
    PairingFile,
)
from botd.store.postgres.pairing import WELCOME_TAKEN_FOR, PostgresPairing
from botd.store.postgres.schema import migrate
from botd.store.sqlite import SqliteStore


@dataclass
class Clock:
    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now


Opener = Callable[[], Pairing]


@pytest.fixture(params=["file", "postgres"])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Opener, Clock]]:
    """An opener of instances on one backend, all on the same clock."""
    clock = Clock()
    if request.param == "file":
        yield (lambda: PairingFile(tmp_path / "pairing.json", clock=clock)), clock
        return
    dsn: str = request.getfixturevalue("postgres_dsn")
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await migrate(conn, "test")
    pool: AsyncConnectionPool[AsyncConnection[TupleRow]] = AsyncConnectionPool(
        dsn, min_size=1, max_size=8, open=False, kwargs={"autocommit": True}
    )
    await pool.open(wait=True)
    try:
        yield (lambda: PostgresPairing(pool, clock=clock)), clock
    finally:
        await pool.close()


async def test_a_code_is_issued_once_and_approved_in_any_case(
    backend: tuple[Opener, Clock],
) -> None:
    open_pairing, _ = backend
    daemon, admin = open_pairing(), open_pairing()
    code, issued = await daemon.issue("telegram", "42", "Ann")
    assert issued and len(code) == 8 and set(code) <= set(PAIRING_ALPHABET)
    assert await daemon.issue("telegram", "42", "Someone Else") == (code, False)
    assert [(p.code, p.channel, p.sender, p.name) for p in await admin.waiting()] == [
        (code, "telegram", "42", "Ann")
    ]
    assert await admin.approve("slack", code) is None  # another channel's code
    assert await admin.approve("telegram", "NOPE2345") is None
    assert await admin.approve("telegram", f" {code.lower()} ") == "42"
    assert await admin.approve("telegram", code) is None  # used
    assert await admin.approved() == [("telegram", "42", "Ann")]
    assert await admin.waiting() == []
    assert await admin.channels() == {"telegram"}


async def test_an_approval_elsewhere_counts_after_a_refresh(backend: tuple[Opener, Clock]) -> None:
    open_pairing, _ = backend
    daemon, admin = open_pairing(), open_pairing()
    code, _ = await daemon.issue("telegram", "42")
    assert not daemon.is_approved("telegram", "42")
    assert await admin.approve("telegram", code) == "42"
    await daemon.refresh()
    assert daemon.is_approved("telegram", "42")
    assert not daemon.is_approved("slack", "42")

    assert await admin.revoke("telegram", "42")
    assert not await admin.revoke("telegram", "42")
    await daemon.refresh()
    assert not daemon.is_approved("telegram", "42")


async def test_a_code_expires_after_an_hour(backend: tuple[Opener, Clock]) -> None:
    open_pairing, clock = backend
    pairing = open_pairing()
    code, _ = await pairing.issue("telegram", "42")
    clock.now += PAIRING_TTL_SECONDS + 1
    assert await pairing.waiting() == []
    assert await pairing.approve("telegram", code) is None
    fresh, issued = await pairing.issue("telegram", "42")
    assert issued and fresh != code


async def test_a_new_code_expires_the_oldest_beyond_the_limit(
    backend: tuple[Opener, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    open_pairing, clock = backend
    pairing = open_pairing()
    codes = []
    for n in range(MAX_PENDING_PER_CHANNEL + 1):
        clock.now += 1
        codes.append((await pairing.issue("telegram", f"s{n}"))[0])
    await pairing.issue("slack", "other")  # another channel's limit is its own
    with caplog.at_level(logging.WARNING):
        waiting = {(p.channel, p.sender) for p in await pairing.waiting()}
    assert ("telegram", "s0") not in waiting
    assert {("telegram", f"s{n}") for n in range(1, MAX_PENDING_PER_CHANNEL + 1)} <= waiting
    assert ("slack", "other") in waiting
    assert await pairing.approve("telegram", codes[0]) is None


async def test_nodes_issuing_at_once_keep_the_channel_limit(postgres_dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        await migrate(conn, "test")
    pools = [
        AsyncConnectionPool[AsyncConnection[TupleRow]](
            postgres_dsn, min_size=1, max_size=6, open=False, kwargs={"autocommit": True}
        )
        for _ in range(3)
    ]
    for pool in pools:
        await pool.open(wait=True)
    try:
        nodes = [PostgresPairing(pool) for pool in pools]
        await asyncio.gather(*(nodes[n % 3].issue("telegram", f"stranger-{n}") for n in range(30)))
        assert len(await nodes[0].waiting()) == MAX_PENDING_PER_CHANNEL
    finally:
        for pool in pools:
            await pool.close()


async def test_the_router_admits_a_sender_another_process_approved(
    backend: tuple[Opener, Clock], store: SqliteStore
) -> None:
    open_pairing, _ = backend
    accepted: list[InboundMessage] = []
    replies: list[str] = []

    async def submit(message: InboundMessage) -> None:
        accepted.append(message)

    async def reply(_target: Target, text: str) -> None:
        replies.append(text)

    daemon = open_pairing()
    router = Router(
        store, submit, reply, {"telegram": AccessPolicy(dm_policy="pairing")}, pairing=daemon
    )

    def dm(n: int) -> InboundMessage:
        return InboundMessage(
            channel="telegram",
            chat_id="42",
            sender_id="42",
            text=f"hello {n}",
            message_id=str(n),
            conversation_key="telegram:42",
            is_direct=True,
        )

    assert not (await router.handle(dm(1))).accepted
    code = replies[-1].split("pairing code ")[1].split()[0]
    assert await open_pairing().approve("telegram", code) == "42"  # botd pairing approve
    assert (await router.handle(dm(2))).accepted
    assert [m.text for m in accepted] == ["hello 2"]


async def test_what_a_waiting_sender_wrote_is_held_and_welcomed_once_approved(
    backend: tuple[Opener, Clock],
) -> None:
    """The first ``HELD_AT_MOST`` messages are held with the code; an approval made by another
    process turns them into a welcome the daemon finds, until it says it welcomed them."""
    open_pairing, _ = backend
    daemon, admin = open_pairing(), open_pairing()
    assert not await daemon.hold("telegram", "42", "m0")  # no code pending yet
    code, _ = await daemon.issue("telegram", "42", "Ann")
    held = [await daemon.hold("telegram", "42", f"m{n}") for n in range(HELD_AT_MOST + 1)]
    assert held == [True] * HELD_AT_MOST + [False]
    assert await daemon.welcomes() == []
    assert await admin.approve("telegram", code) == "42"
    assert await open_pairing().welcomes() == [
        Welcome("telegram", "42", tuple(f"m{n}" for n in range(HELD_AT_MOST)))
    ]
    await daemon.welcomed("telegram", "42")
    assert await open_pairing().welcomes() == []


async def test_a_welcome_is_handed_to_one_process_at_a_time_on_postgres(
    backend: tuple[Opener, Clock],
) -> None:
    open_pairing, clock = backend
    first, second = open_pairing(), open_pairing()
    code, _ = await first.issue("telegram", "42")
    await first.hold("telegram", "42", "m")
    await first.approve("telegram", code)
    if isinstance(first, PairingFile):
        pytest.skip("one daemon per state dir (its lock): no other process to hand it to")
    assert [w.sender for w in await first.welcomes()] == ["42"]
    assert await second.welcomes() == []  # taken by the first for a while
    clock.now += WELCOME_TAKEN_FOR + 1  # the first did not finish: the second takes it
    assert [w.held for w in await second.welcomes()] == [("m",)]
