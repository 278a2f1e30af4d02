"""A Discord bot's budget (``botd.channels.budget``): its REST calls in botd's order,
answers first.

discord.py keeps Discord's rate limits itself: each route's bucket as Discord reports it in
the ``X-RateLimit-*`` headers of every answer (it waits before a spent bucket empties, and
waits out a 429 it still gets) and the global limit. What it cannot know is which call a
person waits for. So every REST call of the adapter first takes its turn in the bot's
``Budget`` (``DiscordOutbound``), by class:

* messages posted, files uploaded and messages deleted are answers; a post or an edit the
  delivery gave a class goes by it (``channels.budget.paced_as``: a final edit is an answer,
  a tool status line's post or edit a ``STATUS``);
* other edits are previews; the buttons changed after a press go first (``PRESS``);
* reactions and "typing…" are decorations; a typing that waited ``TYPING_STALE`` seconds
  is dropped.

The rate (``RATE``: Discord's global 50 requests a second) is only a ceiling above Discord's
buckets, so that when the adapter calls faster than that the queue forms here, answers
first, rather than in discord.py in the order the calls came. The budget is this node's: on
several nodes a Discord conversation's calls come from the node holding it.
"""

from __future__ import annotations

from ..budget import Budget, Priority, Window

__all__ = ["RATE", "TYPING_STALE", "discord_budget", "take_turn"]

RATE = Window(50, 1.0)
TYPING_STALE = 5.0
"""Seconds a typing indicator may wait before it is dropped (it shows for about ten)."""


def discord_budget(account: str) -> Budget:
    """The budget of the Discord bot ``account``."""
    return Budget(f"discord:{account}", RATE)


async def take_turn(
    budget: Budget, priority: Priority, *, stale_after: float | None = None
) -> bool:
    """Wait for the turn of a call of ``priority``: False when it waited ``stale_after``
    seconds and is dropped."""
    return await budget.take(priority, stale_after=stale_after)
