"""``botd status`` asks the running botd from outside: the pid in the state dir's lock, then
its health endpoint. Exit 0 when all is up, 1 when something is down (or botd cannot be
asked), 3 when no botd runs; ``--json`` prints one object. Each case against a real daemon:
``botd run`` as a child process (killed with SIGKILL for the last case), or the daemon in the
test's loop with Telegram's SDK over the loopback Bot API.

On ``store.backend: postgres`` (a server of the test's own, ``running_postgres``, since it is
stopped and started again): the node with its leases and the database, the shared database
read by the command itself; the database stopped degrades both, started again the daemon is
well again by itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from botd.app import App
from botd.ops.statelock import LOCK_FILENAME
from botd.store.postgres import SCHEMA_VERSION
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import anthropic_yaml, daemon_running, telegram_yaml
from tests.support.daemon_process import bare_env, reap, run_botd, start_daemon
from tests.support.health_probe import free_port
from tests.support.pg_server import PostgresServer, running_postgres
from tests.support.waiting import until

ALICE = 111


async def status(config: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``botd status --config CONFIG OPTIONS`` in a thread: the daemon in this loop answers."""
    return await asyncio.to_thread(run_botd, "status", "--config", str(config), *options)


async def status_json(config: Path) -> tuple[int, dict[str, Any]]:
    done = await status(config, "--json")
    [line] = done.stdout.splitlines()  # one object, on one line
    body = json.loads(line)
    assert isinstance(body, dict)
    return done.returncode, body


def write_config(tmp_path: Path, *sections: str) -> Path:
    path = tmp_path / "botd.yaml"
    path.write_text(
        f"state_dir: {json.dumps(str(tmp_path / 'state'))}\n" + "".join(sections),
        encoding="utf-8",
    )
    return path


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


async def test_all_up_is_0_and_a_killed_daemon_is_3(
    tmp_path: Path, telegram: FakeTelegramAPI
) -> None:
    port = free_port()
    config = write_config(
        tmp_path,
        f"health: {{enabled: true, port: {port}}}\n",
        telegram_yaml(telegram, "poll_timeout: 1", "dm_policy: open"),
    )
    process = await start_daemon(config, tmp_path)
    try:
        await until(lambda: healthy(port), "the daemon's health endpoint", guard=60)
        done = await status(config)
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert lines[0].startswith("botd ") and f"(pid {process.pid} on " in lines[0]
        assert lines[0].endswith(": ok")
        assert "  channel telegram  up" in lines
        assert "  runs in flight: 0" in lines
        assert "  inbox: 0 not answered yet" in lines

        code, body = await status_json(config)
        assert code == 0
        assert body["status"] == "ok" and body["pid"] == process.pid
        assert body["url"] == f"http://127.0.0.1:{port}/healthz"
        health = body["health"]
        assert health["channels"] == {"telegram": "running"}
        assert health["botd"]["pid"] == process.pid
        assert health["stats"] == {
            "runs_in_flight": 0,
            "inbox_backlog": 0,
            "inbox_oldest_unanswered_seconds": None,
            "outbox_pending": 0,
        }

        process.kill()  # no clean stop: its pid stays in the lock file
        await process.wait()
    finally:
        await reap(process)
    lock = (tmp_path / "state" / LOCK_FILENAME).read_text(encoding="utf-8")
    assert lock.splitlines()[0] == str(process.pid)
    done = await status(config)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout == f"botd is not running: no botd holds state dir {tmp_path / 'state'}\n"
    code, body = await status_json(config)
    assert code == 3
    assert body["status"] == "not running" and body["pid"] is None and body["health"] is None


async def test_a_channel_down_is_1_naming_it_with_the_work_in_hand(
    tmp_path: Path, telegram: FakeTelegramAPI
) -> None:
    port = free_port()
    slack = f"""  slack:
    bot_token: xoxb-test
    app_token: xapp-test
    api_base_url: "http://127.0.0.1:{free_port()}/api/"
"""
    async with FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = write_config(
            tmp_path,
            f"health: {{enabled: true, port: {port}}}\n",
            anthropic_yaml(model),
            telegram_yaml(telegram, "poll_timeout: 1", "dm_policy: open"),
            slack,
        )

        def slack_down(daemon: App) -> bool:
            return daemon.started and daemon.channel_states().get("slack") == "down"

        async with daemon_running(config.read_text(encoding="utf-8"), ready=slack_down) as daemon:
            model.push(stream(text("never shown"), hang_after=2))  # the model goes silent
            telegram.push_text(ALICE, "think hard")
            await until(lambda: daemon.metrics.runs_in_flight == 1, "the held run")

            done = await status(config)
            assert done.returncode == 1, done.stdout + done.stderr
            lines = done.stdout.splitlines()
            assert lines[0].endswith(": degraded") and f"(pid {os.getpid()} on " in lines[0]
            assert "  channel telegram  up" in lines
            [slack_line] = [line for line in lines if line.startswith("  channel slack")]
            assert slack_line.startswith("  channel slack     down: ")  # and its last error
            assert len(slack_line) > len("  channel slack     down: ")
            assert "  runs in flight: 1" in lines
            [inbox] = [line for line in lines if line.startswith("  inbox: ")]
            assert inbox.startswith("  inbox: 1 not answered yet, the oldest for ")
            [problem] = [line for line in lines if line.startswith("  problem: ")]
            assert problem.startswith("  problem: channel slack: down (")

            code, body = await status_json(config)
            assert code == 1
            assert body["status"] == "degraded" and body["pid"] == os.getpid()
            health = body["health"]
            assert health["channels"] == {"slack": "down", "telegram": "running"}
            assert set(health["channel_errors"]) == {"slack"}
            assert health["stats"]["runs_in_flight"] == 1
            assert health["stats"]["inbox_backlog"] == 1
            assert health["stats"]["inbox_oldest_unanswered_seconds"] is not None

            telegram.push_text(ALICE, "/stop")  # lets the run go before the daemon stops
            await until(lambda: daemon.metrics.runs_in_flight == 0, "the run's end")


async def test_a_daemon_without_a_health_endpoint_cannot_be_asked(
    tmp_path: Path, telegram: FakeTelegramAPI
) -> None:
    config = write_config(
        tmp_path, "health: {enabled: false}\n", telegram_yaml(telegram, "poll_timeout: 1")
    )
    async with daemon_running(config.read_text(encoding="utf-8")):
        done = await status(config)
        assert done.returncode == 1
        assert done.stdout == (
            f"botd runs (pid {os.getpid()}), but its health endpoint is off "
            "(health.enabled: false), so it cannot be asked\n"
        )
        code, body = await status_json(config)
        assert code == 1 and body["status"] == "unknown" and body["pid"] == os.getpid()


def test_no_daemon_on_the_state_dir_is_3(tmp_path: Path) -> None:
    config = write_config(tmp_path, "health: {enabled: true}\n")
    done = run_botd("status", "--config", str(config))
    assert done.returncode == 3
    assert done.stdout == f"botd is not running: no botd holds state dir {tmp_path / 'state'}\n"
    assert done.stderr == ""


# --- on the postgres backend ------------------------------------------------------------

PASSWORD = "pw-never-shown-4711"


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A server of this test's own: it is stopped and started again."""
    with running_postgres() as server:
        yield server


OWN_LEASES = ("node:node-a", "scheduler", "telegram:default")
"""The leases a node on postgres takes by itself (with Telegram and nothing to answer): its
own name's, the schedule's and the poller's."""


async def healthz(port: int) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/healthz") as resp,
    ):
        body = await resp.json()
        assert isinstance(body, dict)
        return resp.status, body


async def test_status_and_healthz_show_the_node_its_leases_and_the_database_down_and_back(
    tmp_path: Path, own_server: PostgresServer, telegram: FakeTelegramAPI
) -> None:
    plain = own_server.new_database()
    database = plain.rsplit("/", 1)[1]
    # The server trusts loopback, so the password is never checked: only never shown.
    dsn = plain.replace("botd@", f"botd:{PASSWORD}@")
    where = f"postgresql://botd@127.0.0.1:{own_server.port}/{database}"
    port = free_port()
    config = tmp_path / "botd.yaml"
    text = (
        f"state_dir: {json.dumps(str(tmp_path / 'state'))}\n"
        f"health: {{enabled: true, port: {port}}}\n"
        f"store: {{backend: postgres, dsn: {json.dumps(dsn)}, node_id: node-a, lease_ttl: 3}}\n"
        + telegram_yaml(telegram, "poll_timeout: 1", "dm_policy: open")
    )
    async with daemon_running(text, config_path=config) as daemon:
        assert daemon.runtime is not None
        leases = daemon.runtime.leases
        # The node's own leases once it took them: its name's, the schedule's, the poller's.
        await until(
            lambda: sorted(lease.name for lease in leases.held()) == list(OWN_LEASES),
            "the node holding the schedule's and the poller's leases",
        )

        code, body = await status_json(config)
        assert code == 0, body
        node = body["health"]["node"]
        assert node["id"] == "node-a" and node["backend"] == "postgres"
        assert node["database"] == {
            "where": where,
            "reachable": True,
            "schema_version": SCHEMA_VERSION,
            "schema_known": SCHEMA_VERSION,
            "reason": None,
        }
        held = node["leases"]
        assert [(lease["name"], lease["epoch"]) for lease in held] == [
            (name, 1) for name in OWN_LEASES
        ]
        assert all(lease["seconds_left"] > 0 for lease in held)
        shared = body["database"]
        assert shared["where"] == where and shared["error"] is None
        assert shared["schema_version"] == SCHEMA_VERSION
        assert (shared["inbox_backlog"], shared["outbox_pending"]) == (0, 0)
        assert shared["pairing_waiting"] == 0
        rows = shared["leases"]
        assert [(row["name"], row["holder"], row["epoch"]) for row in rows] == [
            (name, "node-a", 1) for name in OWN_LEASES
        ]
        assert all(row["expires_in"] > 0 for row in rows)

        done = await status(config)
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert f"  node node-a (postgres, {where} reachable (schema {SCHEMA_VERSION}))" in lines
        [held_line] = [line for line in lines if line.startswith("  leases held: ")]
        assert held_line.startswith("  leases held: node:node-a (epoch 1, ")
        assert ", scheduler (epoch 1, " in held_line
        assert ", telegram:default (epoch 1, " in held_line
        assert any(line.startswith(f"database {where} (schema ") for line in lines)
        width = max(len(name) for name in OWN_LEASES)
        for name in OWN_LEASES:
            shown = f"  lease {name:<{width}}  node-a  epoch 1  expires in "
            assert any(line.startswith(shown) for line in lines), (shown, lines)

        await asyncio.to_thread(own_server.stop, "immediate")
        down: dict[str, Any] = {}

        async def degraded() -> bool:
            nonlocal down
            code, down = await healthz(port)
            return code == 503

        await until(degraded, "/healthz degraded with the database stopped")
        assert down["components"]["store"]["status"] == "degraded"
        [problem] = [p for p in down["problems"] if p.startswith("store: ")]
        assert problem.startswith(f"store: {where} cannot be read: ")
        assert down["node"]["database"]["reachable"] is False
        assert down["node"]["database"]["reason"]

        done = await status(config)
        assert done.returncode == 1
        lines = done.stdout.splitlines()
        [unread] = [line for line in lines if line.startswith("database ")]
        assert unread.startswith(f"database {where}: cannot be read: {where}: cannot be reached (")
        assert lines[0].endswith(": degraded")
        assert PASSWORD not in done.stdout + done.stderr + json.dumps(down)

        await asyncio.to_thread(own_server.start)

        async def well() -> bool:
            code, _ = await healthz(port)
            return code == 200

        await until(well, "/healthz well again once the database is back")
        code, body = await status_json(config)
        assert code == 0, body
        assert body["database"]["error"] is None


def test_status_says_in_one_line_that_the_dsn_variable_is_unset(tmp_path: Path) -> None:
    config = tmp_path / "botd.yaml"
    config.write_text(
        f"state_dir: {json.dumps(str(tmp_path / 'state'))}\n"
        "store: {backend: postgres, dsn: '${BOTD_DATABASE_URL}'}\n",
        encoding="utf-8",
    )
    done = run_botd("status", "--config", str(config), env=bare_env())
    assert done.returncode == 3
    assert done.stdout.splitlines()[1:] == [
        "database: cannot be read: store.dsn: ${BOTD_DATABASE_URL} is not set in this shell "
        "(set it as botd's environment does)"
    ]
