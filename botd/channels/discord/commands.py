"""Discord application commands: botd's chat commands in Discord's command picker.

Discord users find a bot's commands by typing ``/``, in a list of the commands the bot's
application registered. A ``/stop`` typed as plain text still reaches botd as a message, but
the picker shows nothing for it, and a user who picks nothing is left guessing. So the
adapter registers botd's chat commands (``commands.menu``: ``/pair`` only on a channel whose
owners approve pairing codes) as global application commands, ``/new``, ``/model`` and
``/pair`` with an optional ``text`` option for what follows them.

``publish_commands`` runs in the background after the connection is ready: it fetches what
the application has registered and only overwrites that (``PUT``, one call) when it differs,
so a restart changes nothing already right. A refusal or an outage is logged in Discord's
words and never holds up messages.

A command can be used in a channel the bot may not post in (Discord offers an application's
commands wherever its members may use them). Where Discord then refuses the answer,
``CommandFollowups`` tells the command's user so through the interaction, which needs no
channel permission.

A use of a command arrives as an interaction, which Discord wants answered within three
seconds. ``command_message`` makes it an ``InboundMessage`` of the conversation it was used
in (a DM, a channel, a thread of a channel), addressed to the bot and keyed by the
interaction's id, so it passes the same router, access policy and inbox as a typed
``/stop``; the answer is posted in that conversation. The interaction itself gets a line only
its user sees, saying whether the command was taken.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import discord
from discord import app_commands

from ...bounded import Expiring
from ...chat import InboundMessage, Target
from ...commands import menu
from .conversations import conversation_of

log = logging.getLogger(__name__)

WITH_TEXT = frozenset({"/new", "/model", "/pair", "/voice"})
"""The commands that take text after them (a first message, a model's name, a code, on or
off)."""

TEXT_HELP = {
    "/new": "The new conversation's first message",
    "/model": "The model's name or number (none: list them)",
    "/pair": "The pairing code the new user was given",
    "/voice": "on or off (none: say which it is)",
}

NOT_TAKEN_TEXT = "Not taken: botd's storage is failing. Use the command again later."

NOT_ADMITTED_TEXT = "Not taken: this bot answers only the people its owner let in here."

CANNOT_POST_TEXT = (
    "I cannot post in this channel (Discord: {reason}): give me the View Channel and Send "
    "Messages permissions here, or use me in a direct message."
)

FOLLOWUP_WINDOW = 14 * 60.0
"""Seconds a command's interaction is used to tell its user something (Discord honours its
token for 15 minutes)."""

_MEMORY = 1000

OnCommand = Callable[[discord.Interaction, str], Awaitable[None]]
"""Called with a command's interaction and the text it stands for (``/new what next?``)."""


def command_tree(
    client: discord.Client, on_command: OnCommand, *, pair: bool = False
) -> app_commands.CommandTree[Any]:
    """A command tree on ``client`` holding botd's chat commands, each calling ``on_command``
    (``pair``: with ``/pair``, on a channel whose owners approve pairing codes in the chat)."""
    tree: app_commands.CommandTree[Any] = app_commands.CommandTree(client)
    for name, description in menu(pairing_by_owners=pair):
        tree.add_command(_command(name, description, on_command))
    return tree


def _command(
    name: str, description: str, on_command: OnCommand
) -> app_commands.Command[Any, ..., None]:
    if name in WITH_TEXT:

        @app_commands.describe(text=TEXT_HELP[name])
        async def with_text(interaction: discord.Interaction, text: str | None = None) -> None:
            await on_command(interaction, f"{name} {text or ''}".rstrip())

        return app_commands.Command(
            name=name.removeprefix("/"), description=description[:100], callback=with_text
        )

    async def bare(interaction: discord.Interaction) -> None:
        await on_command(interaction, name)

    return app_commands.Command(
        name=name.removeprefix("/"), description=description[:100], callback=bare
    )


def _shape(name: str, description: str, options: list[str]) -> tuple[str, str, tuple[str, ...]]:
    return name, description, tuple(sorted(options))


async def publish_commands(tree: app_commands.CommandTree[Any], label: str) -> bool:
    """Register the tree's commands unless the application has them already; False when
    Discord refused or could not be reached (logged)."""
    wanted = {
        _shape(c.name, c.description, [p.name for p in c.parameters])
        for c in tree.get_commands()
        if isinstance(c, app_commands.Command)
    }
    try:
        registered = await tree.fetch_commands()
        have = {_shape(c.name, c.description, [o.name for o in c.options]) for c in registered}
        if have == wanted:
            return True
        await tree.sync()
    except discord.HTTPException as exc:
        log.warning(
            "%s: the slash commands were not registered: %s %s",
            label,
            exc.status,
            exc.text or exc,
        )
        return False
    except (discord.ClientException, aiohttp.ClientError, OSError) as exc:
        # No application id yet, a lost connection, a timeout.
        reason = str(exc) or type(exc).__name__
        log.warning("%s: the slash commands were not registered: %s", label, reason)
        return False
    log.info("%s: slash commands registered (%d)", label, len(wanted))
    return True


def command_message(
    interaction: discord.Interaction,
    text: str,
    *,
    instance: str,
    account_id: str,
    bot_name: str,
) -> InboundMessage | None:
    """The inbound message on the channel instance ``instance`` for a command used in
    ``interaction`` (None without a channel)."""
    channel_id = interaction.channel_id
    if channel_id is None:
        return None
    user = interaction.user
    dm_user = user.id if interaction.guild_id is None else None
    chat_id, thread_id, key = conversation_of(
        instance, interaction.channel, channel_id, dm_user_id=dm_user
    )
    return InboundMessage(
        channel=instance,
        chat_id=chat_id,
        sender_id=str(user.id),
        sender_name=user.display_name,
        text=text,
        message_id=str(interaction.id),
        conversation_key=key,
        account_id=account_id,
        thread_id=thread_id,
        is_direct=interaction.guild_id is None,
        mentions_bot=True,  # a command of this application is addressed to it
        reactable=False,  # no chat message to react to
        dedupe_keys=(f"interaction:{interaction.id}",),
        bot_name=bot_name,
        # Into the conversation itself: an interaction is no message a reply could point at.
        target=Target(instance, chat_id, account_id, thread_id=thread_id),
    )


class CommandFollowups:
    """The latest slash command used in each channel, for a while: when Discord refuses
    botd's answer there (the bot may not see or post in the channel, which does not stop its
    commands being used), the user who ran it is told so, in a message only they see."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._used: Expiring[str, discord.Interaction] = Expiring(_MEMORY, FOLLOWUP_WINDOW, clock)

    def remember(self, channel_id: str, interaction: discord.Interaction) -> None:
        self._used.remember(channel_id, interaction)

    async def tell_cannot_post(self, channel_id: str, reason: str) -> None:
        """Tell the user of a recent command in ``channel_id`` that botd cannot post there
        (once); nothing when no command came from it lately."""
        interaction = self._used.take(channel_id)
        if interaction is None:
            return
        text = CANNOT_POST_TEXT.format(reason=reason or "refused")
        try:
            await interaction.followup.send(text, ephemeral=True)
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            log.warning(
                "discord: telling a command's user botd cannot post in %s failed: %s",
                channel_id,
                exc,
            )


async def answer(interaction: discord.Interaction, text: str) -> None:
    """Answer ``interaction`` with ``text`` only its user sees; a refusal is logged."""
    try:
        await interaction.response.send_message(text[:2000], ephemeral=True)
    except (discord.HTTPException, discord.InteractionResponded) as exc:
        log.warning("discord: answering interaction %s failed: %s", interaction.id, exc)


__all__ = [
    "CANNOT_POST_TEXT",
    "NOT_ADMITTED_TEXT",
    "NOT_TAKEN_TEXT",
    "WITH_TEXT",
    "CommandFollowups",
    "answer",
    "command_message",
    "command_tree",
    "publish_commands",
]
