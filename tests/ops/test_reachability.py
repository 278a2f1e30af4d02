"""``Reachability``: a peer failing counts as down once ``down_after`` passed (or enough calls
in a row failed), its last error masked, and the first success ends it; ``stuck_inbox``."""

from __future__ import annotations

import logging

import pytest

from botd.ops.logging import add_secrets
from botd.ops.outages import Outage, Reachability, span, stuck_inbox
from tests.support.waiting import until


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_down_once_down_after_passed_and_back_at_the_first_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    link = Reachability("channel slack", down_after=30, clock=clock)
    assert link.outage() is None and not link.failing
    with caplog.at_level(logging.INFO, logger="botd.ops.outages"):
        link.failed("reconnecting: Cannot connect")
        clock.now += 29
        link.failed("reconnecting: Cannot connect\nto host")
        assert link.failing and link.outage() is None  # the SDK's retries, not an outage yet
        assert caplog.records == []
        clock.now += 13
        assert link.outage() == Outage(42, 2, "reconnecting: Cannot connect to host")
        link.failed("reconnecting: refused")  # no event loop: the line comes with a report
        assert link.outage() == Outage(42, 3, "reconnecting: refused")
        clock.now += 18
        link.answered()
        assert link.outage() is None and not link.failing
        link.answered()  # already well: nothing more to say
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "channel slack: down for 42 s (reconnecting: refused)"),
        ("INFO", "channel slack is back after 60 s"),
    ]


def test_enough_failed_calls_count_before_down_after() -> None:
    clock = Clock()
    link = Reachability("model:x", down_after=30, after_failures=3, clock=clock)
    link.failed("HTTP 529")
    link.failed("HTTP 529")
    assert link.outage() is None
    link.failed("HTTP 503")
    outage = link.outage()
    assert outage is not None and outage.failures == 3
    assert outage.describe_calls() == "the last 3 calls failed, over 0 s (HTTP 503)"
    assert Outage(150, 1, "x").describe_calls() == "the last call failed, over 2 min (x)"


def test_the_last_error_never_holds_a_secret() -> None:
    add_secrets(["sekrit-token-value"])
    link = Reachability("channel telegram", down_after=0)
    link.failed("GET https://api/botsekrit-token-value/getUpdates failed")
    outage = link.outage()
    assert outage is not None
    assert "sekrit" not in outage.error and "***" in outage.error


async def test_the_down_line_is_logged_when_down_after_passes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    link = Reachability("channel discord", down_after=0.01)
    with caplog.at_level(logging.WARNING, logger="botd.ops.outages"):
        link.failed("gateway closed")
        assert caplog.records == []
        await until(lambda: bool(caplog.records), "the timer's line")
    assert caplog.records[0].getMessage().startswith("channel discord: down for 0 s")
    link.reset()


def test_span_and_stuck_inbox() -> None:
    assert [span(s) for s in (0.4, 42, 119, 120, 720, 7199, 7200, 90000)] == [
        "0 s",
        "42 s",
        "119 s",
        "2 min",
        "12 min",
        "119 min",
        "2 h",
        "25 h",
    ]
    assert stuck_inbox(None, 0, 600) is None
    assert stuck_inbox(500.0, 2, 600) is None
    assert stuck_inbox(800.0, 3, 600) == (
        "the oldest unanswered message was accepted 13 min ago "
        "(3 unanswered; health.stuck_after is 10 min)"
    )
