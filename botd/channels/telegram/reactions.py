"""The emoji a Telegram bot may react with: Telegram's fixed list (Bot API,
``ReactionTypeEmoji.emoji``), as data. Anything else is refused by Telegram with
``REACTION_INVALID``, so ``botd check`` refuses it first.
"""

from __future__ import annotations

__all__ = ["REACTION_EMOJI", "telegram_reaction"]

REACTION_EMOJI: tuple[str, ...] = (
    "\U0001f44d",  # 👍
    "\U0001f44e",  # 👎
    "\u2764",  # ❤
    "\U0001f525",  # 🔥
    "\U0001f970",  # 🥰
    "\U0001f44f",  # 👏
    "\U0001f601",  # 😁
    "\U0001f914",  # 🤔
    "\U0001f92f",  # 🤯
    "\U0001f631",  # 😱
    "\U0001f92c",  # 🤬
    "\U0001f622",  # 😢
    "\U0001f389",  # 🎉
    "\U0001f929",  # 🤩
    "\U0001f92e",  # 🤮
    "\U0001f4a9",  # 💩
    "\U0001f64f",  # 🙏
    "\U0001f44c",  # 👌
    "\U0001f54a",  # 🕊
    "\U0001f921",  # 🤡
    "\U0001f971",  # 🥱
    "\U0001f974",  # 🥴
    "\U0001f60d",  # 😍
    "\U0001f433",  # 🐳
    "\u2764\ufe0f\u200d\U0001f525",  # ❤️‍🔥
    "\U0001f31a",  # 🌚
    "\U0001f32d",  # 🌭
    "\U0001f4af",  # 💯
    "\U0001f923",  # 🤣
    "\u26a1",  # ⚡
    "\U0001f34c",  # 🍌
    "\U0001f3c6",  # 🏆
    "\U0001f494",  # 💔
    "\U0001f928",  # 🤨
    "\U0001f610",  # 😐
    "\U0001f353",  # 🍓
    "\U0001f37e",  # 🍾
    "\U0001f48b",  # 💋
    "\U0001f595",  # 🖕
    "\U0001f608",  # 😈
    "\U0001f634",  # 😴
    "\U0001f62d",  # 😭
    "\U0001f913",  # 🤓
    "\U0001f47b",  # 👻
    "\U0001f468\u200d\U0001f4bb",  # 👨‍💻
    "\U0001f440",  # 👀
    "\U0001f383",  # 🎃
    "\U0001f648",  # 🙈
    "\U0001f607",  # 😇
    "\U0001f628",  # 😨
    "\U0001f91d",  # 🤝
    "\u270d",  # ✍
    "\U0001f917",  # 🤗
    "\U0001fae1",  # 🫡
    "\U0001f385",  # 🎅
    "\U0001f384",  # 🎄
    "\u2603",  # ☃
    "\U0001f485",  # 💅
    "\U0001f92a",  # 🤪
    "\U0001f5ff",  # 🗿
    "\U0001f192",  # 🆒
    "\U0001f498",  # 💘
    "\U0001f649",  # 🙉
    "\U0001f984",  # 🦄
    "\U0001f618",  # 😘
    "\U0001f48a",  # 💊
    "\U0001f64a",  # 🙊
    "\U0001f60e",  # 😎
    "\U0001f47e",  # 👾
    "\U0001f937\u200d\u2642\ufe0f",  # 🤷‍♂️
    "\U0001f937",  # 🤷
    "\U0001f937\u200d\u2640\ufe0f",  # 🤷‍♀️
    "\U0001f621",  # 😡
)

_VARIATION = "\ufe0f"
"""The emoji presentation selector: keyboards add it or leave it out (❤ and ❤️ are one
emoji to a person), so the list is matched without it."""

_BY_BARE_FORM = {emoji.replace(_VARIATION, ""): emoji for emoji in REACTION_EMOJI}


def telegram_reaction(emoji: str) -> str | None:
    """``emoji`` as Telegram's list spells it (❤️ is its ❤), or None when it is not one a
    bot may set."""
    return _BY_BARE_FORM.get(emoji.strip().replace(_VARIATION, ""))
