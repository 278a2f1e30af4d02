"""Skills in the config: ``agent.skills_dir`` beside the ``skill`` tool, each skill problem
reported by ``botd check`` under that key with its own file and line, the ``skills`` lists of a
channel, a group and a topic (innermost first, names that must exist), and ``/status`` naming
the chat's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from botd.agent.providers.scripted import ScriptedProvider
from botd.cli import main
from botd.config import BotdConfig, ConfigError, parse_config
from botd.config.overrides import Defaults, resolve
from botd.conversation import Conversations
from botd.store.sqlite import SqliteStore
from botd.wiring import place_settings
from tests.conversation.harness import ListSink, RecordingProvider, settings, settle
from tests.skills.harness import in_group, write_skill


def _skills(root: Path) -> Path:
    write_skill(root, "alpha", "name: alpha\ndescription: First skill.\n")
    write_skill(root, "beta", "name: beta\ndescription: Second skill.\n")
    write_skill(root, "gamma", "name: gamma\ndescription: Third skill.\n")
    return root


def _config(skills: Path, groups: str = "") -> str:
    return (
        "agent:\n"
        "  tools: [message, skill]\n"
        f"  skills_dir: {json.dumps(str(skills))}\n"
        "channels:\n"
        "  telegram:\n"
        "    token: t\n"
        "    skills: [alpha, beta]\n"
        "    groups:\n"
        '      "-1001":\n'
        "        skills: [beta]\n"
        "        topics:\n"
        '          "7": {skills: []}\n'
        '      "-1002": {}\n' + groups
    )


def test_botd_check_names_each_skills_file_and_line_and_each_unknown_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skills = _skills(tmp_path / "skills")
    write_skill(skills, "broken", "name: Broken\ndescription: Bad name.\n")
    path = tmp_path / "botd.yaml"
    # A relative skills_dir is taken from the config file's directory.
    text = _config(skills).replace(json.dumps(str(skills)), "skills")
    path.write_text(text + '      "-1003": {skills: [alpha, nope]}\n', encoding="utf-8")
    assert main(["check", "--config", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{path}:3: agent.skills_dir: {skills}/broken/SKILL.md:2: name 'Broken' is not a skill "
        "name: lowercase letters, digits and single hyphens, not first or last, at most 64 "
        "characters",
        f"{path}:14: channels.telegram.groups.-1003.skills[1]: unknown skill 'nope': not in "
        "agent.skills_dir (alpha, beta, gamma)",
        "config invalid: 2 problems",
    ]
    (skills / "broken" / "SKILL.md").unlink()
    (skills / "broken").rmdir()
    path.write_text(text, encoding="utf-8")
    assert main(["check", "--config", str(path)]) == 0
    assert capsys.readouterr().out.startswith("config OK")


def test_the_skill_tool_and_skills_dir_go_together_and_lists_need_a_dir(tmp_path: Path) -> None:
    cases = {
        "agent:\n  tools: [skill]\n": (
            "agent: tools lists skill: set skills_dir (a directory of skills) too"
        ),
        f"agent:\n  skills_dir: {json.dumps(str(tmp_path))}\n": (
            "agent: skills_dir is set but tools does not list skill, which loads them: add it"
        ),
        "channels:\n  telegram:\n    token: t\n    skills: [alpha]\n": (
            "channels.telegram.skills[0]: names a skill, but agent.skills_dir is not set"
        ),
    }
    for text, problem in cases.items():
        with pytest.raises(ConfigError) as caught:
            parse_config(text, {})
        assert [f"{p.path}: {p.message}" for p in caught.value.problems] == [problem]


def _parsed(tmp_path: Path) -> BotdConfig:
    return parse_config(_config(_skills(tmp_path / "skills")), {})


def test_a_topic_beats_its_group_which_beats_its_channel(tmp_path: Path) -> None:
    config = _parsed(tmp_path)
    section = config.channels.section("telegram")
    defaults = Defaults.of(config)

    def skills(group: str | None, topic: str | None = None) -> tuple[object, str]:
        here = resolve(section, defaults, channel="telegram", group=group, topic=topic)
        return here.skills.value, here.skills.source

    assert skills(None) == (("alpha", "beta"), "channel telegram")
    assert skills("-1001") == (("beta",), "group -1001")
    assert skills("-1001", "7") == ((), "topic 7")
    assert skills("-1002") == (("alpha", "beta"), "channel telegram")
    assert resolve(None, defaults, channel="console").skills.value is None  # every skill


async def test_status_names_the_chats_skills_and_where_they_came_from(tmp_path: Path) -> None:
    config = _parsed(tmp_path)
    sink = ListSink("telegram")
    with SqliteStore.open(tmp_path) as store:
        manager = Conversations(
            store,
            RecordingProvider(ScriptedProvider()),
            sink,
            settings(),
            place=place_settings(lambda: config, Defaults.of(config)),
        )
        await manager.submit(in_group("/status", "-1001", 1))
        await manager.submit(in_group("/status", "-1001", 2, topic="7"))
        await settle(manager)
    first, second = sink.texts("-1001")
    assert "Skills: beta (group -1001's)." in first.splitlines()
    assert "Skills: none (topic 7's)." in second.splitlines()
