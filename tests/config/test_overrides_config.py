"""Settings per channel, group and Telegram forum topic: the keys ``botd check`` takes and
refuses (each under its full path and line), and the one resolution order, topic → group
(by id, else ``"*"``) → channel → agent, with where each value came from."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from botd.config import BotdConfig, ConfigError, ConfigProblem, load_config, parse_config
from botd.config.overrides import Defaults, Effective, resolve
from tests.support.daemon_process import bare_env

TEAMS = """
model:
  provider: scripted
  fallbacks:
    - {provider: openai, name: gpt-team, base_url: "http://127.0.0.1:9/v1"}
agent:
  system_prompt: You are botd.
  queue_mode: collect
channels:
  telegram:
    token: t
    require_mention: true
    queue_mode: followup
    groups:
      "-1001":
        system_prompt: Team A speaks German.
        model: gpt-team
        tools: [message]
        topics:
          "7":
            system_prompt: Releases only.
            system_prompt_mode: replace
            model: scripted
            require_mention: false
          "8": {enabled: false, queue_mode: interrupt}
      "*":
        system_prompt: An unlisted group.
        topics:
          "1": {require_mention: false}
  support:
    platform: telegram
    token: u
    system_prompt: You answer support questions.
    system_prompt_mode: replace
"""


def problems(text: str) -> list[ConfigProblem]:
    with pytest.raises(ConfigError) as caught:
        parse_config(textwrap.dedent(text).lstrip("\n"), {})
    return caught.value.problems


def at(config: BotdConfig, channel: str, group: str | None, topic: str | None) -> Effective:
    section = config.channels.section(channel)
    return resolve(section, Defaults.of(config), channel=channel, group=group, topic=topic)


def test_each_value_comes_from_the_innermost_layer_that_sets_it() -> None:
    config = parse_config(TEAMS, {})
    group = at(config, "telegram", "-1001", None)
    assert group.system_prompt.text == "You are botd.\n\nTeam A speaks German."
    assert group.system_prompt.describe() == "agent's, then group -1001's (appended)"
    assert (group.model.value, group.model.whose) == ("gpt-team", "group -1001's")
    assert (group.queue_mode.value, group.queue_mode.source) == ("followup", "channel telegram")
    assert (group.require_mention.value, group.require_mention.source) == (
        True,
        "channel telegram",
    )
    assert group.tools.value == ("message",)

    topic = at(config, "telegram", "-1001", "7")
    assert topic.system_prompt.text == "Releases only."
    assert topic.system_prompt.describe() == "topic 7's (replacing)"
    assert (topic.model.value, topic.model.source) == ("scripted", "topic 7")
    assert (topic.require_mention.value, topic.require_mention.source) == (False, "topic 7")
    assert (topic.tools.value, topic.tools.source) == (("message",), "group -1001")

    quiet = at(config, "telegram", "-1001", "8")
    assert (quiet.enabled.value, quiet.queue_mode.value) == (False, "interrupt")
    # A topic not listed, the General topic among them, is its group.
    assert at(config, "telegram", "-1001", "1") == group

    # A group not listed takes "*" (and its topics), and nothing of another group's.
    other = at(config, "telegram", "-5", None)
    assert other.system_prompt.describe() == "agent's, then group \"*\"'s (appended)"
    assert (other.model.value, other.model.whose) == ("scripted", "agent's")
    assert other.tools.value is None
    assert at(config, "telegram", "-5", "1").require_mention.source == "topic 1"

    # A direct chat has no group layer; another account has its own channel layer.
    direct = at(config, "telegram", None, None)
    assert direct.system_prompt.text == "You are botd."
    assert (direct.allow_from.value, direct.enabled.value) == (frozenset(), True)
    support = at(config, "support", None, None)
    assert support.system_prompt.describe() == "channel support's (replacing)"
    assert support.system_prompt.text == "You answer support questions."
    assert (support.queue_mode.value, support.queue_mode.whose) == ("collect", "agent's")


def test_an_unknown_key_under_a_group_or_topic_is_named_with_its_path_and_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "botd.yaml"
    path.write_text(
        "channels:\n"
        "  telegram:\n"
        "    token: t\n"
        "    groups:\n"
        '      "-1001":\n'
        "        modle: x\n"
        "        topics:\n"
        '          "7": {system_promt: hi}\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, {})
    found = {(p.path, p.line): p.message for p in caught.value.problems}
    assert found == {
        ("channels.telegram.groups.-1001.modle", 6): "unknown key 'modle'; did you mean 'model'?",
        ("channels.telegram.groups.-1001.topics.7.system_promt", 8): (
            "unknown key 'system_promt'; did you mean 'system_prompt'?"
        ),
    }
    # botd check says the same, as file:line: key.path: message.
    result = subprocess.run(
        [sys.executable, "-m", "botd", "check", "--config", str(path)],
        capture_output=True,
        text=True,
        env=bare_env(),
        timeout=60,
    )
    assert result.returncode != 0
    assert (
        f"{path}:8: channels.telegram.groups.-1001.topics.7.system_promt: unknown key"
        in result.stdout + result.stderr
    )


def test_a_model_must_be_a_configured_one_at_every_layer() -> None:
    found = problems(
        """
        model:
          provider: scripted
          fallbacks: [{provider: openai, name: gpt-team}]
        channels:
          telegram:
            token: t
            model: gpt-taem
            groups:
              "-1001":
                model: gpt-team
                topics:
                  "7": {model: claude-nope}
        """
    )
    assert [(p.path, p.line) for p in found] == [
        ("channels.telegram.model", 7),
        ("channels.telegram.groups.-1001.topics.7.model", 12),
    ]
    assert found[0].message == (
        "unknown model 'gpt-taem': not one of the configured models (scripted, gpt-team: "
        "model.name and model.fallbacks' names); did you mean 'gpt-team'?"
    )


def test_topics_are_telegrams_and_a_mode_needs_its_prompt() -> None:
    found = problems(
        """
        channels:
          slack:
            bot_token: xoxb-1
            app_token: xapp-1
            groups:
              C0123: {topics: {"7": {}}}
          telegram:
            token: t
            groups:
              "-1001": {system_prompt_mode: replace}
        """
    )
    assert [(p.path, p.line) for p in found] == [
        ("channels.slack.groups.C0123.topics", 6),
        ("channels.telegram.groups.-1001", 10),
    ]
    assert "no forum topics" in found[0].message
    assert found[1].message == "system_prompt_mode needs system_prompt here"
