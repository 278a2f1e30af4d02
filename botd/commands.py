"""Chat commands: the few words a person types to steer the bot rather than talk to it.

The router asks whether a message is a command (commands pass mention gating in groups);
the sessions answer it. Both read the one list here.
"""

from __future__ import annotations

COMMANDS = ("/new", "/reset", "/stop", "/status", "/help")
"""Every chat command, as typed (lower case, without a bot name)."""


def chat_command(text: str) -> str | None:
    """The chat command ``text`` starts with (``/stop``, also as ``/stop@botname``), or None."""
    words = text.strip().split(maxsplit=1)
    if not words:
        return None
    command = words[0].split("@", 1)[0].lower()  # Telegram addresses commands to a bot
    return command if command in COMMANDS else None


__all__ = ["COMMANDS", "chat_command"]
