"""The App's services: started in the one declared order, closed in the reverse order by the
exit stack, only what started closed when a start fails; in a running botd, input stops
before the sessions close, and the leases and the HTTP servers go last."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from botd.services import Step, enter_services
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)
from tests.support.health_probe import free_port

DM = 31


def recording(name: str, seen: list[str], *, fails: bool = False) -> Step:
    async def start() -> None:
        if fails:
            raise RuntimeError(f"{name} cannot start")
        seen.append(f"start {name}")

    async def close() -> None:
        seen.append(f"close {name}")

    return Step(name, start, close)


async def test_services_close_in_the_reverse_order_of_their_start() -> None:
    seen: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        await enter_services(stack, [recording(name, seen) for name in ("a", "b", "c")])
        assert seen == ["start a", "start b", "start c"]
    assert seen[3:] == ["close c", "close b", "close a"]


async def test_a_failed_start_closes_only_what_started_before_it() -> None:
    seen: list[str] = []
    services = [recording("a", seen), recording("b", seen, fails=True), recording("c", seen)]
    with pytest.raises(RuntimeError, match="b cannot start"):
        async with contextlib.AsyncExitStack() as stack:
            await enter_services(stack, services)
    assert seen == ["start a", "close a"]


class Lifecycle(logging.Handler):
    """The services' debug lines: ``starting <name>`` and ``closing <name>``."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def lifecycle() -> Iterator[Lifecycle]:
    logger = logging.getLogger("botd.services")
    handler, level = Lifecycle(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def test_a_botd_stops_input_first_and_its_leases_and_http_last(
    tmp_path: Path, lifecycle: Lifecycle
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = config_yaml(
            tmp_path,
            f"health: {{enabled: true, port: {free_port()}}}\n",
            anthropic_yaml(model),
            telegram_yaml(telegram, "poll_timeout: 1", "dm_policy: open"),
        )
        async with daemon_running(config):
            model.push(stream(text("Hello.")))
            telegram.push_text(DM, "hi")
            await telegram.wait_for_call("sendMessage", 1, ok_only=True)
    started = [line.removeprefix("starting ") for line in lifecycle.lines if "starting" in line]
    closed = [line.removeprefix("closing ") for line in lifecycle.lines if "closing" in line]
    assert closed == started[::-1]

    def before(first: str, then: str) -> bool:
        return closed.index(first) < closed.index(then)

    assert closed[0] == "ready"
    assert before("channel input", "sessions")  # nothing arrives that would be dropped
    assert before("sessions", "mcp") and before("sessions", "channel outlets")
    assert before("scheduler", "sessions") and before("dispatcher", "sessions")
    assert closed[-3:] == ["leases", "http", "lease renewals"]
    assert started.index("sessions") < started.index("channel input")
    # Nothing is handed to a conversation (what the last process left is claimed) until
    # the channels can send.
    assert started.index("channel input") < started.index("dispatch")
