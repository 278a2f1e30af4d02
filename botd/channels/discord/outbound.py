"""What a Discord bot posts: ``DiscordOutbound``, the REST calls that send, edit and delete
messages, upload files, react and show that the bot is typing.

Outbound Markdown is rendered for Discord and split under 2000 characters and 17 lines a
message; mentions are limited to users, so model output never pings @everyone, @here or a
role. Each message of a reply piece carries the piece's key (given with the send:
``SendScope``) as its ``nonce``: Discord answers a send of it again (a retry, a resend after a
crash) with the message it already made. Each call goes through the REST client's channel
under the fence of its scope (``routes.fenced_channel``), once the bot's budget gave it its
turn (``budget``: answers first; discord.py keeps Discord's buckets and waits out 429s
itself), and what it still raises becomes a ``DiscordError`` (``errors.refusals``).

A message that is not the answer (``SendScope.silent``: a status line, a preview's further
message) is posted with the ``SUPPRESS_NOTIFICATIONS`` flag; in a chat whose
``link_previews`` is off every message is posted with ``SUPPRESS_EMBEDS``. The flag stays on
the message, so its edits show no embed either (discord.py's edit of a partial message
takes no flags, and needs none).
"""

from __future__ import annotations

import io
import secrets
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import discord

from ...chat import Button, MessageKey, MessageRef, Target
from ...text.markup import RenderedChunk
from ..base import LinkPreviews, OutboundFile, SendScope, fence_of, key_of
from ..budget import Budget, Priority, paced_as
from ..errors import ChannelError
from .budget import TYPING_STALE, take_turn
from .buttons import button_view
from .commands import CommandFollowups
from .errors import DiscordError, refusals
from .markup import MARKDOWN
from .routes import DiscordRoutes, RoutedHTTPClient, fenced_channel

__all__ = ["ALLOWED_MENTIONS", "LINE_LIMIT", "TEXT_LIMIT", "UPLOAD_LIMIT", "DiscordOutbound"]

TEXT_LIMIT = 2000
LINE_LIMIT = 17
UPLOAD_LIMIT = 10 * 1024 * 1024

# Model output may mention users, never @everyone/@here or roles; replies don't ping.
ALLOWED_MENTIONS = discord.AllowedMentions(
    everyone=False, roles=False, users=True, replied_user=False
)


class DiscordOutbound:
    """The calls one bot makes to post and change messages (module docstring).

    ``client`` gives the client that does the REST calls (None while not connected: a call
    then raises a retryable ``ChannelError``); ``routes`` are its URLs; ``followups`` tell a
    slash command's user when the bot may not post in its channel; ``budget`` is the bot's
    (``discord_budget``), which every call waits in for its turn; ``link_previews``, the
    chats whose messages show no embeds.
    """

    def __init__(
        self,
        client: Callable[[], discord.Client | None],
        routes: DiscordRoutes,
        followups: CommandFollowups,
        budget: Budget,
        *,
        link_previews: LinkPreviews | None = None,
    ) -> None:
        self._client = client
        self._routes = routes
        self._followups = followups
        self.budget = budget
        self._link_previews = link_previews or LinkPreviews()

    def _channel(
        self, target: Target, scope: SendScope | None = None
    ) -> discord.PartialMessageable:
        """``target``'s channel, its calls made under the fence of ``scope`` (if any)."""
        client = self._client()
        if client is None:
            # Starting, or being restarted after it went down: a send waits (is retried) for it.
            raise ChannelError("discord is not connected (yet)", retryable=True)
        assert isinstance(client.http, RoutedHTTPClient)
        channel_id = int(target.thread_id or target.chat_id)
        return fenced_channel(client._connection, client.http, channel_id, fence_of(scope))

    def _chunks(self, markdown: str) -> list[RenderedChunk]:
        chunks = MARKDOWN.chunks(markdown, TEXT_LIMIT, line_limit=LINE_LIMIT)
        return [chunk for chunk in chunks if chunk.text.strip()]

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """Post ``markdown`` as one or more messages; a 429 is waited out by discord.py."""
        chunks = self._chunks(markdown)
        return await self._post(target, chunks, reply_to=target.reply_to_id, scope=scope)

    async def send_buttons(
        self,
        target: Target,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """``send``, with ``rows`` as the components (action rows of buttons) of its last
        message."""
        chunks = self._chunks(markdown)
        return await self._post(target, chunks, reply_to=target.reply_to_id, rows=rows, scope=scope)

    async def edit_buttons(
        self,
        ref: MessageRef,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> None:
        """``ref``'s message shows ``markdown`` (its first message's worth) with ``rows`` as
        its components (none: ``components: []``, the buttons removed)."""
        chunks = self._chunks(markdown)
        message = self._channel(ref.target, scope).get_partial_message(int(ref.message_id))
        view = button_view(rows)
        await take_turn(self.budget, paced_as(scope) or Priority.PRESS)
        with refusals("edit"):
            if chunks:
                await message.edit(
                    content=chunks[0].text, view=view, allowed_mentions=ALLOWED_MENTIONS
                )
            else:
                await message.edit(view=view)

    async def _post(
        self,
        target: Target,
        chunks: list[RenderedChunk],
        *,
        reply_to: str | None,
        rows: Sequence[Sequence[Button]] = (),
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        channel = self._channel(target, scope)
        key = key_of(scope)
        refs: list[MessageRef] = []
        for number, chunk in enumerate(chunks):
            # A reply piece's message carries a nonce of its own, the same in every retry
            # and after a restart: Discord answers a repeat with the message it made.
            nonce = _nonce(key, number)
            # The buttons go under the last message.
            view = button_view(rows) if number == len(chunks) - 1 else None
            extra: dict[str, Any] = self._flags(target, scope)
            if view is not None:
                extra["view"] = view
            await take_turn(self.budget, paced_as(scope) or Priority.ANSWER)
            try:
                with refusals("send"):
                    if reply_to is None:
                        sent = await channel.send(
                            chunk.text, allowed_mentions=ALLOWED_MENTIONS, nonce=nonce, **extra
                        )
                    else:
                        reference = discord.MessageReference(
                            message_id=int(reply_to),
                            channel_id=channel.id,
                            fail_if_not_exists=False,
                        )
                        sent = await channel.send(
                            chunk.text,
                            allowed_mentions=ALLOWED_MENTIONS,
                            reference=reference,
                            nonce=nonce,
                            **extra,
                        )
            except DiscordError as exc:
                if exc.status == 403:  # a slash command's user is told, if any
                    with self._routes.interactions():
                        await self._followups.tell_cannot_post(str(channel.id), exc.text)
                raise
            reply_to = None  # only the first message replies
            refs.append(MessageRef(target, str(sent.id)))
        return refs

    async def send_file(
        self,
        target: Target,
        file: OutboundFile,
        caption: str = "",
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """Post ``file`` as an attachment (``discord.File``) in ``target``'s channel or thread,
        the caption as the message's content.

        Discord takes attachments of up to 10 MiB from a bot in a server without boosts; a
        larger file is refused before anything is sent.
        """
        if len(file.data) > UPLOAD_LIMIT:
            raise DiscordError(
                "upload", 413, f"file too large: {file.filename} is {len(file.data)} bytes"
            )
        channel = self._channel(target, scope)
        chunks = self._chunks(caption) if caption.strip() else []
        content = chunks[0].text if chunks else None
        attachment = discord.File(io.BytesIO(file.data), filename=file.filename)
        key = key_of(scope)
        nonce = _nonce(key, 0)
        flags = self._flags(target, scope)
        await take_turn(self.budget, Priority.ANSWER)
        with refusals("upload"):
            if target.reply_to_id is None:
                sent = await channel.send(
                    content,
                    file=attachment,
                    allowed_mentions=ALLOWED_MENTIONS,
                    nonce=nonce,
                    **flags,
                )
            else:
                reference = discord.MessageReference(
                    message_id=int(target.reply_to_id),
                    channel_id=channel.id,
                    fail_if_not_exists=False,
                )
                sent = await channel.send(
                    content,
                    file=attachment,
                    allowed_mentions=ALLOWED_MENTIONS,
                    reference=reference,
                    nonce=nonce,
                    **flags,
                )
        return [MessageRef(target, str(sent.id))]

    def _flags(self, target: Target, scope: SendScope | None) -> dict[str, Any]:
        """discord.py's arguments for the flags of a message to ``target`` (``silent``:
        ``SUPPRESS_NOTIFICATIONS``; ``suppress_embeds``: ``SUPPRESS_EMBEDS``)."""
        flags: dict[str, Any] = {}
        if scope is not None and scope.silent:
            flags["silent"] = True
        if not self._link_previews.shown_in(target.chat_id):
            flags["suppress_embeds"] = True
        return flags

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """Replace a posted message's text; what does not fit follows in new messages.

        A Discord message holds 2000 characters and the adapter keeps it under 17 lines,
        so a longer text continues in messages posted after the edited one.
        """
        chunks = self._chunks(markdown)
        if not chunks:
            return [ref]
        message = self._channel(ref.target, scope).get_partial_message(int(ref.message_id))
        await take_turn(self.budget, paced_as(scope) or Priority.PREVIEW)
        with refusals("edit"):
            await message.edit(content=chunks[0].text, allowed_mentions=ALLOWED_MENTIONS)
        # New messages, of no piece's key, paced as the edit was.
        overflow = replace(scope or SendScope(), key=None)
        return [ref, *await self._post(ref.target, chunks[1:], reply_to=None, scope=overflow)]

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        """Delete a posted message; one that is already gone counts as deleted."""
        message = self._channel(ref.target, scope).get_partial_message(int(ref.message_id))
        await take_turn(self.budget, Priority.ANSWER)
        try:
            with refusals("delete"):
                await message.delete()
        except DiscordError as exc:
            if exc.status != 404:
                raise

    async def set_reaction(
        self, ref: MessageRef, emoji: str | None, *, replacing: str | None = None
    ) -> None:
        """Remove the bot's own reaction ``replacing``, then add ``emoji`` (both idempotent
        at Discord). Needs Add Reactions and Read Message History where the message is."""
        message = self._channel(ref.target).get_partial_message(int(ref.message_id))
        client = self._client()
        if replacing is not None and replacing != emoji and client is not None:
            me = client.user
            if me is not None:
                await take_turn(self.budget, Priority.DECORATION)
                with refusals("remove reaction"):
                    await message.remove_reaction(replacing, me)
        if emoji is not None:
            await take_turn(self.budget, Priority.DECORATION)
            with refusals("react"):
                await message.add_reaction(emoji)

    async def typing(self, target: Target) -> None:
        """Show "typing…" once (about 10 s); sessions refresh it while a run is active. One
        that waited behind answers until it was out of date is not shown."""
        if not await take_turn(self.budget, Priority.DECORATION, stale_after=TYPING_STALE):
            return
        with refusals("typing"):
            await self._channel(target).typing()


def _nonce(key: MessageKey | None, part: int) -> str | int:
    """The nonce of a message: its key's token for a reply piece's message, else a random
    one (as discord.py picks by itself)."""
    return secrets.randbits(64) if key is None else key.token(part)
