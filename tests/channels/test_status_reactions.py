"""Status reactions end to end, on each platform: the whole daemon with the real SDKs over the
loopback fakes. A message shows ``taken`` once accepted, then ``done`` or ``failed`` in its
place; a ``/stop`` leaves neither; ``reactions: false`` sets none; a refusal is logged once
and the answer still arrives."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from botd.app import App
from tests.fakes.anthropic_api import FakeAnthropicAPI, http_error, stream, text
from tests.fakes.discord_api import DM_CHANNEL_ID, FakeDiscordAPI
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    discord_yaml,
    slack_yaml,
    telegram_yaml,
)
from tests.support.waiting import guarded, until

TELEGRAM_DM = 777


@dataclass
class Platform:
    """One platform's fake as the tests drive it: what its status reactions are called
    there, how a person sends a DM, and what the chat shows."""

    name: str
    statuses: tuple[str, str, str]
    """Taken, done and failed, as the fake records them (Slack: names)."""
    send: Callable[[str], Awaitable[None]]
    """Send a DM."""
    history: Callable[[], list[list[str]]]
    """The bot's reactions on the DM's messages after each change, in order."""
    shown: Callable[[], list[str]]
    """The bot's messages in the DM."""
    refuse: Callable[[], None]
    """Make the platform refuse every reaction, as it does without the permission."""


@asynccontextmanager
async def platform(
    name: str, tmp_path: Path, model: FakeAnthropicAPI, *options: str
) -> AsyncIterator[tuple[Platform, App]]:
    """The daemon on ``name`` (a DM with an open policy), with ``options`` in its section."""
    lines = ("dm_policy: open", *options)
    if name == "telegram":
        async with FakeTelegramAPI("123456:TEST-TOKEN") as telegram:

            def telegram_history() -> list[list[str]]:
                calls = telegram.calls_to("setMessageReaction", ok_only=True)
                return [[r["emoji"] for r in c.params.get("reaction") or []] for c in calls]

            async def telegram_send(said: str) -> None:
                telegram.push_text(TELEGRAM_DM, said)

            driver = Platform(
                name,
                ("👀", "👍", "👎"),
                telegram_send,
                telegram_history,
                lambda: telegram.visible(TELEGRAM_DM),
                lambda: setattr(telegram, "refuse_reactions", "Bad Request: REACTION_INVALID"),
            )
            section = telegram_yaml(telegram, *lines)
            async with daemon_running(config_yaml(tmp_path, anthropic_yaml(model), section)) as d:
                yield driver, d
    elif name == "slack":
        async with FakeSlack() as slack:
            ts = iter(range(1, 100))

            async def slack_send(said: str) -> None:
                event = {"type": "message", "channel": "D1", "user": "U1", "text": said}
                event |= {"ts": f"100.{next(ts):06d}", "channel_type": "im"}
                await slack.send_event(event_callback(event))

            def slack_history() -> list[list[str]]:
                state: list[str] = []
                steps = []
                for call in slack.calls:
                    ok = call.method in ("reactions.add", "reactions.remove")
                    if not ok or (call.method == "reactions.add") == (call.args["name"] in state):
                        continue
                    name_ = str(call.args["name"])
                    state = [*state, name_] if call.method == "reactions.add" else []
                    steps.append(state)
                return steps

            driver = Platform(
                name,
                ("eyes", "white_check_mark", "x"),
                slack_send,
                slack_history,
                lambda: slack.visible("D1"),
                lambda: setattr(slack, "scopes", ["chat:write", "im:history"]),
            )
            section = slack_yaml(slack, *lines)
            async with daemon_running(config_yaml(tmp_path, anthropic_yaml(model), section)) as d:
                yield driver, d
    else:
        async with FakeDiscordAPI() as discord:

            async def discord_send(said: str) -> None:
                message = discord.message(said, channel_id=DM_CHANNEL_ID, guild=False)
                await discord.dispatch_message(message)

            def discord_history() -> list[list[str]]:
                state: list[str] = []
                steps = []
                for request in discord.requests:
                    if "/reactions/" not in request.path:
                        continue
                    emoji = request.path.split("/reactions/")[1].split("/")[0]
                    state = [*state, emoji] if request.method == "PUT" else []
                    steps.append(state)
                return steps

            driver = Platform(
                name,
                ("👀", "✅", "❌"),
                discord_send,
                discord_history,
                lambda: discord.visible(DM_CHANNEL_ID),
                lambda: setattr(discord, "refuse_reactions", (403, 50013, "Missing Permissions")),
            )
            section = discord_yaml(discord, *lines)
            async with daemon_running(config_yaml(tmp_path, anthropic_yaml(model), section)) as d:
                yield driver, d


PLATFORMS = ["telegram", "slack", "discord"]


async def say(chat: Platform, said: str) -> None:
    await chat.send(said)


async def idle(daemon: App) -> None:
    assert daemon.runtime is not None
    await guarded(daemon.runtime.dispatcher.drain(), "botd to finish its runs and reactions")


@pytest.mark.parametrize("name", PLATFORMS)
async def test_an_answered_message_shows_taken_then_done(name: str, tmp_path: Path) -> None:
    async with FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(stream(text("Hello there.")))
        async with platform(name, tmp_path, model) as (chat, daemon):
            await say(chat, "hi")
            await until(lambda: chat.shown() == ["Hello there."], "the answer")
            taken, done, _ = chat.statuses
            await until(lambda: chat.history()[-1:] == [[done]], "the done reaction")
            await idle(daemon)
            history = chat.history()
    # 👀 first, then ✅ in its place (on Slack and Discord: removed, then added).
    assert history[0] == [taken]
    assert history[-1] == [done]
    assert [done] not in history[:-1]


@pytest.mark.parametrize("name", PLATFORMS)
async def test_a_failed_run_shows_failed(name: str, tmp_path: Path) -> None:
    async with FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(http_error(400, "invalid_request_error", "this request is refused"))
        async with platform(name, tmp_path, model) as (chat, daemon):
            await say(chat, "hi")
            taken, done, failed = chat.statuses
            await until(lambda: chat.history()[-1:] == [[failed]], "the failed reaction")
            await idle(daemon)
            history, shown = chat.history(), chat.shown()
    assert history[0] == [taken]
    assert [done] not in history
    [notice] = shown  # the user was told in one line
    assert "\n" not in notice.strip()


@pytest.mark.parametrize("name", PLATFORMS)
async def test_a_stopped_run_shows_neither_done_nor_failed(name: str, tmp_path: Path) -> None:
    async with FakeAnthropicAPI(api_key="sk-ant-test") as model:
        held = model.hold()
        model.push(stream(text("Too late.")))
        async with platform(name, tmp_path, model) as (chat, daemon):
            taken = chat.statuses[0]
            await say(chat, "write a long essay")
            await until(lambda: model.requests and chat.history()[:1] == [[taken]], "the run")
            await say(chat, "/stop")
            await until(lambda: chat.history()[-1:] == [[]], "the taken reaction removed")
            held.set()
            await idle(daemon)
            history = chat.history()
    assert history == [[taken], []]  # the /stop itself gets no status reaction


@pytest.mark.parametrize("name", PLATFORMS)
async def test_reactions_false_sets_none(name: str, tmp_path: Path) -> None:
    async with FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(stream(text("Hello there.")))
        async with platform(name, tmp_path, model, "reactions: false") as (chat, daemon):
            await say(chat, "hi")
            await until(lambda: chat.shown() == ["Hello there."], "the answer")
            await idle(daemon)
            assert chat.history() == []


REFUSALS = {
    "telegram": "Telegram setMessageReaction: Reaction_invalid",  # as PTB words it
    "slack": "slack reactions.add failed: missing_scope",
    "discord": "Discord react: 403 Missing Permissions",
}


@pytest.mark.parametrize("name", PLATFORMS)
async def test_a_refused_reaction_is_logged_once_and_the_answer_still_arrives(
    name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(stream(text("One.")), stream(text("Two.")))
        with caplog.at_level(logging.WARNING, logger="botd.conversation.reactions"):
            async with platform(name, tmp_path, model) as (chat, daemon):
                chat.refuse()
                await say(chat, "first")
                await until(lambda: chat.shown() == ["One."], "the first answer")
                await idle(daemon)
                await say(chat, "second")
                await until(lambda: chat.shown() == ["One.", "Two."], "the second answer")
                await idle(daemon)
    refusals = [r.getMessage() for r in caplog.records if r.name == "botd.conversation.reactions"]
    assert len(refusals) == 1, refusals
    assert REFUSALS[name] in refusals[0]


async def test_a_run_resumed_after_a_restart_still_shows_done(tmp_path: Path) -> None:
    # The status follows the stored message: a run cut by the shutdown is resumed by the
    # next process, which never saw the message arrive, and its end sets 👍 all the same.
    async with (
        FakeAnthropicAPI(api_key="sk-ant-test") as model,
        FakeTelegramAPI("123456:TEST-TOKEN") as telegram,
    ):
        config = config_yaml(
            tmp_path,
            "shutdown_grace: 0\n",
            anthropic_yaml(model),
            telegram_yaml(telegram, "dm_policy: open"),
        )
        held = model.hold()
        model.push(stream(text("Cut short.")))
        async with daemon_running(config):
            sent = telegram.push_text(TELEGRAM_DM, "hi")
            key = (TELEGRAM_DM, int(sent["message_id"]))
            await until(lambda: telegram.reactions.get(key) == "👀" and model.requests, "taken")
        assert telegram.visible(TELEGRAM_DM) == []
        held.set()
        model.push(stream(text("Hello again.")))
        async with daemon_running(config) as daemon:
            await until(lambda: telegram.reactions.get(key) == "👍", "the done reaction")
            await idle(daemon)
    assert telegram.visible(TELEGRAM_DM)[-1:] == ["Hello again."]
