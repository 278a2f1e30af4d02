"""The App owns its tasks: once ``App.run`` returns after a stop with a run in flight, no task
botd started is left in the loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

from botd.app import App
from botd.config import parse_config
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import HANG_GUARD, anthropic_yaml, config_yaml, telegram_yaml
from tests.support.waiting import until

ALICE = 1001


async def test_a_stop_with_a_run_in_flight_leaves_no_task_behind(tmp_path: Path) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = config_yaml(
            tmp_path,
            "shutdown_grace: 0\n",
            anthropic_yaml(model),
            telegram_yaml(telegram, "poll_timeout: 1", "dm_policy: open"),
        )
        app = App(parse_config(config, {}), env={})
        running = asyncio.create_task(app.run())
        await until(lambda: app.started or running.done(), "the app started")
        assert app.started
        model.push(stream(text("never finished"), stall=True))  # the run hangs mid-answer
        telegram.push_text(ALICE, "hello")
        await until(lambda: len(model.streams) == 1, "the run began")
        app.request_stop()
        assert await asyncio.wait_for(running, HANG_GUARD) == 0
        left = [task for task in asyncio.all_tasks() if _botd_side(task)]
        assert left == [], [repr(task) for task in left]


TEST_SIDE = (str(Path(__file__).parent), "aiohttp/web_protocol.py", "aiohttp/web_server.py")
"""Where the fake servers' tasks run (the test's own side, not botd's)."""


def _botd_side(task: asyncio.Task[object]) -> bool:
    """Whether ``task`` is not the test's own: this test, the fakes and their servers."""
    if task is asyncio.current_task():
        return False
    code = getattr(task.get_coro(), "cr_code", None)
    where = "" if code is None else code.co_filename
    return not any(part in where for part in TEST_SIDE)
