"""What a Discord bot takes in: ``DiscordInbound``, the gateway's messages and edits, slash
commands and button presses turned into ``InboundMessage``s and handed to the sink.

It maps messages to conversations (a DM per user, a guild channel, a thread of its own:
``conversations``), drops the bot's own messages and, unless ``allow_bots``, other bots', and
gives each message its id as the dedupe key, so the router drops a gateway replay, after a
restart too. A reply carries the message it answers, quoted (``quotes``; fetched when Discord
did not send it along). With ``auto_thread`` a mention of the bot in a server's channel gets
a thread of its own. A slash command (``commands``) and a press of a button (``buttons``) are
handed on like the user's message and the interaction answered as the router decided.
Stickers, polls and forwards are read as ``inbound_kinds`` says; a notice Discord wrote itself
(a system message: a pin, a member joining) is not read, and logged once per kind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

import discord

from ...chat import InboundMessage, PressAnswer
from ..base import InboundSink, UntilAccepted, without_mention
from ..inputs import NotRead
from .buttons import PRESS_NOT_TAKEN, PRESS_NOT_TAKEN_NOW, acknowledge, chosen_view, press_message
from .commands import (
    NOT_ADMITTED_TEXT,
    NOT_TAKEN_TEXT,
    CommandFollowups,
    answer,
    command_message,
)
from .conversations import conversation_of
from .errors import DiscordError, refusals
from .inbound_kinds import forwarded_snapshot, marker_of, snapshot_text
from .inbound_media import discord_attachments
from .quotes import fetch_quote, quote_of, unresolved_reply
from .routes import DiscordRoutes

__all__ = ["MESSAGE_CONTENT_INTENT_HELP", "DiscordInbound"]

log = logging.getLogger(__name__)

MESSAGE_CONTENT_INTENT_HELP = (
    'enable "Message Content Intent" for this bot in the Discord developer portal '
    "(Applications > your app > Bot > Privileged Gateway Intents)"
)


class DiscordInbound:
    """The handlers of one bot's gateway events (module docstring).

    ``client`` gives the logged-in client (None while stopped); ``routes`` are its URLs
    (interactions are answered at Discord's own); ``followups`` remembers each slash
    command's interaction; ``admits`` is the access policy, asked before a thread is
    started or a quote fetched. ``sink`` is set at start and cleared when it stops taking.
    """

    def __init__(
        self,
        client: Callable[[], discord.Client | None],
        routes: DiscordRoutes,
        followups: CommandFollowups,
        *,
        channel: str,
        account_id: str,
        allow_bots: bool,
        auto_thread: bool,
        admits: Callable[[InboundMessage], bool] | None,
    ) -> None:
        self._client = client
        self._routes = routes
        self._followups = followups
        self.name = channel
        self.account_id = account_id
        self._allow_bots = allow_bots
        self._auto_thread = auto_thread
        self._admits = admits
        self.sink: InboundSink | None = None
        self._handing = UntilAccepted(channel)
        self._until_accepted = self._handing.hand
        self._warned_content = False
        self._not_read = NotRead(f"{channel}[{account_id}]")
        self._pressing: set[int] = set()
        """The ids of the interactions (button presses) being handled."""

    async def settle(self) -> None:
        """Wait until every accepted message was handed on (``UntilAccepted.settle``)."""
        await self._handing.settle()

    async def on_command(self, interaction: discord.Interaction, text: str) -> None:
        """A slash command used (``commands``): handed on like a typed one, and the
        interaction answered, for its user only, once it was taken or could not be."""
        with self._routes.interactions():
            await self._take_command(interaction, text)

    async def _take_command(self, interaction: discord.Interaction, text: str) -> None:
        client, sink = self._client(), self.sink
        me = client.user if client is not None else None
        message = command_message(
            interaction,
            text,
            instance=self.name,
            account_id=self.account_id,
            bot_name=me.name if me else "",
        )
        if sink is None or message is None:
            await answer(interaction, "Not taken: botd is not taking messages now.")
            return
        self._followups.remember(message.thread_id or message.chat_id, interaction)
        # A sender the policy refuses is handed on all the same: the router may answer
        # (a pairing code, say).
        admitted = self._admitted(message)
        try:
            await self._until_accepted(sink, message)
        except Exception as exc:
            log.warning("%s: slash command %s was not taken: %s", self.name, text.split()[0], exc)
            await answer(interaction, NOT_TAKEN_TEXT)
            return
        await answer(interaction, f"Taken: {text}" if admitted else NOT_ADMITTED_TEXT)

    async def on_press(self, interaction: discord.Interaction) -> None:
        """A button of the bot's pressed (``buttons``): handed to the sink like the
        presser's message, and the interaction acknowledged as the router decided; a press
        that counted has its buttons replaced by the choice made.

        A delivery of a press whose first delivery is still being handled here is left to
        that one: both carry the same token, and only the first callback counts, which must
        be the one saying what the press did."""
        if interaction.id in self._pressing:
            log.debug("%s: press %s delivered again while handled", self.name, interaction.id)
            return
        self._pressing.add(interaction.id)
        try:
            with self._routes.interactions():
                await self._take_press(interaction)
        finally:
            self._pressing.discard(interaction.id)

    async def _take_press(self, interaction: discord.Interaction) -> None:
        client, sink = self._client(), self.sink
        me = client.user if client is not None else None
        press = press_message(
            interaction,
            instance=self.name,
            account_id=self.account_id,
            bot_name=me.name if me else "",
        )
        if sink is None:
            await acknowledge(interaction, PressAnswer(PRESS_NOT_TAKEN_NOW))
            return
        if press is None:
            await acknowledge(interaction, PressAnswer())
            return
        try:
            decided = await sink(press)
        except Exception as exc:
            log.warning("%s: a button press was not taken: %s", self.name, exc)
            await acknowledge(interaction, PressAnswer(PRESS_NOT_TAKEN))
            return
        answer = getattr(decided, "answer", None)
        if not isinstance(answer, PressAnswer):
            answer = PressAnswer()
        await acknowledge(interaction, answer)
        if answer.chosen and interaction.message is not None:
            try:
                with refusals("edit"):
                    await interaction.message.edit(
                        view=chosen_view(answer.label, press.sender_name)
                    )
            except DiscordError as exc:
                log.warning("%s: showing the choice made failed: %s", self.name, exc)

    def _taking(self, message: discord.Message) -> tuple[InboundSink, discord.ClientUser] | None:
        """The sink and the bot's user, when ``message`` is one to hand on: not the bot's
        own, nor another bot's unless ``allow_bots``."""
        client, sink = self._client(), self.sink
        if client is None or client.user is None or sink is None:
            return None
        if message.author.id == client.user.id or (message.author.bot and not self._allow_bots):
            return None
        return sink, client.user

    async def on_message(self, message: discord.Message) -> None:
        # No await before the sink (but for a fetch of a replied-to message Discord did
        # not send along), so messages reach it in gateway order.
        taking = self._taking(message)
        if taking is None:
            return
        if message.is_system():
            # A notice Discord wrote (a pin, a member joining, a call): nobody's words.
            self._not_read.came(message.type.name)
            return
        sink, me = taking
        inbound = replace(
            self._inbound(message, me.id), bot_name=me.name, quoted=quote_of(message, me)
        )
        blank = not inbound.text and not inbound.attachments
        if inbound.mentions_bot and blank and message.guild is not None:
            self._warn_blank_content()
        reference = unresolved_reply(message)
        client = self._client()
        if reference is not None and client is not None and self._admitted(inbound):
            # Only for a message the policy takes: the others' quotes would not be shown.
            quoted = await fetch_quote(client, reference, me)
            inbound = replace(inbound, quoted=quoted)
        if self._auto_thread and self._starts_thread(message, inbound):
            # (An await before the sink: this message may reach it after a later one of
            # its channel, which is another conversation from now on.)
            inbound = await self._in_new_thread(message, inbound)
        await sink(inbound)

    async def on_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        """A message whose text its sender edited, handed on as an edit. Discord also sends
        an update when it adds a link preview: no ``edited_at``, or the text as it was."""
        message, before = payload.message, payload.cached_message
        edited_at = message.edited_at
        if edited_at is None or (before is not None and before.content == message.content):
            return
        taking = self._taking(message)
        if taking is None:
            return
        sink, me = taking
        key = f"{message.id}:edit:{edited_at.timestamp():.3f}"
        inbound = self._inbound(message, me.id)
        await sink(replace(inbound, bot_name=me.name, dedupe_keys=(key,), edited=True))

    def _starts_thread(self, message: discord.Message, inbound: InboundMessage) -> bool:
        """Whether ``message`` gets a thread of its own: a mention of the bot in a server's
        text or news channel (a thread is neither), from a sender the access policy lets in
        (asked before the thread exists: a stranger's mention must not leave an empty
        thread behind)."""
        channel_type = getattr(message.channel, "type", None)
        return (
            inbound.mentions_bot
            and message.guild is not None
            and channel_type in (discord.ChannelType.text, discord.ChannelType.news)
            and self._admitted(inbound)
        )

    def _admitted(self, message: InboundMessage) -> bool:
        """Whether the access policy lets ``message``'s sender address the bot there."""
        return self._admits is None or self._admits(message)

    async def _in_new_thread(
        self, message: discord.Message, inbound: InboundMessage
    ) -> InboundMessage:
        """``inbound`` moved into a new thread started on ``message``; where it was when
        Discord refuses one (a missing permission, say), with a log line in its words."""
        try:
            thread = await message.create_thread(
                name=_thread_name(inbound.text, inbound.sender_name), auto_archive_duration=1440
            )
        except discord.HTTPException as exc:
            log.warning(
                "%s: no thread started on message %s (%s %s); answering in the channel",
                self.name,
                message.id,
                exc.status,
                exc.text or exc,
            )
            return inbound
        where = conversation_of(self.name, thread, thread.id, dm_user_id=None)
        return replace(inbound, thread_id=where.thread_id, conversation_key=where.key)

    def _inbound(self, message: discord.Message, me_id: int) -> InboundMessage:
        channel = message.channel
        author = message.author
        reference = message.reference
        replied = reference.resolved if reference is not None else None
        mentions_bot = (
            any(u.id == me_id for u in message.mentions)
            or (isinstance(replied, discord.Message) and replied.author.id == me_id)
            # A thread the bot started (``auto_thread``) is a conversation with it.
            or (isinstance(channel, discord.Thread) and channel.owner_id == me_id)
        )
        where = conversation_of(
            self.name, channel, channel.id, dm_user_id=author.id if message.guild is None else None
        )
        # The bot's own mention is addressing, not content.
        text = without_mention(message.content, rf"<@!?{me_id}>")
        marker = marker_of(message.stickers, message.poll)
        text = " ".join(part for part in (text, marker) if part)
        files = discord_attachments(message.attachments)
        snapshot = forwarded_snapshot(message)
        if snapshot is not None and reference is not None:
            # A forward says nothing of its own: the snapshot is what it says.
            text = snapshot_text(self._client(), reference, snapshot)
            files += discord_attachments(snapshot.attachments)
        return InboundMessage(
            channel=self.name,
            chat_id=where.chat_id,
            sender_id=str(author.id),
            text=text,
            message_id=str(message.id),
            conversation_key=where.key,
            account_id=self.account_id,
            thread_id=where.thread_id,
            sender_name=author.display_name,
            is_direct=message.guild is None,
            mentions_bot=mentions_bot,
            dedupe_keys=(str(message.id),),
            in_history=True,
            reply_to_message_id=(
                str(reference.message_id)
                if reference is not None and reference.message_id is not None and snapshot is None
                else None
            ),
            attachments=files,
        )

    def check_content_intent(self, client: discord.Client) -> None:
        """Warn when a READY session's application may not read guild messages' text."""
        flags = client.application_flags
        if not (flags.gateway_message_content or flags.gateway_message_content_limited):
            log.warning(
                "Discord bot %s may not receive guild message text: %s",
                client.user,
                MESSAGE_CONTENT_INTENT_HELP,
            )
            self._warned_content = True

    def _warn_blank_content(self) -> None:
        if not self._warned_content:
            self._warned_content = True
            log.warning(
                "Discord delivered a message mentioning the bot with empty content: "
                + MESSAGE_CONTENT_INTENT_HELP
            )


def _thread_name(text: str, sender: str) -> str:
    """A thread's name from the message it starts on: its first line, at most 80 characters
    (Discord allows 100), cut at a word."""
    line = next((" ".join(part.split()) for part in text.splitlines() if part.strip()), "")
    if not line:
        return f"Question from {sender}"[:80] if sender else "A question"
    if len(line) <= 80:
        return line
    cut = line[:79].rsplit(" ", 1)[0] or line[:79]
    return cut + "…"
