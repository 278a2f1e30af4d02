"""How botd names an emoji to Slack: Slack reacts by emoji *name* (``eyes``), so the config
takes either ``:name:`` (any name the workspace has, custom ones too) or one of the common
Unicode emoji below, which are mapped to their Slack names."""

from __future__ import annotations

import re

__all__ = ["EMOJI_NAMES", "slack_emoji_name"]

EMOJI_NAMES: dict[str, str] = {
    "👀": "eyes",
    "✅": "white_check_mark",
    "☑️": "ballot_box_with_check",
    "✔️": "heavy_check_mark",
    "❌": "x",
    "❎": "negative_squared_cross_mark",
    "✖️": "heavy_multiplication_x",
    "👍": "+1",
    "👎": "-1",
    "👌": "ok_hand",
    "🙏": "pray",
    "👏": "clap",
    "🎉": "tada",
    "🚀": "rocket",
    "🔥": "fire",
    "💯": "100",
    "❤️": "heart",
    "⭐": "star",
    "⏳": "hourglass_flowing_sand",
    "⌛": "hourglass",
    "⚠️": "warning",
    "🚫": "no_entry_sign",
    "⛔": "no_entry",
    "🛑": "octagonal_sign",
    "❗": "exclamation",
    "❓": "question",
    "🤔": "thinking_face",
    "🤖": "robot_face",
    "💬": "speech_balloon",
    "✍️": "writing_hand",
    "🔄": "arrows_counterclockwise",
    "😢": "cry",
    "🙂": "slightly_smiling_face",
}
"""Unicode emoji botd knows the Slack name of (the variation selector U+FE0F optional)."""

_NAME = re.compile(r":([a-z0-9_+'-]+(?:::skin-tone-[2-6])?):")
_VARIATION = "\ufe0f"
_BY_BARE_FORM = {emoji.replace(_VARIATION, ""): name for emoji, name in EMOJI_NAMES.items()}


def slack_emoji_name(emoji: str) -> str | None:
    """The Slack name of ``emoji`` (``:eyes:`` or 👀 -> ``eyes``); None when it is neither
    a ``:name:`` nor one of ``EMOJI_NAMES``."""
    text = emoji.strip()
    named = _NAME.fullmatch(text)
    if named is not None:
        return named.group(1)
    return _BY_BARE_FORM.get(text.replace(_VARIATION, ""))
