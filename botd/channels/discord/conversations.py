"""Which conversation a Discord message or slash command belongs to.

A DM is one conversation per user. In a server, a channel is one conversation and a thread
is one of its own, under its channel's settings (the channel's allowlist entry, its tools
hold in it, as for Slack threads and Telegram topics): the thread's chat is its channel, and
the thread is named apart.
"""

from __future__ import annotations

from typing import NamedTuple

import discord

from .targets import discord_conversation_key

THREAD_TYPES = (
    discord.ChannelType.public_thread,
    discord.ChannelType.private_thread,
    discord.ChannelType.news_thread,
)


class Conversation(NamedTuple):
    chat_id: str
    thread_id: str | None
    key: str


def conversation_of(
    instance: str, channel: object, channel_id: int, *, dm_user_id: int | None
) -> Conversation:
    """The conversation of ``channel`` (id ``channel_id``) on the channel instance
    ``instance``; ``dm_user_id``: the user whose DM it is, None in a server."""
    if dm_user_id is not None:
        dm_user = str(dm_user_id)
        return Conversation(
            str(channel_id),
            None,
            discord_conversation_key(instance, str(channel_id), dm_user=dm_user),
        )
    if isinstance(channel, discord.Thread) or getattr(channel, "type", None) in THREAD_TYPES:
        parent = str(getattr(channel, "parent_id", None) or channel_id)
        thread = str(channel_id)
        return Conversation(parent, thread, discord_conversation_key(instance, parent, thread))
    chat = str(channel_id)
    return Conversation(chat, None, discord_conversation_key(instance, chat))


__all__ = ["THREAD_TYPES", "Conversation", "conversation_of"]
