"""Taking the bot's own name out of a message keeps everything else as it was written."""

from __future__ import annotations

import re

import pytest

from botd.channels.base import without_mention

SLACK = re.escape("<@U0BOT>")


@pytest.mark.parametrize(
    ("text", "left"),
    [
        ("<@U0BOT> hi", "hi"),
        ("hey <@U0BOT> look", "hey look"),
        ("hey\t<@U0BOT>\tlook", "hey look"),
        ("done <@U0BOT>\nnext line", "done\nnext line"),
        ("<@U0BOT>\n  indented\n\n    more", "indented\n\n    more"),
        ("a\r\n<@U0BOT> b", "a\r\nb"),
        ("<@U0BOT>", ""),
        ("<@U0BOT><@U0BOT> twice", "twice"),
        ("no mention  here\n  kept", "no mention  here\n  kept"),
    ],
)
def test_the_mention_goes_and_the_layout_stays(text: str, left: str) -> None:
    assert without_mention(text, SLACK) == left


def test_a_pattern_with_flags_and_lookbehind_leaves_commands_alone() -> None:
    mention = r"(?<![\w/])@botd_bot\b"
    assert without_mention("/stop@botd_bot", mention, re.IGNORECASE) == "/stop@botd_bot"
    assert without_mention("@BOTD_bot hi\n  there", mention, re.IGNORECASE) == "hi\n  there"
    assert without_mention("mail me@botd_bot.com", mention, re.IGNORECASE) == (
        "mail me@botd_bot.com"
    )
