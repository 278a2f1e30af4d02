"""The bot's command menu on Telegram: the list a user sees on typing ``/``.

At start the adapter publishes botd's chat commands (``commands.menu``: ``/pair`` only where
owners approve pairing codes) with
``setMyCommands``, once it has seen with ``getMyCommands`` that the menu differs, so a
restart changes nothing that is already right. It is done in the background: a refusal or an
outage is logged in Telegram's words and never holds up polling.
"""

from __future__ import annotations

import logging

from telegram import Bot, BotCommand
from telegram.error import TelegramError

from ...commands import menu

log = logging.getLogger(__name__)


def menu_commands(*, pair: bool = False) -> list[BotCommand]:
    """``MENU`` as Telegram takes it (names without the slash); ``pair``: with ``/pair``."""
    entries = menu(pairing_by_owners=pair)
    return [BotCommand(name.removeprefix("/"), description) for name, description in entries]


async def publish_commands(bot: Bot, label: str, *, pair: bool = False) -> bool:
    """Set the bot's menu to botd's commands (``pair``: with ``/pair``, on a channel whose
    owners approve pairing codes in the chat) unless it is already; False when Telegram
    refused or could not be reached (logged)."""
    wanted = menu_commands(pair=pair)
    try:
        if tuple(await bot.get_my_commands()) == tuple(wanted):
            return True
        await bot.set_my_commands(wanted)
    except TelegramError as exc:
        log.warning("%s: the command menu was not set: %s", label, exc.message)
        return False
    log.info("%s: command menu set (%d commands)", label, len(wanted))
    return True


__all__ = ["menu_commands", "publish_commands"]
