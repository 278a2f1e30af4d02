"""botd's daemon run in the test's own event loop: the whole wiring, with the real SDKs over
the loopback fakes, for tests that need to look inside it (its store, its sessions) while it
runs. ``tests/support/daemon_process.py`` runs it as a child process instead.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from botd.app import App
from botd.config import parse_config
from botd.store.sqlite import SqliteStore
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.discord_api import FakeDiscordAPI
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.waiting import HANG_GUARD, until

TELEGRAM_TOKEN = "123456:TEST-TOKEN"
ANTHROPIC_KEY = "sk-ant-test"


def daemon_store(daemon: App) -> SqliteStore:
    """The running daemon's store, as the SQLite store these tests run it on (for the
    helpers only the SQLite store has)."""
    assert daemon.runtime is not None
    store = daemon.runtime.store
    assert isinstance(store, SqliteStore)
    return store


def anthropic_yaml(model: FakeAnthropicAPI, *, api_key: str = ANTHROPIC_KEY) -> str:
    """A ``model:`` section answering through ``model`` (capped retry waits)."""
    return f"""model:
  provider: anthropic
  name: claude-test
  api_key: {json.dumps(api_key)}
  base_url: {json.dumps(model.base_url)}
  max_retry_wait: 1
"""


def telegram_yaml(telegram: FakeTelegramAPI, *options: str) -> str:
    """A ``channels:`` section with Telegram over ``telegram``; ``options`` are more lines
    of its section (``"dm_policy: open"``)."""
    extra = "".join(f"    {line}\n" for line in options)
    return f"""channels:
  telegram:
    token: {json.dumps(telegram.token)}
    api_base_url: {json.dumps(telegram.base_url)}
{extra}"""


def slack_yaml(slack: FakeSlack, *options: str) -> str:
    """A ``channels:`` section with Slack over ``slack`` in Socket Mode; ``options`` are
    more lines of its section (``"dm_policy: open"``)."""
    extra = "".join(f"    {line}\n" for line in options)
    return f"""channels:
  slack:
    bot_token: xoxb-test
    app_token: xapp-test
    api_base_url: {json.dumps(slack.base_url)}
{extra}"""


def discord_yaml(discord: FakeDiscordAPI, *options: str) -> str:
    """A ``channels:`` section with Discord over ``discord``; ``options`` are more lines of
    its section (``"dm_policy: open"``)."""
    extra = "".join(f"    {line}\n" for line in options)
    return f"""channels:
  discord:
    token: fake-discord-token
    api_base_url: {json.dumps(discord.base_url)}
    gateway_url: {json.dumps(discord.gateway_url)}
    guild_ready_timeout: 0.05
{extra}"""


def config_yaml(tmp_path: Path, *sections: str) -> str:
    """A whole config: the state dir under ``tmp_path`` and the given sections. No health
    endpoint unless a section sets one: it is on by default, on one fixed port."""
    health = any(section.startswith("health:") for section in sections)
    return (
        f"state_dir: {json.dumps(str(tmp_path / 'state'))}\n"
        + ("" if health else "health: {enabled: false}\n")
        + "".join(sections)
    )


@asynccontextmanager
async def daemon_running(
    config: str,
    *,
    ready: Callable[[App], bool] = lambda d: d.started,
    config_path: Path | None = None,
) -> AsyncIterator[App]:
    """``App.run()`` as a task until the block ends, then stopped (exit status 0 asserted)
    and the root logger put back as it was (the daemon configures it). ``config_path``: the
    file the config is written to first, run as ``botd run --config`` runs it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    if config_path is not None:
        config_path.write_text(config, encoding="utf-8")
    # The test process runs many daemons: settling (collecting) its whole heap at each start
    # would cost ~0.15 s a test. tests/test_heap.py and the process tests cover settling.
    daemon = App(parse_config(config, {}), env={}, config_path=config_path, settle_heap=False)
    running = asyncio.create_task(daemon.run())
    try:

        def up() -> bool:
            if running.done():
                running.result()  # what ended it, raised here
                raise AssertionError("the daemon ended before it was ready")
            return ready(daemon)

        await until(up, "the daemon ready")
        yield daemon
    finally:
        daemon.request_stop()
        try:
            assert await asyncio.wait_for(running, HANG_GUARD) == 0
        finally:
            for handler in root.handlers[:]:
                if handler not in handlers:
                    root.removeHandler(handler)
            root.setLevel(level)


__all__ = [
    "ANTHROPIC_KEY",
    "HANG_GUARD",
    "TELEGRAM_TOKEN",
    "anthropic_yaml",
    "config_yaml",
    "daemon_running",
    "discord_yaml",
    "slack_yaml",
    "telegram_yaml",
]
