"""A message the store refuses for what it carries (``ContentRefused``), through the router on
the PostgreSQL store, which refuses a value too large for one of its indexes: the message is
given up once (``handle`` returns, so the adapter confirms it and the platform's next updates
flow), its sender told in one line when it was for the bot, and the next messages are taken
as usual. Taking it again would fail the same way: it is never left for the platform to hand
over again and again ahead of everything after it."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from botd.inbound.access import AccessPolicy
from botd.inbound.router import CONTENT_REFUSED_NOTICE, Router
from botd.store.postgres import PostgresStore
from tests.inbound.routing import Recorder, dm, group

TOO_BIG = os.urandom(50_000).hex()
"""An id no index row of PostgreSQL holds."""


@pytest.fixture
async def pg(migrated_postgres_dsn: str) -> AsyncIterator[PostgresStore]:
    store = await PostgresStore.open(migrated_postgres_dsn)
    try:
        yield store
    finally:
        await store.aclose()


def routing(store: PostgresStore, rec: Recorder) -> Router:
    policy = AccessPolicy(dm_policy="open", group_policy="open")
    return Router(store, rec.submit, rec.reply, {"telegram": policy})


async def test_a_dm_the_store_refuses_is_told_once_and_the_next_one_is_accepted(
    pg: PostgresStore, caplog: pytest.LogCaptureFixture
) -> None:
    rec = Recorder()
    router = routing(pg, rec)
    refused = replace(dm("hello", n=1), dedupe_keys=(TOO_BIG,))
    with caplog.at_level(logging.INFO, logger="botd.inbound.router"):
        first = await router.handle(refused)
        again = await router.handle(refused)  # the platform hands it over once more
    assert not first.accepted and not again.accepted
    assert first.reason.startswith("refused by the store for its content (index row")
    assert rec.replies == [(refused.reply_target(), CONTENT_REFUSED_NOTICE)]  # told once
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert errors[0].startswith("message 1 in telegram:alice could not be taken: refused")
    assert TOO_BIG not in errors[0]

    later = await router.handle(dm("are you there?", n=2))
    assert later.accepted
    assert [m.text for m in rec.submitted] == ["are you there?"]
    assert pg.health.ok


async def test_a_group_line_the_store_refuses_is_not_kept_and_not_told(
    pg: PostgresStore,
) -> None:
    rec = Recorder()
    router = routing(pg, rec)
    # Its conversation key is too big for the chatter's index: the line is not kept, its
    # ids are recorded (a redelivery is dropped as seen).
    line = replace(group("lunch?", n=1), conversation_key=f"telegram:{TOO_BIG}")
    kept = await router.handle(line)
    assert not kept.accepted
    assert not (await router.handle(line)).accepted
    assert rec.replies == []  # the bot was not addressed: nothing is said in the group
    assert await pg.seen_inbound("telegram", "default:g1:1")
    # A line whose ids, too, are refused: given up all the same, without a word.
    both = replace(line, dedupe_keys=(TOO_BIG,))
    assert not (await router.handle(both)).accepted
    assert rec.replies == []

    mention = await router.handle(group("so when?", mention=True, n=2))
    assert mention.accepted
    assert [m.text for m in rec.submitted] == ["so when?"]
