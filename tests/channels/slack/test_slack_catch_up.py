"""Slack catches up on what it missed (issue 35): the real daemon in-process, slack-bolt
over the loopback Web API (Socket Mode, and the HTTP Events API), the SQLite store kept
between two runs.

Messages posted while botd is stopped, in a DM and in a thread of it botd took part in, are
answered once each, in order, after it starts again (``conversations.history`` and
``conversations.replies`` from each chat's mark); one older than ``catch_up``'s age is not,
and the log counts it; one that Slack also delivers live is answered once. A socket that
reconnects catches up too.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any, Literal

import aiohttp
import pytest

from tests.channels.slack.harness import SECRET, message_event
from tests.fakes.slack_api import FakeSlack, event_callback, signed_headers
from tests.support.daemon_inprocess import config_yaml, daemon_running
from tests.support.health_probe import free_port
from tests.support.waiting import until

DM = "D1"
FOLLOWUP = "agent:\n  queue_mode: followup\n"
Mode = Literal["socket", "http"]


_LAST = [0.0]


def ts(ago: float = 0.0) -> str:
    """A message ts of ``ago`` seconds before now; each one made now is after the last."""
    at = time.time() - ago
    if not ago:
        at = _LAST[0] = max(at, _LAST[0] + 0.001)
    return f"{at:.6f}"


class Daemon:
    """How the test talks to the daemon in ``mode``: its config and a live delivery."""

    def __init__(self, tmp_path: Path, fake: FakeSlack, mode: Mode) -> None:
        self.tmp_path, self.fake, self.mode = tmp_path, fake, mode
        self.port = free_port()

    def config(self) -> str:
        lines = [
            "bot_token: xoxb-test",
            f"api_base_url: {json.dumps(self.fake.base_url)}",
            "dm_policy: open",
        ]
        if self.mode == "socket":
            lines.append("app_token: xapp-test")
        else:
            lines += ["mode: http", f"signing_secret: {SECRET}", f"http_port: {self.port}"]
        section = "channels:\n  slack:\n" + "".join(f"    {line}\n" for line in lines)
        return config_yaml(self.tmp_path, section, FOLLOWUP)

    async def deliver(self, event: dict[str, Any]) -> None:
        body = event_callback(event)
        if self.mode == "socket":
            await self.fake.send_event(body)
            return
        raw = json.dumps(body).encode()
        url = f"http://127.0.0.1:{self.port}/slack/events"
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, data=raw, headers=signed_headers(SECRET, raw)) as response,
        ):
            assert response.status == 200


def said(fake: FakeSlack) -> list[str]:
    return fake.visible(DM)


def inbox_texts(tmp_path: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{tmp_path / 'state' / 'botd.sqlite3'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT json_extract(message, '$.text') FROM inbox ORDER BY id")
        return [str(row[0]) for row in rows]
    finally:
        conn.close()


def person(text: str, at: str, **extra: Any) -> dict[str, Any]:
    """A message U1 posted in the DM, as the history lists it (no channel in it)."""
    return {"type": "message", "user": "U1", "text": text, "ts": at, **extra}


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_messages_posted_while_stopped_are_answered_once_in_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: Mode
) -> None:
    async with FakeSlack() as fake:
        daemon = Daemon(tmp_path, fake, mode)
        first_ts = ts(3 * 3600)  # long ago: the mark is old
        parent = ts(3 * 3600 - 1)
        async with daemon_running(daemon.config()):
            await daemon.deliver(message_event(DM, first_ts, "first"))
            in_thread = ts(3 * 3600 - 2)
            await daemon.deliver(message_event(DM, in_thread, "in a thread", thread_ts=parent))
            await until(lambda: len(said(fake)) == 2, "the first answers")
        # botd is stopped: one message from two hours ago (past the hour), three now, and a
        # reply in the thread it answered in.
        old = person("too old", ts(2 * 3600))
        missed = [person(text, ts()) for text in ("second", "third", "fourth")]
        fake.history[DM] = [old, *missed]
        reply = person("more in the thread", ts(), thread_ts=parent)
        fake.replies[parent] = [person("the parent", parent), reply]
        caplog.set_level(logging.INFO, logger="botd.channels.catch_up")
        async with daemon_running(daemon.config()):
            # The last one Slack also delivers live (say, its retry).
            await daemon.deliver({**missed[-1], "channel": DM, "channel_type": "im"})
            await until(lambda: len(said(fake)) == 6, "the missed messages answered")
            expected = ["second", "third", "fourth", "more in the thread"]
            assert sorted(said(fake)[2:]) == sorted(f"You said: {text}" for text in expected)
        taken = inbox_texts(tmp_path)
        assert taken[:2] == ["first", "in a thread"]
        assert sorted(taken[2:]) == sorted(expected)
        channel = [text for text in taken if text in ("second", "third", "fourth")]
        assert channel == ["second", "third", "fourth"]
        assert any(
            "4 missed message(s) taken, 1 older than 60 min skipped" in record.getMessage()
            for record in caplog.records
        )
        assert fake.calls_to("conversations.history") and fake.calls_to("conversations.replies")


async def test_a_socket_that_reconnects_catches_up(tmp_path: Path) -> None:
    async with FakeSlack() as fake:
        daemon = Daemon(tmp_path, fake, "socket")
        async with daemon_running(daemon.config()):
            await daemon.deliver(message_event(DM, ts(60), "first"))
            await until(lambda: said(fake) == ["You said: first"], "the first answer")
            reads = len(fake.calls_to("conversations.history"))
            await fake.drop_socket()
            # Posted while the socket was down: Slack never delivers it.
            fake.history[DM] = [person("while reconnecting", ts())]
            await until(
                lambda: said(fake) == ["You said: first", "You said: while reconnecting"],
                "the message missed while reconnecting answered",
            )
            assert len(fake.calls_to("conversations.history")) > reads
