"""Buttons on Discord: message components, and a press of one.

botd's buttons go on a message as components: one action row per row of buttons, each a
button whose ``custom_id`` is the ``Button.value`` (the first of the message primary, the
others secondary). discord.py sends components only from a ``discord.ui.View``; botd's views
are stopped before they are sent, so discord.py keeps no callback for them (nothing in memory
per message): a press comes in as any interaction does, over the gateway (``on_interaction``),
and ``press_message`` makes it the presser's message, which the router decides on.

A component interaction wants its callback within three seconds: ``acknowledge`` sends
DEFERRED_UPDATE_MESSAGE (type 6) when the presser need not be told anything, else the
router's answer in a message only the presser sees (type 4, ephemeral). A press that counted
then has its buttons replaced by one disabled button showing the choice and who made it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import discord

from ...buttons.layout import chosen_label
from ...chat import Button, InboundMessage, Press, PressAnswer, Target
from .conversations import conversation_of

log = logging.getLogger(__name__)

CHOSEN_ID = "botd:chosen"
"""The ``custom_id`` of the disabled button that shows a choice made."""
LABEL_LIMIT = 80
"""The most characters of a button's label Discord takes."""
PRESS_NOT_TAKEN = "Not taken: botd's storage is failing. Press the button again later."
"""Told to a presser whose press could not be stored (Discord does not deliver it again)."""
PRESS_NOT_TAKEN_NOW = "Not taken: botd is not taking messages now."
"""Told to a presser while botd is starting or stopping."""
ALREADY_ACKNOWLEDGED = 40060
"""Discord's code refusing a second callback to one interaction (a redelivered press)."""


def button_view(rows: Sequence[Sequence[Button]]) -> discord.ui.View | None:
    """``rows`` as a view of components to send (None: no buttons)."""
    if not rows:
        return None
    view = _sent_only()
    first = True
    for number, row in enumerate(rows):
        for button in row:
            style = discord.ButtonStyle.primary if first else discord.ButtonStyle.secondary
            view.add_item(
                discord.ui.Button(
                    style=style,
                    label=button.label[:LABEL_LIMIT],
                    custom_id=button.value,
                    row=number,
                )
            )
            first = False
    return view


def chosen_view(chosen: str, presser: str) -> discord.ui.View:
    """One disabled button saying what was chosen (``chosen``: the button's label, as botd
    put it there) and who chose it: ``✔ Yes (Alice)``."""
    label = chosen_label(chosen, presser)
    if len(label) > LABEL_LIMIT:
        label = label[: LABEL_LIMIT - 1] + "…"
    view = _sent_only()
    view.add_item(
        discord.ui.Button(
            style=discord.ButtonStyle.secondary, label=label, custom_id=CHOSEN_ID, disabled=True
        )
    )
    return view


def _sent_only() -> discord.ui.View:
    """A view stopped at once: discord.py sends its components and keeps nothing for it."""
    view = discord.ui.View(timeout=None)
    view.stop()
    return view


def is_press(interaction: discord.Interaction) -> bool:
    """Whether ``interaction`` is a button of a message pressed."""
    data: dict[str, Any] = dict(interaction.data or {})
    return (
        interaction.type is discord.InteractionType.component
        and data.get("component_type") == discord.ComponentType.button.value
    )


def press_message(
    interaction: discord.Interaction, *, instance: str, account_id: str, bot_name: str
) -> InboundMessage | None:
    """The press as the presser's message on the channel instance ``instance``, in the
    conversation of the pressed message (None without a message or a channel)."""
    message, channel_id = interaction.message, interaction.channel_id
    data: dict[str, Any] = dict(interaction.data or {})
    custom_id = str(data.get("custom_id") or "")
    if message is None or channel_id is None or not custom_id:
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
        text="",  # the router names the button, as botd recorded it
        message_id=f"press:{interaction.id}",
        conversation_key=key,
        account_id=account_id,
        thread_id=thread_id,
        is_direct=interaction.guild_id is None,
        mentions_bot=True,
        dedupe_keys=(f"press:{interaction.id}",),
        bot_name=bot_name,
        # Into the conversation itself: a press is no message a reply could point at.
        target=Target(instance, chat_id, account_id, thread_id=thread_id),
        press=Press(str(interaction.id), custom_id, str(message.id)),
    )


async def acknowledge(interaction: discord.Interaction, answer: PressAnswer) -> None:
    """The press's callback: the router's answer for the presser only, or a silent ack. A
    redelivered press (acknowledged already) and a refusal are logged."""
    try:
        if answer.text:
            await interaction.response.send_message(answer.text[:2000], ephemeral=True)
        else:
            await interaction.response.defer()
    except discord.HTTPException as exc:
        if exc.code == ALREADY_ACKNOWLEDGED:
            log.debug("discord: press %s was acknowledged already", interaction.id)
            return
        log.warning("discord: acknowledging press %s failed: %s", interaction.id, exc)
    except discord.InteractionResponded:
        log.debug("discord: press %s was acknowledged already", interaction.id)


__all__ = [
    "CHOSEN_ID",
    "PRESS_NOT_TAKEN",
    "PRESS_NOT_TAKEN_NOW",
    "acknowledge",
    "button_view",
    "chosen_view",
    "is_press",
    "press_message",
]
