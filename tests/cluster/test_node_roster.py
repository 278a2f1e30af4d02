"""What a node says of the others on one PostgreSQL: ``/healthz``'s ``node`` and ``botd
status`` show a line per node (up with what it holds, or gone for how long), and a channel
whose input another node holds is on standby there, not up; nobody holding it past
``health.down_after`` is a problem line.

Two daemons in the test's loop share a database (Telegram over the loopback Bot API): the
first holds the poller, the second stands by; the first stopped, the second takes the poller
and says the first is gone. Nobody holding an input for a while is set up in the lease table
itself (its expiry moved back), read by a real ``NodeHealth`` over the real store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from pathlib import Path
from typing import Any

import psycopg

from botd.app import App
from botd.cli.status import Report, describe
from botd.cluster.leases import LeaseKeeper
from botd.ops.node import NodeHealth
from botd.store.postgres import PostgresStore
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import daemon_running, telegram_yaml
from tests.support.daemon_process import run_botd
from tests.support.health_probe import free_port
from tests.support.waiting import until

POLLER = "telegram:default"


def node_config(tmp_path: Path, name: str, dsn: str, telegram: FakeTelegramAPI) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"state_dir: {json.dumps(str(tmp_path / name))}\n"
        f"health: {{enabled: true, port: {free_port()}}}\n"
        f"store: {{backend: postgres, dsn: {json.dumps(dsn)}, node_id: {name}, lease_ttl: 3}}\n"
        + telegram_yaml(telegram, "poll_timeout: 1", "dm_policy: open"),
        encoding="utf-8",
    )
    return path


def holds(daemon: App, name: str) -> bool:
    return daemon.runtime is not None and daemon.runtime.leases.holding(name) is not None


async def status_of(config: Path) -> tuple[list[str], dict[str, Any]]:
    """``botd status`` of the node run with ``config``: its lines, and its JSON."""
    text = await asyncio.to_thread(run_botd, "status", "--config", str(config))
    done = await asyncio.to_thread(run_botd, "status", "--config", str(config), "--json")
    body = json.loads(done.stdout)
    assert isinstance(body, dict)
    return text.stdout.splitlines(), body


async def test_a_standby_says_who_holds_its_channel_and_a_stopped_node_is_gone(
    tmp_path: Path, migrated_postgres_dsn: str, telegram: FakeTelegramAPI
) -> None:
    first = node_config(tmp_path, "node-a", migrated_postgres_dsn, telegram)
    second = node_config(tmp_path, "node-b", migrated_postgres_dsn, telegram)
    async with contextlib.AsyncExitStack() as a_running:
        a = await a_running.enter_async_context(
            daemon_running(first.read_text(encoding="utf-8"), config_path=first)
        )
        await until(lambda: holds(a, POLLER), "node-a polling")
        async with daemon_running(second.read_text(encoding="utf-8"), config_path=second) as b:
            await until(lambda: holds(b, "node:node-b"), "node-b up")

            lines, body = await status_of(second)
            assert "  channel telegram  standby (held by node-a)" in lines, lines
            assert body["status"] == "ok"  # standing by is no problem
            assert body["health"]["node"]["inputs"] == {
                "telegram": [
                    {"lease": POLLER, "state": "standby", "holder": "node-a", "seconds": None}
                ]
            }
            assert [(n["id"], n["state"]) for n in body["health"]["node"]["nodes"]] == [
                ("node-a", "up"),
                ("node-b", "up"),
            ]
            # The same nodes, read from the database by the command itself.
            assert body["database"]["nodes"] == body["health"]["node"]["nodes"]
            assert f"  node node-a: up, holds scheduler, {POLLER}" in lines, lines
            assert "  node node-b: up" in lines, lines

            lines_a, body_a = await status_of(first)
            assert "  channel telegram  up" in lines_a, lines_a
            assert body_a["health"]["node"]["inputs"]["telegram"][0]["state"] == "holding"

            await a_running.aclose()  # node-a stops cleanly: its leases end at once
            await until(lambda: holds(b, POLLER), "node-b taking the poller over")

            async def node_a_gone() -> bool:
                lines, _ = await status_of(second)
                return any(re.fullmatch(r"  node node-a: gone \d+ s", line) for line in lines)

            await until(node_a_gone, "node-b's status saying node-a is gone")
            lines, body = await status_of(second)
            assert "  channel telegram  up" in lines, lines
            assert body["status"] == "ok"
            [gone] = [n for n in body["health"]["node"]["nodes"] if n["id"] == "node-a"]
            assert gone["state"] == "gone" and gone["seconds"] >= 0 and gone["holds"] == []


async def test_no_node_holding_an_input_past_down_after_is_a_problem(
    migrated_postgres_dsn: str,
) -> None:
    store = await PostgresStore.open(migrated_postgres_dsn)
    try:
        table = store.lease_table()
        leases = LeaseKeeper(table, "node-a", ttl=30.0)
        assert await leases.try_claim("node:node-a") is not None
        inputs = {"telegram": [POLLER], "discord": ["discord:default:0", "discord:default:1"]}
        node = NodeHealth("node-a", "postgres", store, leases, inputs=lambda: inputs)

        # The poller's holder died 25 s ago; shard 0 is held by node-b, shard 1 was never held.
        assert await table.claim(POLLER, "node-b", 30.0) == 1
        assert await table.claim("node:node-b", "node-b", 30.0) == 1
        assert await table.claim("discord:default:0", "node-c", 30.0) == 1
        async with await psycopg.AsyncConnection.connect(
            migrated_postgres_dsn, autocommit=True
        ) as conn:
            await conn.execute(
                "UPDATE leases SET expires_at = clock_timestamp() - interval '25 seconds' "
                "WHERE holder = 'node-b'"
            )
        await node.probe()
        view = node.view()
        [poller] = view["inputs"]["telegram"]
        assert poller["state"] == "unheld" and poller["holder"] is None
        assert 25 <= poller["seconds"] < 60
        assert [s["state"] for s in view["inputs"]["discord"]] == ["standby", "unheld"]
        assert view["inputs"]["discord"][1]["seconds"] is None  # never held
        assert [(n["id"], n["state"]) for n in view["nodes"]] == [
            ("node-a", "up"),
            ("node-b", "gone"),
        ]
        assert node.problems(unheld_after=20.0) == {
            "channel telegram": f"no node holds {POLLER} for {int(poller['seconds'])} s"
        }
        assert node.problems(unheld_after=60.0) == {}

        body = {
            "status": "ok",
            "botd": {"version": "1", "pid": 1, "node": "here"},
            "channels": {"telegram": "running", "discord": "running"},
            "node": view,
        }
        lines = describe(Report("ok", Path("state"), 1, "url", body))
        assert f"  channel telegram  no node holds it for {int(poller['seconds'])} s" in lines
        assert (
            "  channel discord   discord:default:0: standby (held by node-c); "
            "discord:default:1: no node holds it yet"
        ) in lines
    finally:
        await store.aclose()
