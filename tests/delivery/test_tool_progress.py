"""``agent.tool_progress``: while a tool runs longer than a second the chat shows which, and
nothing of it is left once the run is over (the answer, a ``/stop``, a crash and restart).

The real daemon with the real SDKs over the loopback fakes. The slow tool is ``web_fetch``
reading a page of ``SlowSite``, which answers only once the test lets it: the test decides
when the tool ends, and waits for what the chat shows, never for a time.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from botd.app import App
from tests.conversation.crash import DM, NOTICE, TOKEN, crash_config
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, tool_use
from tests.fakes.discord_api import DM_CHANNEL_ID, FakeDiscordAPI
from tests.fakes.loopback import serve
from tests.fakes.slack_api import ALL_SCOPES, FakeSlack, event_callback
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
    HANG_GUARD,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    daemon_store,
    discord_yaml,
    slack_yaml,
    telegram_yaml,
)
from tests.support.daemon_process import RunningDaemon, ended, reap, start_daemon
from tests.support.waiting import until

ANSWER = "I read it."
SUPPRESS_NOTIFICATIONS = 1 << 12
"""Discord's message flag for a message that notifies no one (4096)."""
THREAD = "1700000100.000001"


class SlowSite:
    """A web site on loopback: ``/slow`` answers once ``gate`` is set, ``/fast`` at once."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.asked: list[str] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> SlowSite:
        app = web.Application()
        app.router.add_get("/{page}", self._page)
        self._runner, port = await serve(app, shutdown_timeout=0.1)
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.gate.set()
        assert self._runner is not None
        await self._runner.cleanup()

    async def _page(self, request: web.Request) -> web.Response:
        page = request.match_info["page"]
        self.asked.append(page)
        if page == "slow":
            await self.gate.wait()
        return web.Response(text=f"the {page} page", content_type="text/plain")


@pytest.fixture
async def site() -> AsyncIterator[SlowSite]:
    async with SlowSite() as serving:
        yield serving


@pytest.fixture
async def model() -> AsyncIterator[FakeAnthropicAPI]:
    async with FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as api:
        yield api


def _agent(progress: str = "status", fetch_timeout: float = 60.0) -> str:
    return (
        f"agent:\n  tool_progress: {progress}\n  tools: [message, web_fetch]\n"
        f"  web_fetch: {{allow_hosts: [127.0.0.1], timeout: {fetch_timeout}}}\n"
    )


async def _start(config: Path, cwd: Path) -> RunningDaemon:
    return await start_daemon(
        config, cwd, ANTHROPIC_TEST_KEY=ANTHROPIC_KEY, TELEGRAM_TEST_TOKEN=TOKEN
    )


def _kept_rows(state: Path) -> list[tuple[object, ...]]:
    """The status lines a daemon running on ``state`` keeps (read beside it: WAL allows it)."""
    db = state / "botd.sqlite3"
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT * FROM status_lines").fetchall()
    except sqlite3.OperationalError:
        return []  # not migrated yet
    finally:
        conn.close()


def _fetching(model: FakeAnthropicAPI, site: SlowSite, page: str) -> None:
    """The model reads ``page`` with ``web_fetch``, then answers ``ANSWER``."""
    call = tool_use("w1", "web_fetch", json.dumps({"url": f"{site.url}/{page}"}))
    model.push(stream(call, stop_reason="tool_use"), stream(text(ANSWER)))


def _status_lines(shown: list[str]) -> list[str]:
    return [line for line in shown if "web_fetch" in line]


async def _no_status_kept(daemon: App) -> None:
    """Nothing of the run's status is kept in the store (forgotten once removed)."""
    store = daemon_store(daemon)

    def kept() -> list[object]:
        return store._connection().execute("SELECT * FROM status_lines").fetchall()

    await until(lambda: kept() == [], "nothing kept of the status")


# --- Telegram and Discord: a status line edited in place, deleted at the end -------------------


async def _telegram_run(
    tmp_path: Path,
    model: FakeAnthropicAPI,
    site: SlowSite,
    page: str,
    during: Callable[[FakeTelegramAPI], Any] | None = None,
    progress: str = "status",
    fetch_timeout: float = 60.0,
) -> tuple[list[str], list[str]]:
    """A Telegram DM whose answer reads ``page``; what the chat shows once it is answered,
    and every text the bot ever posted."""
    _fetching(model, site, page)
    async with FakeTelegramAPI() as telegram:
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            _agent(progress, fetch_timeout),
            telegram_yaml(telegram, "dm_policy: open", "poll_timeout: 1"),
        )
        async with daemon_running(config) as daemon:
            telegram.push_text(DM, "what does the page say?")
            if during is not None:
                await during(telegram)
            site.gate.set()
            await until(lambda: ANSWER in telegram.visible(DM), "the answer")
            await until(lambda: not _status_lines(telegram.visible(DM)), "no status line")
            await _no_status_kept(daemon)
        posted = [str(c.params["text"]) for c in telegram.calls_to("sendMessage", ok_only=True)]
        return telegram.visible(DM), posted


async def test_telegram_a_slow_tool_shows_a_status_line_that_is_gone_after_the_answer(
    tmp_path: Path, model: FakeAnthropicAPI, site: SlowSite
) -> None:
    seen: list[str] = []

    async def status_shows(telegram: FakeTelegramAPI) -> None:
        seen.extend(await until(lambda: _status_lines(telegram.visible(DM)), "a status line"))

    shown, posted = await _telegram_run(tmp_path, model, site, "slow", status_shows)
    # Plain words, the tool in code and the host it reads; never the whole URL.
    assert seen == ["⏳ Running web_fetch (127.0.0.1)…"]  # in code: Telegram keeps the text
    assert shown == [ANSWER]  # the answer once, the status line deleted
    assert posted.count(ANSWER) == 1


async def test_telegram_the_status_line_is_silent_and_the_answer_notifies(
    tmp_path: Path, model: FakeAnthropicAPI, site: SlowSite
) -> None:
    _fetching(model, site, "slow")
    async with FakeTelegramAPI() as telegram:
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            _agent(),
            telegram_yaml(telegram, "dm_policy: open", "poll_timeout: 1"),
        )
        async with daemon_running(config):
            telegram.push_text(DM, "what does the page say?")
            await until(lambda: _status_lines(telegram.visible(DM)), "a status line")
            site.gate.set()
            await until(lambda: telegram.visible(DM) == [ANSWER], "the answer, the line gone")
        sent = {
            str(c.params["text"]): c.params.get("disable_notification")
            for c in telegram.calls_to("sendMessage", ok_only=True)
        }
    # As PTB writes it: a form field "true"; the answer's call has none (Telegram: notify).
    assert sent == {"⏳ Running <code>web_fetch</code> (127.0.0.1)…": "true", ANSWER: None}


async def test_telegram_a_fast_tool_shows_nothing(
    tmp_path: Path, model: FakeAnthropicAPI, site: SlowSite
) -> None:
    shown, posted = await _telegram_run(tmp_path, model, site, "fast")
    assert site.asked == ["fast"]
    assert shown == [ANSWER] and posted == [ANSWER]


async def test_telegram_off_shows_nothing_however_slow_the_tool(
    tmp_path: Path, model: FakeAnthropicAPI, site: SlowSite
) -> None:
    async def tool_gave_up(telegram: FakeTelegramAPI) -> None:
        # The page never came: the tool ran its whole timeout (seconds), then the model was
        # told so and answered.
        await until(lambda: len(model.requests) == 2, "the tool's result with the model")

    shown, posted = await _telegram_run(
        tmp_path, model, site, "slow", tool_gave_up, "off", fetch_timeout=2.0
    )
    assert site.asked == ["slow"]
    assert shown == [ANSWER] and posted == [ANSWER]


async def test_telegram_stop_mid_tool_leaves_no_status_line(
    tmp_path: Path, model: FakeAnthropicAPI, site: SlowSite
) -> None:
    call = tool_use("w1", "web_fetch", json.dumps({"url": f"{site.url}/slow"}))
    model.push(stream(call, stop_reason="tool_use"), stream(text(ANSWER)))
    async with FakeTelegramAPI() as telegram:
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            _agent(),
            telegram_yaml(telegram, "dm_policy: open", "poll_timeout: 1"),
        )
        async with daemon_running(config) as daemon:
            telegram.push_text(DM, "what does the page say?")
            await until(lambda: _status_lines(telegram.visible(DM)), "a status line")
            telegram.push_text(DM, "/stop")
            await until(lambda: "Stopped." in telegram.visible(DM), "the stop confirmed")
            await until(lambda: not _status_lines(telegram.visible(DM)), "no status line")
            await _no_status_kept(daemon)
        assert telegram.visible(DM) == ["Stopped."]
        assert len(model.requests) == 1  # stopped in the tool: the model was not asked again


async def test_discord_a_slow_tool_shows_a_status_line_that_is_gone_after_the_answer(
    tmp_path: Path, model: FakeAnthropicAPI, site: SlowSite
) -> None:
    _fetching(model, site, "slow")
    async with FakeDiscordAPI() as discord:
        config = config_yaml(
            tmp_path, anthropic_yaml(model), _agent(), discord_yaml(discord, "dm_policy: open")
        )

        def ready(daemon: App) -> bool:
            return daemon.runtime is not None and "discord" in daemon.runtime.adapters

        async with daemon_running(config, ready=ready) as daemon:
            await discord.dispatch_message(
                discord.message("what does the page say?", channel_id=DM_CHANNEL_ID, guild=False)
            )
            seen = await until(lambda: _status_lines(discord.visible(DM_CHANNEL_ID)), "status")
            site.gate.set()
            await until(lambda: ANSWER in discord.visible(DM_CHANNEL_ID), "the answer")
            await until(lambda: not _status_lines(discord.visible(DM_CHANNEL_ID)), "none left")
            await _no_status_kept(daemon)
        assert seen == ["⏳ Running `web_fetch` (127.0.0.1)…"]
        assert discord.visible(DM_CHANNEL_ID) == [ANSWER]
        # The status line is no answer: posted with SUPPRESS_NOTIFICATIONS; the answer rings.
        flags = {str(r.body["content"]): r.body.get("flags", 0) for r in discord.message_posts()}
        assert flags[seen[0]] & SUPPRESS_NOTIFICATIONS
        assert not flags[ANSWER] & SUPPRESS_NOTIFICATIONS


# --- Slack: the assistant thread's status, or a status line where Slack refuses it -------------


def _dm_in_thread(ts: str) -> dict[str, Any]:
    return event_callback(
        {
            "type": "message",
            "channel": "D1",
            "channel_type": "im",
            "user": "U1",
            "text": "what does the page say?",
            "ts": ts,
            "thread_ts": THREAD,
        }
    )


async def _slack_run(
    tmp_path: Path,
    model: FakeAnthropicAPI,
    site: SlowSite,
    slack: FakeSlack,
    during: Callable[[], Any],
) -> None:
    _fetching(model, site, "slow")
    config = config_yaml(
        tmp_path, anthropic_yaml(model), _agent(), slack_yaml(slack, "dm_policy: open")
    )

    def ready(daemon: App) -> bool:
        return daemon.runtime is not None and "slack" in daemon.runtime.adapters

    async with daemon_running(config, ready=ready) as daemon:
        await slack.wait_socket(HANG_GUARD)
        await slack.send_event(_dm_in_thread("1700000100.000002"))
        await during()
        site.gate.set()
        await until(lambda: ANSWER in slack.visible("D1"), "the answer")
        await until(lambda: not _status_lines(slack.visible("D1")), "no status line")
        await until(lambda: ("D1", THREAD) not in slack.statuses, "no status")
        await _no_status_kept(daemon)


async def test_slack_a_slow_tool_shows_in_the_assistant_threads_status(
    tmp_path: Path, model: FakeAnthropicAPI, site: SlowSite
) -> None:
    async with FakeSlack() as slack:
        slack.assistant_threads.add(("D1", THREAD))

        async def status_shows() -> None:
            await until(lambda: "web_fetch" in slack.statuses.get(("D1", THREAD), ""), "status")

        await _slack_run(tmp_path, model, site, slack, status_shows)
        assert slack.visible("D1") == [ANSWER]  # no status line: the status said it
        tool_statuses = [s for _, _, s in slack.status_history if s != "is typing…"]
        assert tool_statuses[0] == "is running web_fetch (127.0.0.1)…"
        assert tool_statuses[-1] == ""  # cleared at the end


@pytest.mark.parametrize("refusal", ["invalid_thread_ts", "missing_scope"])
async def test_slack_where_the_status_is_refused_a_status_line_shows_instead(
    tmp_path: Path,
    model: FakeAnthropicAPI,
    site: SlowSite,
    refusal: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with FakeSlack() as slack:
        if refusal == "missing_scope":
            slack.assistant_threads.add(("D1", THREAD))
            slack.scopes = [scope for scope in ALL_SCOPES if scope != "assistant:write"]
        seen: list[str] = []

        async def line_shows() -> None:
            seen.extend(await until(lambda: _status_lines(slack.visible("D1")), "a status line"))

        await _slack_run(tmp_path, model, site, slack, line_shows)
        assert seen == ["⏳ Running `web_fetch` (127.0.0.1)…"]
        assert slack.visible("D1") == [ANSWER]
        [line] = [c for c in slack.calls_to("chat.postMessage") if "web_fetch" in c.args["text"]]
        assert line.args["thread_ts"] == THREAD  # in the conversation's thread
        assert slack.statuses == {}
    said = [r.getMessage() for r in caplog.records if "no assistant status" in r.getMessage()]
    assert len(said) == 1 and refusal in said[0]


# --- a crash mid-tool: the restarted daemon removes what the killed one left --------------------


async def test_sigkill_mid_tool_then_restart_leaves_no_status_line(
    tmp_path: Path, site: SlowSite
) -> None:
    state = tmp_path / "state"
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        config = crash_config(tmp_path, state, telegram, model)
        config.write_text(config.read_text().replace("agent:\n", _agent(), 1), encoding="utf-8")
        _fetching(model, site, "slow")
        first = await _start(config, tmp_path)
        try:
            telegram.push_text(DM, "what does the page say?")
            await until(lambda: _status_lines(telegram.visible(DM)), "a status line")
            # Killed once the line is kept (a kill between the post and its keeping is the
            # one moment a line can be left: its id is known only once it was posted).
            await until(lambda: _kept_rows(state), "the status line kept")
            first.kill()  # SIGKILL: no shutdown code runs, the status line stays
            await ended(first)
        finally:
            await reap(first)
        assert _status_lines(telegram.visible(DM))

        model.requests.clear()
        model.push(stream(text(ANSWER)))  # the resumed run answers without the tool
        second = await _start(config, tmp_path)
        try:
            await until(lambda: ANSWER in telegram.visible(DM), "the answer")
            await until(lambda: not _status_lines(telegram.visible(DM)), "no status line")
            second.send_signal(signal.SIGTERM)
            assert await ended(second) == 0
        finally:
            await reap(second)
    # Nothing was answered before the crash: the answer alone, the status line gone.
    assert telegram.visible(DM) in ([ANSWER], [NOTICE, ANSWER])
