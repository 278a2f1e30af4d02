"""The database stopped under a running botd (``pg_ctl stop -m immediate``: every connection
cut, as a crashed server) and started again: ``botd run`` on ``store.backend: postgres`` with
Telegram's loopback Bot API and the fake model.

Checked on what the platform and the health endpoint saw: on PostgreSQL botd is a cluster
node, so its leases cannot be renewed while the database is away. The answer under way stops
sending once its conversation's lease runs out (no send past the lease's end) and is resumed
when the database is back, each piece once and the "interrupted" notice once; the poller
stops once its lease runs out, so messages sent while the database was away are not
confirmed to Telegram (no offset asked for passes them) and are answered once it is back
and the lease is claimed again; ``/healthz`` says the store is down, then well again, the
poller's lease held again, without a restart; and a restart after it all resumes nothing and
sends nothing again (what the store recorded while the database was away was written once
it came back). The server is the test's own (``running_postgres``), so the worker's shared
one is never stopped.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from botd.conversation.notices import INTERRUPTED_NOTICE
from botd.inbound.router import STORE_FAILED_NOTICE
from tests.conversation.crash import PARAGRAPHS, TOKEN, crash_config
from tests.fakes.anthropic_api import FakeAnthropicAPI, Reply, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_process import RunningDaemon, ended, reap, start_daemon
from tests.support.health_probe import free_port
from tests.support.pg_server import PostgresServer, running_postgres
from tests.support.waiting import until

DM = 4242
OTHER = 4343
"""A second chat: its message sent while the database is away too."""
KEY = re.compile(r"\bm\d\b")
POLLER = "telegram:default"
"""The lease under which the node polls Telegram."""
LAST = PARAGRAPHS[-1]


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A server of this test's own: it is stopped and started again."""
    with running_postgres() as server:
        yield server


def answer(body: dict[str, Any]) -> Reply:
    """The long story for ``m2`` (slow, so the database goes away in the middle of it),
    ``Answer to mN.`` for the others."""
    said = json.dumps(body.get("messages", [])[-1:])
    found = KEY.findall(said)
    key = found[-1] if found else "?"
    if key == "m2":
        return stream(text(*(p + "\n\n" for p in PARAGRAPHS)), delay=0.4)
    return stream(text(f"Answer to {key}."))


async def healthz(port: int) -> tuple[int, dict[str, Any]]:
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/healthz") as resp,
        ):
            return resp.status, await resp.json()
    except aiohttp.ClientError:
        return 0, {}


async def start(config: Path, cwd: Path, dsn: str) -> RunningDaemon:
    return await start_daemon(
        config,
        cwd,
        ANTHROPIC_TEST_KEY="sk-ant-test",
        TELEGRAM_TEST_TOKEN=TOKEN,
        BOTD_DATABASE_URL=dsn,
    )


def held_leases(health: dict[str, Any]) -> list[str]:
    """The leases ``/healthz`` says the node holds."""
    return [str(lease["name"]) for lease in health.get("node", {}).get("leases", [])]


def texts(telegram: FakeTelegramAPI) -> list[str]:
    return [str(c.params["text"]) for c in telegram.calls_to("sendMessage", ok_only=True)]


async def test_the_database_stopped_mid_run_and_started_again_loses_and_repeats_nothing(
    tmp_path: Path, own_server: PostgresServer
) -> None:
    dsn = own_server.new_database()
    port = free_port()
    store = (
        f"health: {{enabled: true, port: {port}}}\n"
        "store:\n  backend: postgres\n  dsn: ${BOTD_DATABASE_URL}\n  lease_ttl: 3\n"
    )
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.responder = answer
        config = crash_config(tmp_path, tmp_path / "state", telegram, model, store)
        # Its own health endpoint, and each message its own run and answer.
        text_ = config.read_text(encoding="utf-8").replace("health: {enabled: false}\n", "")
        text_ = text_.replace("agent:\n", "agent:\n  queue_mode: followup\n")
        config.write_text(text_, encoding="utf-8")
        daemon = await start(config, tmp_path, dsn)
        try:

            async def well() -> bool:
                return (await healthz(port))[0] == 200

            await until(well, "the daemon up and well", guard=60)
            telegram.push_text(DM, "m1 hello")
            await until(lambda: "Answer to m1." in texts(telegram), "m1 answered")

            telegram.push_text(DM, "m2 tell me the long story")
            await until(lambda: PARAGRAPHS[2] in texts(telegram), "m2 under way")
            await asyncio.to_thread(own_server.stop, "immediate")
            offsets_before = [
                int(c.params.get("offset") or 0) for c in telegram.calls_to("getUpdates")
            ]
            telegram.push_text(DM, "m3 while the database is away")
            telegram.push_text(OTHER, "m4 in another chat, also while it is away")

            down: dict[str, Any] = {}

            async def degraded() -> bool:
                nonlocal down
                code, down = await healthz(port)
                return code == 503

            await until(degraded, "/healthz degraded with the database stopped")
            assert [p for p in down["problems"] if p.startswith("store: ")], down["problems"]

            async def stopped_polling() -> bool:
                code, body = await healthz(port)
                return code == 503 and POLLER not in held_leases(body)

            # The poller's lease cannot be renewed: once it runs out, polling stops (no
            # getUpdates goes out past the lease's deadline) until the lease is claimed again.
            await until(stopped_polling, "the poller's lease lost with the database away")
            shown_during = texts(telegram)
            # No send past the conversation lease's end: m2's answer (the model still
            # streaming it) stopped, and m3 is not taken while the database is away.
            assert LAST not in shown_during and "Answer to m3." not in shown_during
            asked_during = [
                int(c.params.get("offset") or 0) for c in telegram.calls_to("getUpdates")
            ]
            await asyncio.to_thread(own_server.start)

            def all_answered() -> bool:
                shown = texts(telegram)
                return all(
                    expected in shown for expected in ("Answer to m3.", "Answer to m4.", LAST)
                )

            await until(all_answered, "every message answered after the database came back")

            async def polling_again() -> bool:
                code, body = await healthz(port)
                return code == 200 and POLLER in held_leases(body)

            # Well again without a restart, the poller's lease claimed again by itself.
            await until(polling_again, "/healthz well again, the poller polling again")
            daemon.send_signal(signal.SIGTERM)
            assert await ended(daemon) == 0
        finally:
            await reap(daemon)
        # A restart after the outage: what the store recorded while the database was away
        # (pieces sent, entries answered) is there, so nothing is resumed or sent again.
        shown_before = len(texts(telegram))
        again = await start(config, tmp_path, dsn)
        try:
            await until(well, "the restarted daemon up and well", guard=60)
            telegram.push_text(DM, "m5 after the restart")
            await until(lambda: "Answer to m5." in texts(telegram), "m5 answered")
            again.send_signal(signal.SIGTERM)
            assert await ended(again) == 0
        finally:
            await reap(again)
        assert texts(telegram)[shown_before:] == ["Answer to m5."]

    shown = texts(telegram)
    for expected in [*PARAGRAPHS, "Answer to m1.", "Answer to m3.", "Answer to m4."]:
        assert shown.count(expected) == 1, (expected, shown)
    # The answer cut when its lease ran out went on after the database came back, said so once.
    assert shown.count(INTERRUPTED_NOTICE) == 1, shown
    # Each sender was told once that the message could not be taken yet, and got its answer.
    assert shown.count(STORE_FAILED_NOTICE) <= 2
    # Nothing sent while the database was away was confirmed to Telegram: no offset asked
    # for before it came back passed the one asked for before it went away.
    assert max(asked_during) <= max(offsets_before), (offsets_before[-3:], asked_during[-3:])
