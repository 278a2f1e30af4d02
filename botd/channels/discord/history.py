"""Catching up on Discord (``botd.channels.catch_up``): the history of the chats a gateway
session serves, read over REST after the session began without a resume.

Each gateway client (the one client, or one per shard) has a ``CatchUp`` of its own. A new
session (a start, a reconnect that could not resume, a shard taken over from another node)
closes its gate as its READY is parsed (discord.py's ``connect`` event, before any message of
the session is dispatched) and starts a catch-up of its chats once discord.py calls it ready
(its guilds arrived). A resumed session needs none: Discord replays what it missed.

A chat is the session's when it is in its cache (its guild came to this shard) or, found
with ``GET /channels/{id}``, a DM on shard 0 (Discord sends DMs there) or a channel of a
guild whose shard ``(guild_id >> 22) % shard_count`` this is. An archived thread is read
where its parent channel is cached. Its messages are read with discord.py's
``channel.history`` (``GET /channels/{id}/messages?after=``, its rate limits waited out),
oldest first, at most ``MAX_MESSAGES`` per chat, and handed to the adapter's own live handler
(``take``), so a missed message is converted, filtered (the bot's own, other bots' unless
``allow_bots``) and answered as one that came live.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import discord

from ...store.protocols import CatchUpMarks
from ...store.records import ChatMark
from ..catch_up import SKIP_COUNTED, CatchUp, CatchUpSettings, Missed

__all__ = ["MAX_MESSAGES", "DiscordCatchUps", "DiscordHistory"]

log = logging.getLogger(__name__)

MAX_MESSAGES = 500
"""The most missed messages taken from one chat at one catch-up (five pages)."""

Take = Callable[[discord.Message], Awaitable[None]]
Readable = discord.abc.Messageable


class DiscordHistory:
    """The ``History`` of one gateway client's chats (see the module docstring)."""

    def __init__(
        self, client: discord.Client, take: Take, *, allow_bots: bool, shard_count: int
    ) -> None:
        self._client = client
        self._take = take
        self._allow_bots = allow_bots
        self._shard_count = shard_count

    async def take(self, message: discord.Message) -> None:
        await self._take(message)

    def _wanted(self, message: discord.Message) -> bool:
        """Whether the live path would hand ``message`` on (as ``_taking`` decides)."""
        me = self._client.user
        author = message.author
        return not (me is not None and author.id == me.id) and (self._allow_bots or not author.bot)

    async def read(self, mark: ChatMark, cutoff: float) -> Missed[discord.Message] | None:
        channel = await self._channel(mark)
        if channel is None:
            return None
        # Ids up to this one were made before the cutoff (a snowflake starts with its time).
        oldest = discord.utils.time_snowflake(datetime.fromtimestamp(cutoff, UTC), high=True)
        after = int(mark.message_id)
        taken: list[discord.Message] = []
        skipped = counted = 0
        async for message in channel.history(
            limit=None, after=discord.Object(after), oldest_first=True
        ):
            if message.id > oldest:
                if self._wanted(message):
                    taken.append(message)
                if len(taken) >= MAX_MESSAGES:
                    break
                continue
            counted += 1
            skipped += self._wanted(message)
            if counted >= SKIP_COUNTED:
                break
        else:
            return Missed(taken, skipped)
        if taken:  # the page limit was reached past the cutoff
            return Missed(taken, skipped)
        # Too many older messages to count: go on from the age limit.
        async for message in channel.history(
            limit=MAX_MESSAGES, after=discord.Object(oldest), oldest_first=True
        ):
            if self._wanted(message):
                taken.append(message)
        return Missed(taken, skipped, more_skipped=True)

    async def _channel(self, mark: ChatMark) -> Readable | None:
        """Where ``mark``'s history is read, when it is this session's chat."""
        client = self._client
        where = int(mark.where)
        found = client.get_channel(where)
        if isinstance(found, Readable):
            return found
        if mark.thread_id is not None:
            parent = client.get_channel(int(mark.chat_id))
            guild = getattr(parent, "guild", None)
            if guild is not None:  # an archived thread of a channel this session serves
                return client.get_partial_messageable(
                    where, guild_id=guild.id, type=discord.ChannelType.public_thread
                )
        shard = client.shard_id or 0
        if shard != 0:
            return None  # a DM, or another shard's guild: not this session's
        try:
            fetched = await client.fetch_channel(where)
        except (discord.NotFound, discord.Forbidden) as exc:
            log.debug("catch-up: channel %s not readable: %s", where, exc)
            return None
        guild_id = getattr(fetched, "guild_id", None) or getattr(
            getattr(fetched, "guild", None), "id", None
        )
        if guild_id is not None and (int(guild_id) >> 22) % self._shard_count != shard:
            return None
        return fetched if isinstance(fetched, Readable) else None


class DiscordCatchUps:
    """The adapter's catch-ups, one per gateway client, and their gates."""

    def __init__(
        self,
        label: str,
        settings: CatchUpSettings,
        marks: CatchUpMarks | None,
        *,
        channel: str,
        account: str,
        take: Take,
        allow_bots: bool,
        shard_count: int,
    ) -> None:
        self._label = label
        self._settings = settings
        self._marks = marks
        self._channel = channel
        self._account = account
        self._take = take
        self._allow_bots = allow_bots
        self._shard_count = shard_count
        self._of: dict[discord.Client, CatchUp] = {}

    def _catch_up(self, client: discord.Client) -> CatchUp:
        found = self._of.get(client)
        if found is None:
            shard = "" if client.shard_id is None else f" shard {client.shard_id}"
            found = self._of[client] = CatchUp(
                f"{self._label}{shard}",
                self._settings,
                self._marks,
                channel=self._channel,
                account=self._account,
            )
        return found

    def connecting(self, client: discord.Client) -> None:
        """``client`` is opening a gateway connection: its live messages wait from now."""
        self._catch_up(client).close_gate()

    def resumed(self, client: discord.Client) -> None:
        """``client``'s session resumed: Discord replays what it missed."""
        self._catch_up(client).open_gate()

    def ready(self, client: discord.Client) -> None:
        """``client`` has a new session: catch up on its chats."""
        history = DiscordHistory(
            client, self._take, allow_bots=self._allow_bots, shard_count=self._shard_count
        )
        self._catch_up(client).start(history)

    async def before_live(self, client: discord.Client, message: discord.Message) -> None:
        """Return once ``message``, live on ``client``, may be handed on."""
        found = self._of.get(client)
        if found is not None:
            await found.before_live(str(message.channel.id))

    async def forget(self, client: discord.Client) -> None:
        """``client``'s session is over (its shard given up, or stopping)."""
        found = self._of.pop(client, None)
        if found is not None:
            await found.stop()

    async def stop(self) -> None:
        for client in list(self._of):
            await self.forget(client)
