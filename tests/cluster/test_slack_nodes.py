"""Slack on two ``botd run`` nodes sharing one PostgreSQL. In Socket Mode Slack sends each
envelope over one of the app's connections, and a retry or a twin of it (the ``message``
and ``app_mention`` of one post, with two event ids) may go over another node's; in HTTP mode
a load balancer spreads the requests over the nodes the same way. The database's dedupe
ledger is the authority: each post is answered once, whichever node took it. Each post is in
a DM of its own (one conversation each), so the answers say nothing of which node runs a
conversation."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import psycopg

from tests.cluster.nodes import Node, node
from tests.fakes.slack_api import FakeSlack, event_callback, signed_headers
from tests.support.daemon_process import RunningDaemon, reap, stop_daemon
from tests.support.health_probe import free_port
from tests.support.waiting import until

SECRET = "signing-secret"


def slack_node(tmp_path: Path, name: str, slack: FakeSlack, *, http_port: int = 0) -> Node:
    """A node in Socket Mode, or in HTTP mode listening on ``http_port``."""
    mode = (
        f"mode: http\n    signing_secret: {SECRET}\n    http_port: {http_port}"
        if http_port
        else "app_token: xapp-test"
    )
    return node(
        tmp_path,
        name,
        f"""channels:
  slack:
    bot_token: xoxb-test
    {mode}
    api_base_url: {json.dumps(slack.base_url)}
    dm_policy: open
""",
    )


def dm(n: int, text: str) -> dict[str, Any]:
    """A post in DM ``D<n>`` from user ``U<n>``."""
    return {
        "type": "message",
        "channel": f"D{n}",
        "channel_type": "im",
        "user": f"U{n}",
        "text": text,
        "ts": f"17000000{n:02d}.000100",
    }


def settled(dsn: str) -> tuple[int, int, int]:
    """(inbox rows, rows answered, pieces sent)."""
    try:
        with psycopg.connect(dsn) as conn:
            inbox = conn.execute("SELECT state FROM inbox").fetchall()
            sent = conn.execute("SELECT count(*) FROM outbox WHERE state = 'sent'").fetchone()
    except psycopg.errors.UndefinedTable:
        return 0, 0, 0
    answered = sum(1 for (state,) in inbox if state == "answered")
    return len(inbox), answered, int(sent[0]) if sent else 0


async def test_twins_and_retries_over_two_nodes_sockets_are_answered_once(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with FakeSlack() as slack:
        a = slack_node(tmp_path, "node-a", slack)
        b = slack_node(tmp_path, "node-b", slack)
        first = await a.start(postgres_dsn)
        second: RunningDaemon | None = None
        try:
            await until(lambda: len(slack.sockets) == 1, "node-a's socket")
            second = await b.start(postgres_dsn)
            await until(lambda: len(slack.sockets) == 2, "node-b's socket")
            one, two, three = dm(1, "one"), dm(2, "two"), dm(3, "three")
            retried = event_callback(one)
            mention = {**two, "type": "app_mention"}
            envelopes = await asyncio.gather(
                # An envelope and Slack's retry of it, over the two nodes' sockets at once.
                slack.send_event(retried, socket=0),
                slack.send_event(retried, socket=1, retry_attempt=1),
                # One post's two events (message and app_mention), one per node.
                slack.send_event(event_callback(two), socket=1),
                slack.send_event(event_callback(mention), socket=0),
                # And a post that only node-b sees.
                slack.send_event(event_callback(three), socket=1),
            )
            await until(lambda: set(envelopes) <= set(slack.acks), "every envelope acked")
            await until(lambda: settled(postgres_dsn) == (3, 3, 3), "three answered and sent")
            for process in (first, second):
                assert await stop_daemon(process) == 0
        finally:
            await reap(first)
            if second is not None:
                await reap(second)

    posts = [
        (c.args.get("channel"), str(c.args.get("text"))) for c in slack.calls_to("chat.postMessage")
    ]
    assert sorted(posts) == [
        ("D1", "You said: one"),
        ("D2", "You said: two"),
        ("D3", "You said: three"),
    ]


async def post_event(port: int, body: dict[str, Any], **headers: str) -> int:
    """``body`` POSTed to a node's events endpoint as Slack signs it; the status (0: no
    connection yet)."""
    raw = json.dumps(body).encode()
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"http://127.0.0.1:{port}/slack/events",
                data=raw,
                headers={**signed_headers(SECRET, raw), **headers},
            ) as response,
        ):
            return response.status
    except aiohttp.ClientConnectionError:
        return 0


async def test_http_mode_behind_a_load_balancer_answers_retries_and_twins_once(
    tmp_path: Path, postgres_dsn: str
) -> None:
    ports = free_port(), free_port()
    async with FakeSlack() as slack:
        a = slack_node(tmp_path, "node-a", slack, http_port=ports[0])
        b = slack_node(tmp_path, "node-b", slack, http_port=ports[1])
        first = await a.start(postgres_dsn)
        second: RunningDaemon | None = None
        try:
            second = await b.start(postgres_dsn)
            probe = event_callback(dm(9, "probe"))
            # Each node up: the same probe post answered 200 by both (the second a repeat).
            await until(lambda: post_event(ports[0], probe), "node-a listening")
            await until(lambda: post_event(ports[1], probe), "node-b listening")
            one, two = dm(1, "one"), dm(2, "two")
            retried = event_callback(one)
            statuses = await asyncio.gather(
                post_event(ports[0], retried),
                post_event(ports[1], retried, **{"X-Slack-Retry-Num": "1"}),
                post_event(ports[1], event_callback(two)),
                post_event(ports[0], event_callback({**two, "type": "app_mention"})),
            )
            assert list(statuses) == [200, 200, 200, 200]
            await until(lambda: settled(postgres_dsn) == (3, 3, 3), "three answered and sent")
            for process in (first, second):
                assert await stop_daemon(process) == 0
        finally:
            await reap(first)
            if second is not None:
                await reap(second)

    posts = [
        (c.args.get("channel"), c.args.get("text")) for c in slack.calls_to("chat.postMessage")
    ]
    assert sorted(posts) == [
        ("D1", "You said: one"),
        ("D2", "You said: two"),
        ("D9", "You said: probe"),
    ]
