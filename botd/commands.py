"""Chat commands: the few words a person types to steer the bot rather than talk to it.

The router asks whether a message is a command (commands pass mention gating in groups);
the sessions answer it. Both read the one list here.

In a group with several bots a command may name the bot it is for (``/stop@some_bot``, the
Telegram convention). When the adapter knows this bot's own name, a command naming another
bot is not a command for this one: ``addressed_elsewhere`` finds it so the router can skip it.
"""

from __future__ import annotations

import re

from .config.schema import CHAT_COMMANDS

COMMANDS = CHAT_COMMANDS
"""Every chat command, as typed (lower case, without a bot name; the config's list, which
``commands.owner_only`` names). ``/start`` is what Telegram's app sends when a user first
opens a chat with the bot; ``/pair <code>`` is an owner's approval of a pairing code
(``botd.owners``)."""

MENU = (
    ("/new", "Start a new conversation (text after it: its first message)"),
    ("/stop", "Cancel the answer being written and what waits"),
    ("/status", "What the bot is doing in this chat"),
    ("/model", "List the models, or switch: /model <name or number>"),
    ("/usage", "Tokens used in this chat and today"),
    ("/voice", "Spoken answers: /voice on or /voice off"),
    ("/whoami", "Your user id and this chat's id, for the bot's settings"),
    ("/help", "The commands"),
)
"""The commands a platform lists in its command menu, with what each does (``/reset``, the
same as ``/new``, is left out)."""

PAIR_ENTRY = ("/pair", "Owners: approve a pairing code, /pair <code>")
"""``/pair``'s menu entry, listed only on a channel where it applies (``menu``)."""


def menu(*, pairing_by_owners: bool = False) -> tuple[tuple[str, str], ...]:
    """The command menu of a channel: ``MENU``, with ``/pair`` where owners can approve
    pairing codes in the chat (the channel has owners and pairs unknown senders)."""
    return (*MENU, PAIR_ENTRY) if pairing_by_owners else MENU


_ADDRESSED = re.compile(r"(/\w{1,64})@([\w.-]{1,64})", re.ASCII)
"""``/command@botname`` as one word."""


def chat_command(text: str, bot_name: str = "") -> str | None:
    """The chat command ``text`` starts with (``/stop``, also as ``/stop@botname``), or None.

    With ``bot_name`` (this bot's own name on the platform) a command addressed to another
    name is None: it is not for this bot.
    """
    words = text.strip().split(maxsplit=1)
    if not words:
        return None
    if bot_name and addressed_elsewhere(text, bot_name) is not None:
        return None
    command = words[0].split("@", 1)[0].lower()
    return command if command in COMMANDS else None


def command_argument(text: str) -> str:
    """What follows the command word in ``text`` (``/new what is this?`` -> ``what is this?``),
    its own line breaks kept; empty when nothing does."""
    words = text.strip().split(maxsplit=1)
    return words[1] if len(words) > 1 else ""


def addressed_elsewhere(text: str, bot_name: str) -> str | None:
    """The bot name when ``text`` starts with a ``/command@name`` for a name other than
    ``bot_name`` (any command, botd's or not); None otherwise, and when ``bot_name`` is
    unknown (empty)."""
    words = text.strip().split(maxsplit=1)
    if not words or not bot_name:
        return None
    match = _ADDRESSED.fullmatch(words[0])
    if match is None or match.group(2).lower() == bot_name.lower():
        return None
    return match.group(2)


__all__ = [
    "COMMANDS",
    "MENU",
    "PAIR_ENTRY",
    "addressed_elsewhere",
    "chat_command",
    "command_argument",
    "menu",
]
