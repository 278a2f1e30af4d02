"""The conversation a Discord chat is, and one spelling of a Discord messaging-tool target
(Discord's ids do not tell a chat's kind)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...chat import TargetForm
from ..targets import KIND_PREFIX, kind_target, send_message, text_arg

__all__ = ["TARGET_FORM", "discord_conversation_key"]


def discord_conversation_key(
    instance: str, chat_id: str, thread_id: str | None = None, *, dm_user: str | None = None
) -> str:
    """``<instance>:dm:<user>`` for a DM (one conversation per person, whichever DM channel
    Discord gives them), ``<instance>:<thread>`` for a thread (a channel of its own), else
    ``<instance>:<channel>``."""
    if dm_user is not None:
        return f"{instance}:dm:{dm_user}"
    return f"{instance}:{thread_id or chat_id}"


def _thread_channel(target: str, thread: str) -> str:
    """A Discord thread is a channel of its own."""
    return f"channel:{thread}"


def _tool_send(
    action: str, args: Mapping[str, Any], thread_id: str | None
) -> tuple[str, str | None] | None:
    """``sendMessage`` to a ``to``, or ``threadReply`` into the thread ``channelId`` names."""
    sent = send_message(action, args, thread_id)
    if sent is not None or action != "threadreply":
        return sent
    channel_id = text_arg(args, "channelId", "channel_id")
    if channel_id is None:
        return None
    channel_id = channel_id.strip()
    to = channel_id if KIND_PREFIX.match(channel_id) else f"channel:{channel_id}"
    return to, None  # the thread is the channel itself


TARGET_FORM = TargetForm(kind_target, in_thread=_thread_channel, tool_send=_tool_send)
"""As Slack's: ``channel:<id>`` or ``user:<id>`` (``<@!id>`` mentions too)."""
