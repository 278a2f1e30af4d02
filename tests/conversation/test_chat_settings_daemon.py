"""Settings per group and forum topic end to end: the real daemon, Telegram's SDK over the
loopback Bot API, the Anthropic SDK over its fake. A group with its own system prompt and
model beside a group without (the requests carry them), a topic overriding its group, the
group's prompt never in the stored transcript, and a reload (SIGHUP's) applying a changed
group to its next message. One daemon for all of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from botd.app import App
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    daemon_store,
    telegram_yaml,
)
from tests.support.waiting import guarded, until

TEAM_A, TEAM_B = -1001, -1002
"""Two supergroups: A (a forum) sets its own prompt and model, B nothing (at first)."""


def _config(tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI, b: str) -> str:
    models = anthropic_yaml(model) + (
        "  fallbacks:\n"
        f"    - {{provider: anthropic, name: claude-team, api_key: {json.dumps(ANTHROPIC_KEY)},"
        f" base_url: {json.dumps(model.base_url)}}}\n"
        "agent:\n"
        "  system_prompt: You are botd.\n"
    )
    channel = telegram_yaml(
        telegram,
        "poll_timeout: 1",
        "require_mention: false",
        "groups:",
        f'  "{TEAM_A}":',
        "    system_prompt: Team A speaks German.",
        "    model: claude-team",
        "    topics:",
        '      "7": {system_prompt: Releases only., system_prompt_mode: replace, '
        "model: claude-test}",
        f'  "{TEAM_B}": {b}',
    )
    return config_yaml(tmp_path, models, channel)


async def _answer(daemon: App, telegram: FakeTelegramAPI, chat: int, said: str, **kw: Any) -> str:
    """Say ``said`` in ``chat``; the bot's latest message there once its run is over."""
    before = len(telegram.visible(chat))
    telegram.push_text(chat, said, chat_type="supergroup", **kw)
    await until(lambda: len(telegram.visible(chat)) > before, f"an answer to {said!r}")
    assert daemon.runtime is not None
    await guarded(daemon.runtime.dispatcher.drain(), f"the run of {said!r} to end")
    return telegram.visible(chat)[-1]


def _asked(model: FakeAnthropicAPI) -> tuple[str, str]:
    """The model and the system prompt of the latest request."""
    body = model.requests[-1].body
    return body["model"], "".join(block["text"] for block in body.get("system", []))


async def test_groups_and_topics_give_the_model_their_own_prompt_and_model(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI
) -> None:
    path = tmp_path / "botd.yaml"
    async with daemon_running(_config(tmp_path, telegram, model, "{}"), config_path=path) as bot:
        model.push(*(stream(text(f"answer {n}")) for n in range(4)))
        await _answer(bot, telegram, TEAM_A, "hallo", is_forum=True)  # its General topic
        assert _asked(model) == ("claude-team", "You are botd.\n\nTeam A speaks German.")
        await _answer(bot, telegram, TEAM_B, "hello")
        assert _asked(model) == ("claude-test", "You are botd.")
        await _answer(bot, telegram, TEAM_A, "release?", is_forum=True, thread_id=7)
        assert _asked(model) == ("claude-test", "Releases only.")

        # What is kept is the conversation, never the prompt it was given with.
        store = daemon_store(bot)
        session = await store.stored_session(f"telegram:{TEAM_A}:topic:1")
        assert session is not None
        kept = json.dumps(
            [m.model_dump(mode="json") for m in await store.transcript(session.session_id)]
        )
        assert "hallo" in kept and "answer 0" in kept
        assert "Team A" not in kept and "You are botd" not in kept

        # A reload gives group B a prompt and a model: its next message has them.
        assert bot.runtime is not None
        runtime, before = bot.runtime, bot.runtime.config
        path.write_text(
            _config(tmp_path, telegram, model, "{system_prompt: Team B., model: claude-team}"),
            encoding="utf-8",
        )
        bot.request_reload()
        await until(
            lambda: runtime.config is not before and "telegram" in runtime.adapters,
            "the reload applied",
        )
        await _answer(bot, telegram, TEAM_B, "and now?")
        assert _asked(model) == ("claude-team", "You are botd.\n\nTeam B.")
        assert len(model.requests) == 4
