"""Skills end to end: the real daemon, Telegram's SDK over the loopback Bot API, the Anthropic
SDK over its fake. In a group whose ``skills`` list names one skill, the system prompt lists
that one only; the model calls ``skill`` and reads its body, and asking for a skill not
offered there is an error naming none of the others. A skill added to the directory is
offered after a reload (SIGHUP's path), in a direct chat, which offers every skill; a reload
that finds a broken skill is refused and keeps the skills in force."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from botd.app import App
from botd.ops.systemd import SystemdNotifier
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, tool_use
from tests.fakes.telegram_api import FakeTelegramAPI, user
from tests.skills.harness import EXAMPLE, write_skill
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)
from tests.support.waiting import guarded, until

ALICE, GROUP = 1001, -1003


def _config(
    tmp_path: Path, skills: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI
) -> str:
    agent = (
        "agent:\n  system_prompt: You are botd.\n  tools: [message, skill]\n"
        f"  skills_dir: {json.dumps(str(skills))}\n"
    )
    channel = telegram_yaml(
        telegram,
        "poll_timeout: 1",
        "dm_policy: open",
        "require_mention: false",
        "groups:",
        f'  "{GROUP}": {{skills: [release-notes]}}',
    )
    return config_yaml(tmp_path, anthropic_yaml(model), agent, channel)


async def _say(daemon: App, telegram: FakeTelegramAPI, chat: int, said: str) -> str:
    before = len(telegram.visible(chat))
    kind = "private" if chat > 0 else "supergroup"
    telegram.push_text(chat, said, sender=user(ALICE), chat_type=kind)
    await until(lambda: len(telegram.visible(chat)) > before, f"an answer to {said!r}")
    assert daemon.runtime is not None
    await guarded(daemon.runtime.dispatcher.drain(), f"the run of {said!r} to end")
    return telegram.visible(chat)[-1]


def _system(request: Any) -> str:
    return "".join(block["text"] for block in request.body.get("system", []))


def _results(request: Any) -> dict[str, tuple[str, bool]]:
    """The tool results the request hands back, by tool call id: text and error flag."""
    found: dict[str, tuple[str, bool]] = {}
    for block in request.body["messages"][-1]["content"]:
        if block.get("type") == "tool_result":
            said = "".join(part["text"] for part in block["content"] if part["type"] == "text")
            found[block["tool_use_id"]] = (said, bool(block.get("is_error")))
    return found


async def test_a_group_is_offered_its_skills_and_the_model_loads_one(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI
) -> None:
    skills = tmp_path / "skills"
    shutil.copytree(EXAMPLE, skills)
    write_skill(skills, "alpha", "name: alpha\ndescription: Only in direct chats.\n")
    config = _config(tmp_path, skills, telegram, model)
    async with daemon_running(config, config_path=tmp_path / "botd.yaml") as bot:
        model.push(
            stream(
                tool_use("t1", "skill", json.dumps({"name": "release-notes"})),
                tool_use("t2", "skill", json.dumps({"name": "alpha"})),
                stop_reason="tool_use",
            )
        )
        model.push(stream(text("Here are the notes.")))
        assert await _say(bot, telegram, GROUP, "release notes please") == "Here are the notes."
        asked, answered = model.requests[-2:]
        system = _system(asked)
        assert system.startswith("You are botd.\n\nSkills you can use:")
        assert "- release-notes: Write release notes" in system
        assert "alpha" not in system
        results = _results(answered)
        body = (EXAMPLE / "release-notes" / "SKILL.md").read_text().split("---\n", 2)[2]
        assert results["t1"] == (body.strip(), False)
        assert results["t2"] == (
            "No skill named 'alpha' here. Skills offered: release-notes.",
            True,
        )

        # A skill added to the folder: offered once botd reloads, where every skill is.
        write_skill(skills, "gamma", "name: gamma\ndescription: Added while running.\n")
        assert bot.runtime is not None
        runtime = bot.runtime
        bot.request_reload()
        await until(lambda: "gamma" in runtime.skills.names, "the reload to read gamma")
        model.push(stream(text("Hi.")))
        await _say(bot, telegram, ALICE, "hello")
        system = _system(model.requests[-1])
        assert "- alpha: Only in direct chats." in system
        assert "- gamma: Added while running." in system

        # A broken skill makes the reload refused: the skills read before stay in force.
        write_skill(skills, "delta", "name: Delta\ndescription: Misnamed.\n")
        assert not await bot.reload(runtime, SystemdNotifier({}))
        assert runtime.skills.names == ["alpha", "gamma", "release-notes"]
