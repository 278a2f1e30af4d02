"""``ChannelKeeper`` in-process: a failing channel is down and retried with backoff, its backoff
starts over once it comes up, a channel that dies later is retried the same way, and shutdown
or a reload ends the retries at once. The adapters are scripted stand-ins (no platform here);
the subprocess tests in test_channel_isolation.py run the real ones."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from botd.channel_keeper import ChannelHost, ChannelKeeper
from botd.channels.base import InboundSink
from botd.channels.errors import ChannelStartError
from botd.channels.registry import ChannelContext
from botd.config import BotdConfig
from botd.config.overrides import Defaults, resolve
from botd.conversation.commands import CommandDesk
from botd.retry import Backoff
from botd.store.sqlite import SqliteStore
from tests.support.waiting import HANG_GUARD, until


class Flaky:
    """An adapter whose ``start`` fails ``failures`` times, then works (or blocks)."""

    name = "flaky"

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.started = False
        self.stopped = False

    async def start(self, sink: InboundSink) -> None:
        self.plan.attempts += 1
        if self.plan.block is not None:
            await self.plan.block.wait()
        if self.plan.failures > 0:
            self.plan.failures -= 1
            raise ChannelStartError("cannot reach flaky: connection refused\n(port 9)")
        self.started = True
        self.plan.up.set()

    async def stop(self) -> None:
        self.stopped = True


@dataclass
class Plan:
    failures: int = 0
    attempts: int = 0
    block: asyncio.Event | None = None
    up: asyncio.Event = field(default_factory=asyncio.Event)
    built: list[Flaky] = field(default_factory=list)


class FakeRuntime:
    """The keeper's host (``ChannelHost``): the adapters, a sink, rebuilding an adapter."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.adapters: dict[str, Any] = {}
        self.sink = self.handle
        self.updates = 0

    async def handle(self, message: object) -> None:
        return None

    def build_adapter(self, name: str, config: BotdConfig, context: object = None) -> Flaky:
        adapter = Flaky(self.plan)
        self.plan.built.append(adapter)
        return adapter

    def update_channels(self, config: BotdConfig) -> None:
        self.updates += 1


class RecordingBackoff(Backoff):
    def __init__(self, first: float, cap: float) -> None:
        super().__init__(first, factor=2.0, cap=cap, jitter=0.0)
        self.delays: list[float] = []

    def next_delay(self) -> float:
        delay = super().next_delay()
        self.delays.append(delay)
        return delay


def _keeper(plan: Plan, first: float = 0.01, cap: float = 0.04) -> tuple[ChannelKeeper, Any]:
    runtime = FakeRuntime(plan)
    keeper = ChannelKeeper(
        cast(ChannelHost, runtime),
        lambda: cast(BotdConfig, None),
        ChannelContext(offsets=cast(Any, None)),
        backoff=lambda: RecordingBackoff(first, cap),
    )
    return keeper, runtime


async def _start(keeper: ChannelKeeper, runtime: Any, plan: Plan) -> bool:
    adapter = runtime.build_adapter("flaky", None)
    runtime.adapters["flaky"] = adapter
    return await keeper.start("flaky", adapter)


async def test_a_failing_channel_is_down_then_retried_until_up_and_its_backoff_resets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plan = Plan(failures=4)
    keeper, runtime = _keeper(plan)
    with caplog.at_level(logging.INFO, logger="botd.channel_keeper"):
        assert await _start(keeper, runtime, plan) is False
        assert keeper.states["flaky"] == "down"
        assert keeper.down() == {"flaky": "cannot reach flaky: connection refused (port 9)"}
        await asyncio.wait_for(plan.up.wait(), HANG_GUARD)
    assert keeper.states["flaky"] == "running" and keeper.down() == {}
    assert plan.attempts == 5
    backoff = keeper.backoff("flaky")
    assert isinstance(backoff, RecordingBackoff)
    assert backoff.delays == [0.01, 0.02, 0.04, 0.04]  # doubling up to the cap
    assert backoff.failures == 0  # reset on success
    # Each retry ran a fresh adapter, and delivery was pointed at it.
    assert runtime.adapters["flaky"] is plan.built[-1] and plan.built[-1].started
    assert runtime.updates == 4
    down = [r for r in caplog.records if "down:" in r.getMessage()]
    assert len(down) == 4 and all(r.exc_info is None for r in down)
    assert all("\n" not in r.getMessage() for r in caplog.records)
    assert "up again after 4 failed attempt(s)" in caplog.text
    # Dying later starts from the first delay again, not the long one it had reached.
    plan.up.clear()
    plan.failures = 1
    keeper.report_down("flaky", "connection ended:\nreset by peer")
    assert keeper.down() == {"flaky": "connection ended: reset by peer"}
    await asyncio.wait_for(plan.up.wait(), HANG_GUARD)
    assert backoff.delays[4:] == [0.01, 0.02]
    assert plan.built[-2].stopped is False and plan.built[-3].stopped  # the dead one stopped
    await keeper.close()


async def test_shutdown_during_a_long_wait_ends_the_retry_at_once() -> None:
    plan = Plan(failures=100)
    keeper, runtime = _keeper(plan, first=3600.0, cap=3600.0)
    assert await _start(keeper, runtime, plan) is False
    await asyncio.wait_for(keeper.close(), HANG_GUARD)
    assert plan.attempts == 1
    keeper.report_down("flaky", "late news")  # ignored once closed
    assert plan.attempts == 1


async def test_shutdown_during_a_retrying_start_cancels_it() -> None:
    plan = Plan(failures=1)
    keeper, runtime = _keeper(plan)
    assert await _start(keeper, runtime, plan) is False
    plan.block = asyncio.Event()  # the retry's start hangs (a server that never answers)
    await until(lambda: plan.attempts >= 2, "plan.attempts >= 2")
    await asyncio.wait_for(keeper.close(), HANG_GUARD)
    assert keeper.states["flaky"] == "down"


async def test_forget_ends_the_retry_and_a_new_start_begins_a_new_backoff() -> None:
    plan = Plan(failures=100)
    keeper, runtime = _keeper(plan, first=3600.0, cap=3600.0)
    assert await _start(keeper, runtime, plan) is False
    old = keeper.backoff("flaky")
    await asyncio.wait_for(keeper.forget("flaky"), HANG_GUARD)  # a reload changed its section
    assert keeper.backoff("flaky") is not old
    plan.failures = 0
    assert await _start(keeper, runtime, plan) is True
    assert keeper.states["flaky"] == "running"
    await keeper.close()


async def test_a_report_about_a_channel_not_running_is_ignored() -> None:
    plan = Plan(failures=100)
    keeper, runtime = _keeper(plan, first=3600.0, cap=3600.0)
    assert await _start(keeper, runtime, plan) is False
    keeper.report_down("flaky", "again")  # already down and retrying: one retry only
    keeper.report_down("nobody", "unknown channel")
    assert keeper.down() == {"flaky": "cannot reach flaky: connection refused (port 9)"}
    await keeper.close()


AGENTS = resolve(None, Defaults(), channel="")
"""A chat's settings when every one is the agent's (the defaults)."""


async def test_status_lists_each_channel_that_is_down(tmp_path: Path) -> None:
    down = {"telegram": "getMe answered 404: check api_base_url", "discord": "token rejected"}
    with SqliteStore.open(tmp_path) as store:
        desk = CommandDesk(store, {}, unplaced=AGENTS, jobs=None, channels_down=lambda: down)
        lines = (await desk.status("telegram:1")).splitlines()

        def broken() -> dict[str, str]:
            raise RuntimeError("keeper gone")

        quiet = CommandDesk(store, {}, unplaced=AGENTS, jobs=None, channels_down=broken)
        assert await quiet.status("telegram:1") == (
            "No conversation yet.\nQueue mode: collect (agent's).\nSystem prompt: none.\n"
            "Backend: model (agent's)."
        )
    assert lines == [
        "No conversation yet.",
        "Queue mode: collect (agent's).",
        "System prompt: none.",
        "Backend: model (agent's).",
        "Channel discord is down: token rejected",
        "Channel telegram is down: getMe answered 404: check api_base_url",
    ]


def _reaching_keeper(plan: Plan, down_after: float) -> tuple[ChannelKeeper, Any]:
    runtime = FakeRuntime(plan)
    config = BotdConfig.model_validate({"health": {"down_after": down_after}})
    keeper = ChannelKeeper(
        cast(ChannelHost, runtime),
        lambda: config,
        ChannelContext(offsets=cast(Any, None)),
        backoff=lambda: RecordingBackoff(0.01, 0.04),
    )
    return keeper, runtime


def _outage_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """What the outage tracker logged (the keeper's own lines depend on other tests' levels)."""
    return [record for record in caplog.records if record.name == "botd.ops.outages"]


async def test_a_platform_out_of_reach_shows_down_and_back_without_a_restart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plan = Plan()
    keeper, runtime = _reaching_keeper(plan, down_after=0)
    assert await _start(keeper, runtime, plan) is True
    with caplog.at_level(logging.INFO, logger="botd.ops.outages"):
        keeper.reachability("flaky", "getUpdates failed:\nhttpx.ConnectError: refused")
        assert keeper.states == {"flaky": "running"}  # the SDK reconnects: no restart
        assert keeper.view() == {"flaky": "down"}
        assert keeper.problems() == {
            "flaky": "down for 0 s (getUpdates failed: httpx.ConnectError: refused)"
        }
        assert keeper.down() == {
            "flaky": "unreachable for 0 s (getUpdates failed: httpx.ConnectError: refused)"
        }
        keeper.reachability("flaky", None)
        assert keeper.view() == {"flaky": "running"}
        assert keeper.problems() == {} and keeper.down() == {}
    assert plan.attempts == 1 and runtime.updates == 0
    assert [(r.levelname, r.getMessage()) for r in _outage_lines(caplog)] == [
        (
            "WARNING",
            "channel flaky: down for 0 s (getUpdates failed: httpx.ConnectError: refused)",
        ),
        ("INFO", "channel flaky is back after 0 s"),
    ]
    await keeper.close()


async def test_a_short_outage_does_not_show_and_a_restart_forgets_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plan = Plan()
    keeper, runtime = _reaching_keeper(plan, down_after=3600)
    assert await _start(keeper, runtime, plan) is True
    with caplog.at_level(logging.INFO, logger="botd.ops.outages"):
        keeper.reachability("flaky", "the socket is disconnected")
        assert keeper.view() == {"flaky": "running"} and keeper.problems() == {}
        keeper.reachability("flaky", None)
    assert _outage_lines(caplog) == []  # a reconnect under down_after is the SDK's business
    # A channel down and restarted (its start failed, or it reported itself dead) starts
    # with a clean slate: what its old connection met is over.
    keeper, runtime = _reaching_keeper(plan, down_after=0)
    assert await _start(keeper, runtime, plan) is True
    keeper.reachability("flaky", "gateway closed")
    assert keeper.view() == {"flaky": "down"}
    plan.up.clear()
    keeper.report_down("flaky", "connection ended")
    assert keeper.problems() == {"flaky": "down (connection ended)"}
    assert keeper.down() == {"flaky": "connection ended"}
    await asyncio.wait_for(plan.up.wait(), HANG_GUARD)
    assert keeper.view() == {"flaky": "running"} and keeper.problems() == {}
    await keeper.close()
    keeper.reachability("flaky", "after shutdown")  # ignored once closed
    assert keeper.view() == {"flaky": "running"}


async def test_a_reload_restart_goes_through_the_keeper_stopped_then_down_and_retried() -> None:
    plan = Plan()
    keeper, runtime = _keeper(plan)
    assert await _start(keeper, runtime, plan) is True
    old = runtime.adapters["flaky"]
    plan.failures = 1  # the restarted channel's first start fails
    plan.up.clear()
    await keeper.reload(cast(BotdConfig, None), stop=set(), restart={"flaky"}, start=set())
    assert old.stopped  # the old adapter is stopped before the new one starts
    assert keeper.view() == {"flaky": "down"}
    assert keeper.problems() == {"flaky": "down (cannot reach flaky: connection refused (port 9))"}
    await asyncio.wait_for(plan.up.wait(), HANG_GUARD)  # retried by the keeper, under its backoff
    assert keeper.view() == {"flaky": "running"}
    assert runtime.adapters["flaky"] is plan.built[-1] and plan.built[-1] is not old

    await keeper.reload(cast(BotdConfig, None), stop={"flaky"}, restart=set(), start=set())
    assert plan.built[-1].stopped and keeper.view() == {} and runtime.adapters == {}
    await keeper.close()
