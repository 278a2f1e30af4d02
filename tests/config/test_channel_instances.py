"""Named channel instances in the config: a section of any name runs on the platform its
``platform`` key names, validated by that platform's model; a section named after a platform
is that platform's, as it always was. What is wrong is told under the ``platform`` key, with
its line."""

from __future__ import annotations

import textwrap

import pytest

from botd.channels.slack.spec import SlackSection
from botd.channels.telegram.spec import TelegramSection
from botd.config import ConfigError, ConfigProblem, parse_config
from botd.config.schema import ChannelSection


def parsed(text: str) -> list[ConfigProblem]:
    with pytest.raises(ConfigError) as caught:
        parse_config(textwrap.dedent(text).lstrip("\n"), {}, "botd.yaml")
    return caught.value.problems


def test_a_named_section_is_a_channel_of_the_platform_it_names() -> None:
    text = """
    channels:
      telegram: {token: "1:a", dm_policy: open}
      support:
        platform: telegram
        token: "2:b"
        account: help
      ops: {platform: slack, bot_token: b, app_token: a}
    agent:
      message_targets: [support/123, {channel: ops, chat: C1}]
    scheduler:
      jobs:
        - {id: a, every: 1h, prompt: hi, deliver_to: {channel: support, chat: "5"}}
    """
    config = parse_config(textwrap.dedent(text).lstrip("\n"), {})
    assert config.channels.platforms() == {
        "telegram": "telegram",
        "support": "telegram",
        "ops": "slack",
    }
    assert config.channels.enabled() == ["telegram", "support", "ops"]
    support = config.channels.section("support")
    assert isinstance(support, TelegramSection)
    assert (support.token, support.account, support.dm_policy) == ("2:b", "help", "pairing")
    assert isinstance(config.channels.section("ops"), SlackSection)
    assert [t.channel for t in config.agent.message_targets] == ["support", "ops"]
    assert config.scheduler.jobs[0].deliver_to.channel == "support"


def test_a_section_named_after_its_platform_may_repeat_it() -> None:
    config = parse_config('channels:\n  telegram: {platform: telegram, token: "1:a"}\n', {})
    assert config.channels.platforms() == {"telegram": "telegram"}
    section = config.channels.section("telegram")
    assert isinstance(section, ChannelSection) and section.platform == "telegram"


def test_a_named_section_without_its_platform_is_told_at_its_line() -> None:
    [problem] = parsed(
        """
        channels:
          telegram: {token: "1:a"}
          support:
            token: "2:b"
        """
    )
    assert (problem.path, problem.line) == ("channels.support.platform", 3)
    assert problem.message == (
        "required key is missing: 'support' is no platform's name, so the section says "
        "which platform it runs on (one of acp, console, discord, slack, telegram)"
    )


def test_an_unknown_platform_is_told_at_its_key_with_did_you_mean() -> None:
    found = parsed(
        """
        channels:
          support:
            token: "2:b"
            platform: telgram
          ops: {platform: matrix}
        """
    )
    assert [(p.path, p.line, p.message) for p in found] == [
        ("channels.support.platform", 4, "unknown platform 'telgram'; did you mean 'telegram'?"),
        (
            "channels.ops.platform",
            5,
            "unknown platform 'matrix' (known: acp, console, discord, slack, telegram)",
        ),
    ]


def test_a_platforms_own_section_cannot_name_another_platform() -> None:
    [problem] = parsed("channels:\n  slack:\n    platform: telegram\n    token: t\n")
    assert (problem.path, problem.line) == ("channels.slack.platform", 3)
    assert problem.message == (
        "a section named 'slack' is the slack platform's: give a channel of platform "
        "'telegram' another name"
    )


def test_a_named_sections_keys_are_its_platforms() -> None:
    found = parsed(
        """
        channels:
          support:
            platform: telegram
            tokn: "2:b"
        """
    )
    assert [(p.path, p.line, p.message) for p in found] == [
        ("channels.support.token", 2, "required key is missing"),
        ("channels.support.tokn", 4, "unknown key 'tokn'; did you mean 'token'?"),
    ]


def test_targets_may_name_configured_channels_only() -> None:
    found = parsed(
        """
        channels:
          support: {platform: telegram, token: "2:b"}
          spare: {platform: console, enabled: false}
        agent:
          message_targets: [suport/1, spare/2]
        """
    )
    assert [(p.path, p.line, p.message) for p in found] == [
        (
            "agent.message_targets[0].channel",
            5,
            "unknown channel 'suport'; did you mean 'support'?",
        ),
        ("agent.message_targets[1].channel", 5, "channel 'spare' is not configured"),
    ]
