"""``reactions`` (and ``link_previews``): what each platform can set, and each
``reactions.scope``, is checked with the key and line, and what a message gets follows the
channel's and its group's settings."""

from __future__ import annotations

import textwrap
from pathlib import Path

from telegram.constants import ReactionEmoji

from botd.channels.telegram.reactions import REACTION_EMOJI
from botd.config import parse_config
from botd.config.schema import ChatChannelSection
from tests.support.daemon_process import bare_env, run_botd


def test_botd_check_refuses_an_emoji_the_platform_cannot_set(tmp_path: Path) -> None:
    path = tmp_path / "botd.yaml"
    path.write_text(
        textwrap.dedent(
            """
            channels:
              telegram:
                token: "1:x"
                reactions: {taken: "👀", done: "✅"}
                groups:
                  "-100": {reactions: {failed: "❤️"}}
              slack:
                bot_token: xoxb-1
                app_token: xapp-1
                reactions: {done: ":tada:", failed: "🦀"}
              discord:
                token: t
                reactions: {done: "eyes"}
            """
        ).lstrip(),
        encoding="utf-8",
    )
    result = run_botd("check", "--config", str(path), env=bare_env())
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert any(
        line.startswith(f"{path}:4: channels.telegram.reactions.done: '✅' is not one of")
        for line in lines
    ), lines
    # ❤️ is Telegram's ❤ (the variation selector is no other emoji); :tada: is a Slack name.
    assert not any("groups" in line or "reactions.done: ':tada:'" in line for line in lines)
    assert any(line.startswith(f"{path}:10: channels.slack.reactions.failed:") for line in lines)
    assert any(line.startswith(f"{path}:13: channels.discord.reactions.done:") for line in lines)
    assert "3 problems" in result.stderr


def test_the_telegram_list_is_the_bot_apis() -> None:
    assert set(REACTION_EMOJI) == {emoji.value for emoji in ReactionEmoji}


def test_a_group_setting_replaces_the_channels() -> None:
    config = parse_config(
        """
channels:
  telegram:
    token: "1:x"
    reactions: {done: "🎉"}
    groups:
      "-1": {reactions: false}
      "-2": {reactions: {taken: "🤔"}}
      "-3": {require_mention: false}
  discord:
    token: t
    reactions: false
    groups:
      "5": {reactions: true}
""",
        {},
    )
    telegram = config.channels.section("telegram")
    discord = config.channels.section("discord")
    assert isinstance(telegram, ChatChannelSection) and isinstance(discord, ChatChannelSection)
    assert telegram.status_reactions() == ("👀", "🎉", "👎")
    assert telegram.status_reactions("-1") is None
    assert telegram.status_reactions("-2") == ("🤔", "🎉", "👎")
    assert telegram.status_reactions("-3") == ("👀", "🎉", "👎")
    assert discord.status_reactions() is None
    assert discord.status_reactions("5") == ("👀", "✅", "❌")


def test_botd_check_names_a_wrong_scope_with_its_key_and_line(tmp_path: Path) -> None:
    path = tmp_path / "botd.yaml"
    path.write_text(
        textwrap.dedent(
            """
            channels:
              telegram:
                token: "1:x"
                reactions: {scope: everyone}
                groups:
                  "-100": {reactions: {scope: mention}}
                  "-200": {reactions: 5}
            """
        ).lstrip(),
        encoding="utf-8",
    )
    result = run_botd("check", "--config", str(path), env=bare_env())
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert any(
        line.startswith(f"{path}:4: channels.telegram.reactions.scope:")
        and "'all', 'dms', 'groups' or 'mentions'" in line
        for line in lines
    ), lines
    assert any(
        line.startswith(f"{path}:6: channels.telegram.groups.-100.reactions.scope:")
        for line in lines
    ), lines
    assert any(
        line.startswith(f"{path}:7: channels.telegram.groups.-200.reactions: expected true,")
        for line in lines
    ), lines
    assert "3 problems" in result.stderr  # each once, not once per kind reactions may be


def test_the_scope_of_a_group_replaces_the_channels() -> None:
    config = parse_config(
        """
channels:
  telegram:
    token: "1:x"
    reactions: {scope: dms}
    groups:
      "-1": {reactions: {scope: mentions}}
      "-2": {reactions: {taken: "🤔"}}
      "-3": {reactions: true}
""",
        {},
    )
    telegram = config.channels.section("telegram")
    assert isinstance(telegram, ChatChannelSection)
    assert telegram.reaction_scope() == "dms"
    assert telegram.reactions_for(None, mentions_bot=False) == ("👀", "👍", "👎")
    # -1: only a message that mentions the bot; -2 keeps the channel's dms (none here).
    assert telegram.reactions_for("-1", mentions_bot=False) is None
    assert telegram.reactions_for("-1", mentions_bot=True) == ("👀", "👍", "👎")
    assert telegram.reactions_for("-2", mentions_bot=True) is None
    assert telegram.reaction_scope("-3") == "dms"


def test_botd_check_names_a_wrong_link_previews_with_its_key_and_line(tmp_path: Path) -> None:
    path = tmp_path / "botd.yaml"
    path.write_text(
        textwrap.dedent(
            """
            channels:
              telegram:
                token: "1:x"
                link_previews: sometimes
                groups:
                  "-100": {link_previews: false}
              slack:
                bot_token: xoxb-1
                app_token: xapp-1
                groups:
                  "*": {link_previews: false}
            """
        ).lstrip(),
        encoding="utf-8",
    )
    result = run_botd("check", "--config", str(path), env=bare_env())
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert any(
        line.startswith(f"{path}:4: channels.telegram.link_previews: expected true or false")
        for line in lines
    ), lines
    assert any(
        line.startswith(f"{path}:10: channels.slack.groups:")
        and 'link_previews cannot be set for "*"' in line
        for line in lines
    ), lines
    assert "2 problems" in result.stderr


def test_a_groups_link_previews_replace_the_channels() -> None:
    config = parse_config(
        """
channels:
  telegram:
    token: "1:x"
    link_previews: false
    groups:
      "-1": {link_previews: true}
      "-2": {require_mention: false}
""",
        {},
    )
    telegram = config.channels.section("telegram")
    assert isinstance(telegram, ChatChannelSection)
    assert telegram.link_previews is False
    assert telegram.group_link_previews() == {"-1": True}
