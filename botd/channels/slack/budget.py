"""A Slack bot's budget (``botd.channels.budget``): its Web API calls paced, answers first.

Slack rates each method by tier per workspace and ``chat.postMessage`` at about one message a
second per channel (short bursts allowed). Every Web API call of the adapter takes its turn
here before it goes (``WebAPI.call``):

* ``chat.postMessage`` counts against its channel's window, ``CHANNEL`` (three in any three
  seconds: one a second, in short bursts);
* the class from the method (``priority_of``): reactions and the assistant thread's status
  ("is typing…") are decorations, ``chat.update`` a preview, everything else an answer,
  unless the delivery gave the call its class (``channels.budget.paced_as``: a final edit is
  an answer, a tool status line's post or edit a ``STATUS``); a status that waited
  ``STATUS_STALE`` seconds is dropped;
* the bot's rate (``RATE``) is only a ceiling above Slack's tiers, so that a queue forms and
  answers go first when the adapter calls faster than that: Slack's own limits are per method,
  and a 429 is still waited out by ``WebAPI.call`` after its ``Retry-After``.

The budget is this node's: on several nodes a Slack conversation's calls come from the node
holding it, and Slack's tiers are generous next to Telegram's one token rate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..budget import Budget, Priority, Window
from .errors import SlackError

__all__ = ["CHANNEL", "RATE", "STATUS_STALE", "slack_budget", "take_turn"]

RATE = Window(50, 1.0)
CHANNEL = Window(3, 3.0)
STATUS_STALE = 5.0
"""Seconds an assistant-thread status may wait before it is dropped."""

DECORATIONS = frozenset({"reactions.add", "reactions.remove", "assistant.threads.setStatus"})
PREVIEWS = frozenset({"chat.update"})


def slack_budget(account: str) -> Budget:
    """The budget of the Slack bot ``account``."""
    return Budget(f"slack:{account}", RATE)


def priority_of(method: str) -> Priority:
    if method in DECORATIONS:
        return Priority.DECORATION
    if method in PREVIEWS:
        return Priority.PREVIEW
    return Priority.ANSWER


async def take_turn(
    budget: Budget, method: str, args: Mapping[str, Any], paced: Priority | None = None
) -> None:
    """Wait for the turn of a call of ``method`` with ``args`` (``paced``: the class the
    delivery gave it, None: from the method); ``SlackError`` (not retryable) when it was a
    status that waited too long and is dropped."""
    channel = args.get("channel")
    windows: tuple[tuple[str, Window], ...] = ()
    if method == "chat.postMessage" and channel is not None:
        windows = ((f"channel:{channel}", CHANNEL),)
    stale = STATUS_STALE if method == "assistant.threads.setStatus" else None
    priority = priority_of(method) if paced is None else paced
    if not await budget.take(priority, windows, stale_after=stale):
        raise SlackError(method, "dropped: it waited behind answers until it was out of date")
