"""Slack slash commands: how a Slack user gives botd its chat commands.

Slack's client takes every message starting with ``/`` for one of its own commands, so
``/stop`` typed to the bot never reaches it ("/stop is not a valid command"). What an app
receives instead are the slash commands registered in its configuration (with the
``commands`` scope). The adapter takes any of them:

* one named after a chat command (``/stop``, ``/new``, ...) is that command, with its text;
* any other (``/botd``, say, the app's own) is the chat command its text starts with
  (``/botd stop``, ``/botd new what next?``), ``/help`` when it has no text, and otherwise
  its text as a message to the bot (``/botd what is on today?``).

``slash_message`` makes the invocation an ``InboundMessage`` of the channel's conversation
(a slash command carries no thread), addressed to the bot and keyed by its ``trigger_id``,
so it passes the same router, access policy and inbox as a message, and the answer is posted
in that channel.

A slash command works in any channel, also one the bot is no member of, where Slack refuses
its answer (``not_in_channel``). ``CommandReplies`` keeps each command's ``response_url``
for a while, so the user who ran it is told so, in a message only they see.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from slack_sdk.webhook.async_client import AsyncWebhookClient

from ...bounded import Expiring
from ...chat import InboundMessage, Target
from ...commands import COMMANDS
from ...net.proxy import AiohttpProxy
from .targets import slack_conversation_key

log = logging.getLogger(__name__)

NOT_A_MEMBER = frozenset({"not_in_channel", "channel_not_found"})
"""Slack's refusals of a post where the bot is no member."""

NOT_A_MEMBER_TEXT = (
    "I cannot post in this channel: invite me to it (/invite @me), or talk to me in a direct "
    "message."
)

REPLY_WINDOW = 25 * 60.0
"""Seconds a command's response URL is used (Slack honours it for 30 minutes)."""

_MEMORY = 1000


def slash_text(command: str, text: str) -> str:
    """The message a slash command stands for (see the module docstring)."""
    name = "/" + command.strip().lstrip("/").lower()
    text = text.strip()
    if name in COMMANDS:
        return f"{name} {text}".rstrip()
    words = text.split(maxsplit=1)
    if not words:
        return "/help"
    first = "/" + words[0].lstrip("/").lower()
    if first in COMMANDS:
        return f"{first} {words[1]}" if len(words) > 1 else first
    return text


def slash_message(
    payload: Mapping[str, Any], *, instance: str, account_id: str, bot_name: str, key: str
) -> InboundMessage | None:
    """The inbound message for a slash command's ``payload`` on the channel instance
    ``instance`` (None when it names no channel, user or trigger); ``key`` is its dedupe key
    as the adapter keeps it."""
    channel = str(payload.get("channel_id") or "")
    user = str(payload.get("user_id") or "")
    trigger = str(payload.get("trigger_id") or "")
    if not channel or not user or not trigger:
        return None
    return InboundMessage(
        channel=instance,
        chat_id=channel,
        sender_id=user,
        sender_name=str(payload.get("user_name") or ""),
        text=slash_text(str(payload.get("command") or ""), str(payload.get("text") or "")),
        message_id=trigger,
        conversation_key=slack_conversation_key(instance, channel),
        account_id=account_id,
        is_direct=channel.startswith("D"),
        mentions_bot=True,  # a slash command of this app is addressed to it
        reactable=False,  # no chat message to react to
        dedupe_keys=(key,),
        bot_name=bot_name,
        # Into the channel itself: the trigger id is no message a reply could thread on.
        target=Target(instance, channel, account_id),
    )


class CommandReplies:
    """The response URLs of recent slash commands, by channel (see the module docstring)."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, proxy: AiohttpProxy | None = None
    ) -> None:
        """``proxy``: what the answers to ``response_url`` go through (the channel's
        ``proxy:``; None: the environment's, as slack_sdk reads it)."""
        self._urls: Expiring[str, str] = Expiring(_MEMORY, REPLY_WINDOW, clock)
        self._proxy = proxy

    def remember(self, payload: Mapping[str, Any]) -> None:
        channel, url = str(payload.get("channel_id") or ""), payload.get("response_url")
        if channel and isinstance(url, str) and url.startswith(("https://", "http://")):
            self._urls.remember(channel, url)

    async def tell_not_a_member(self, channel: str) -> None:
        """Tell the user of a recent slash command in ``channel`` that the bot may not post
        there (once: the URL is used up); nothing when no command came from it lately."""
        url = self._urls.take(channel)
        if url is None:
            return
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = AsyncWebhookClient(url, timeout=10)
                if self._proxy is not None:
                    client.proxy = self._proxy.url  # None: direct, though the SDK read the env
                    connector = self._proxy.connector()
                    if connector is not None:
                        client.session = aiohttp.ClientSession(connector=connector)
                        stack.push_async_callback(client.session.close)
                response = await client.send(text=NOT_A_MEMBER_TEXT, response_type="ephemeral")
        except Exception as exc:
            log.warning(
                "slack: telling a command's user the bot is not in %s failed: %s", channel, exc
            )
            return
        if response.status_code >= 300:
            log.warning(
                "slack: telling a command's user the bot is not in %s failed: HTTP %s %s",
                channel,
                response.status_code,
                response.body,
            )


__all__ = ["NOT_A_MEMBER", "CommandReplies", "slash_message", "slash_text"]
