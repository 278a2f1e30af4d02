"""What a Telegram bot takes in: ``TelegramInbound``, PTB's handlers that turn updates into
``InboundMessage``s and hand them to the sink.

Text messages, commands included, files with their caption, and stickers, locations, venues,
contacts, polls and dice as their one-line marker (a forward labelled with where it came from:
``inbound_kinds``) become messages of the channel keyed ``<channel>:<chat>``, or
``<channel>:<chat>:topic:<thread>`` in forum supergroups (``telegram_conversation_key``;
messages of the General topic carry no thread id and map to topic 1). Each carries
``chat:message_id`` as its dedupe key (an edit its own), so the router drops a message
delivered twice. The parts of an album, and of a long text the app split (``pastes``), share an
album id: the sessions answer them as one. A press of one of the bot's buttons is handed on as
a message from the presser, then answered (``answerCallbackQuery``) as the router decided. A
message of any other kind (a game, a story, a service message) is not read, and logged once per
kind (``inputs.NotRead``).

Each update handled is reported to the ``PollingBot`` (accepted, refused, or nothing for the
sink), which confirms to Telegram only what was accepted; while polling, the confirmed offset
is saved (``offsets``), and only while this node holds the poller's lease. An update that
comes after a refused one is held back, not handed to the sink (Telegram delivers both again,
in order), and its message goes to ``held_back`` instead, so its sender is told as the first
one's was (the router's ``held_back``). In webhook mode an update whose message the sink
refused is answered 503 (``process_posted``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Literal, TypeAlias

from telegram import CallbackQuery, Message, MessageEntity, Update
from telegram.constants import ChatType
from telegram.error import TelegramError
from telegram.ext import (
    Application,
    CallbackQueryHandler,
    ContextTypes,
    MessageHandler,
    TypeHandler,
    filters,
)

from ...chat import InboundMessage, Press, PressAnswer
from ...store.errors import StoreError
from ...store.protocols import Offsets
from ..base import InboundSink, without_mention
from ..inputs import NotRead
from .inbound_kinds import MARKED, forwarded_text, marker_of, message_kind
from .inbound_media import MEDIA, telegram_attachments
from .outbound import TelegramOutbound
from .pastes import SplitPastes
from .polling import PollingBot
from .quotes import quote_of
from .targets import GENERAL_TOPIC, telegram_conversation_key

__all__ = ["TelegramInbound"]

log = logging.getLogger(__name__)

_App: TypeAlias = Application[Any, Any, Any, Any, Any, Any]


class TelegramInbound:
    """The handlers one bot's updates go through (module docstring).

    ``bot`` gives the connected bot; ``outbound`` shows the choice a press made;
    ``channel``, ``account_id``: the channel instance and account the messages are of;
    ``label`` starts the log lines; ``offsets``: where the confirmed offset is saved
    while polling (None: nowhere); ``held_back``: told of each message held back behind a
    refused one (``ChannelContext.held_back``; None: nobody).
    """

    def __init__(
        self,
        bot: Callable[[], PollingBot],
        outbound: TelegramOutbound,
        *,
        channel: str,
        account_id: str,
        label: str,
        mode: Literal["polling", "webhook"],
        offsets: Offsets | None,
        held_back: Callable[[InboundMessage], Awaitable[object]] | None = None,
    ) -> None:
        self._bot = bot
        self._held_back = held_back
        self._outbound = outbound
        self.name = channel
        self.account_id = account_id
        self._label = label
        self._mode = mode
        self._offsets = offsets
        self._pastes = SplitPastes()
        self._not_read = NotRead(label)
        self._sink: InboundSink | None = None
        self._refused: set[int] = set()
        """Updates whose message the sink did not take (webhook mode answers them 503)."""

    def install(self, app: _App, sink: InboundSink) -> None:
        """Have ``app`` hand its updates to these handlers, and their messages to ``sink``."""
        # Files come with their caption as the text; stickers, locations, polls… as their
        # marker (``inbound_kinds``).
        taken = filters.TEXT | MEDIA | MARKED
        new, edited = filters.UpdateType.MESSAGE, filters.UpdateType.EDITED_MESSAGE
        app.add_handler(
            MessageHandler((new & taken) | (edited & (filters.TEXT | MEDIA)), self._on_text)
        )
        # (A live location comes again as an edit each time it moves: it was read when it
        # came, and its moves are no edit of anything said.)
        app.add_handler(MessageHandler((new | edited) & ~taken, self._on_not_read))
        app.add_handler(CallbackQueryHandler(self._on_press))
        # A later group sees every update once the handlers above are done with it.
        app.add_handler(TypeHandler(Update, self._on_processed), group=1)
        app.add_error_handler(self._on_error)
        self._sink = sink

    async def process_posted(self, app: _App, bot: PollingBot, data: dict[str, Any]) -> bool:
        """One update Telegram POSTed: through ``app``'s handlers; True when nothing of it
        was refused (accepted, or not a message botd takes)."""
        if self._sink is None:
            return False  # not started: Telegram sends it again
        update = Update.de_json(data, bot)
        self._refused.discard(update.update_id)
        await app.process_update(update)
        if update.update_id in self._refused:
            self._refused.discard(update.update_id)
            return False
        return True

    async def _on_text(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message or update.edited_message
        if message is None or self._sink is None:
            return
        bot = self._bot()
        sender = message.from_user
        if sender is not None and sender.id == bot.id:
            return
        chat_id = str(message.chat.id)
        thread_id: str | None = None
        if message.chat.is_forum:
            topic = message.message_thread_id if message.is_topic_message else None
            thread_id = str(topic) if topic else GENERAL_TOPIC
        key = telegram_conversation_key(self.name, chat_id, thread_id)
        reply = _replied_to(message)
        if self._mode != "webhook" and bot.held_back(update.update_id):
            # An earlier update of this batch was refused (the store is away): Telegram
            # delivers this one again after it, in order; taking it now would answer it first.
            bot.handled(update.update_id, ok=False)
            await self._tell_held_back(self._message(message, chat_id, thread_id, key, reply))
            return
        try:
            await self._deliver(message, chat_id, thread_id, key, reply)
        except Exception:
            bot.handled(update.update_id, ok=False)  # not accepted: ask for it again
            if self._mode == "webhook":
                self._refused.add(update.update_id)
            raise
        bot.handled(update.update_id, ok=True)

    async def _on_not_read(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A message of a kind botd does not read (a game, a story, a service message):
        said once per kind in the log, never in silence."""
        message = update.message or update.edited_message
        if message is not None:
            self._not_read.came(message_kind(message))

    async def _on_press(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A button under one of the bot's messages pressed: handed to the sink like a
        message from the presser, then answered (``answerCallbackQuery``) as decided."""
        query = update.callback_query
        if query is None or self._sink is None:
            return
        bot = self._bot()
        press = self._press_message(query)
        if self._mode != "webhook" and bot.held_back(update.update_id):
            bot.handled(update.update_id, ok=False)
            if press is not None:
                await self._tell_held_back(press)
            return
        try:
            decided = None if press is None else await self._sink(press)
        except Exception:
            bot.handled(update.update_id, ok=False)
            if self._mode == "webhook":
                self._refused.add(update.update_id)
            raise
        bot.handled(update.update_id, ok=True)
        answer = getattr(decided, "answer", None)
        if not isinstance(answer, PressAnswer):
            answer = PressAnswer()
        try:
            await query.answer(text=answer.text)
        except TelegramError as exc:
            log.warning("%s: answering a button press failed: %s", self.name, exc.message)
        if answer.chosen and press is not None and isinstance(query.message, Message):
            await self._outbound.show_choice(
                query.message.chat.id, query.message.message_id, answer.label, press.sender_name
            )

    def _press_message(self, query: CallbackQuery) -> InboundMessage | None:
        """The press as the presser's message (None: not of a message of the bot's chats)."""
        message = query.message
        if message is None or query.data is None:
            return None
        chat_id = str(message.chat.id)
        thread_id: str | None = None
        if message.chat.is_forum:
            topic = message.message_thread_id if isinstance(message, Message) else None
            thread_id = str(topic) if topic else GENERAL_TOPIC
        key = telegram_conversation_key(self.name, chat_id, thread_id)
        sender = query.from_user
        return InboundMessage(
            channel=self.name,
            chat_id=chat_id,
            sender_id=str(sender.id),
            text="",  # the router names the button, as botd recorded it
            message_id=f"press:{query.id}",
            conversation_key=key,
            account_id=self.account_id,
            thread_id=thread_id,
            sender_name=sender.full_name,
            is_direct=message.chat.type == ChatType.PRIVATE,
            mentions_bot=True,
            dedupe_keys=(f"press:{query.id}",),
            bot_name=self._bot().username or "",
            press=Press(query.id, query.data, str(message.message_id)),
        )

    async def _deliver(
        self,
        message: Message,
        chat_id: str,
        thread_id: str | None,
        key: str,
        reply: Message | None,
    ) -> None:
        assert self._sink is not None
        inbound = self._message(message, chat_id, thread_id, key, reply)
        if not inbound.edited and not message.media_group_id:
            # Each edit is its own, never part of an album or a paste.
            paste = self._pastes.paste_of(
                chat_id,
                inbound.sender_id,
                inbound.message_id,
                inbound.text,
                message.date.timestamp(),
            )
            inbound = replace(inbound, album=paste)
        await self._sink(inbound)

    def _message(
        self,
        message: Message,
        chat_id: str,
        thread_id: str | None,
        key: str,
        reply: Message | None,
    ) -> InboundMessage:
        """``message`` as botd takes it (an album's part with its album; a paste's part is
        marked by ``_deliver``, which takes it)."""
        sender, bot = message.from_user, self._bot()
        words = self._without_own_mention(message.text or message.caption or "")
        text = forwarded_text(message, words, marker_of(message))
        mid = str(message.message_id)
        key_of, edit = f"{chat_id}:{mid}", message.edit_date
        if edit is not None:
            key_of += f":edit:{int(edit.timestamp())}"
        return InboundMessage(
            channel=self.name,
            chat_id=chat_id,
            sender_id=str(sender.id) if sender else "",
            text=text,
            message_id=mid,
            conversation_key=key,
            account_id=self.account_id,
            thread_id=thread_id,
            sender_name=sender.full_name if sender else "",
            is_direct=message.chat.type == ChatType.PRIVATE,
            mentions_bot=self._mentions_bot(message, reply),
            reply_to_message_id=str(reply.message_id) if reply else None,
            quoted=quote_of(message, reply, bot.id, bot.username or bot.first_name),
            dedupe_keys=(key_of,),
            bot_name=bot.username or "",
            attachments=telegram_attachments(message),
            album=(message.media_group_id or None) if edit is None else None,
            edited=edit is not None,
        )

    async def _tell_held_back(self, message: InboundMessage) -> None:
        """Have the sender of an update held back behind a refused one told that it could
        not be taken now (``held_back``: the router's, which tells each sender once)."""
        if self._held_back is None:
            return
        try:
            await self._held_back(message)
        except Exception as exc:  # a notice: never in the way of the updates
            log.warning(
                "%s: telling the sender of held-back message %s failed: %s",
                self._label,
                message.message_id,
                exc,
            )

    def _without_own_mention(self, text: str) -> str:
        """``text`` without ``@botname`` (kept in ``/cmd@botname``, which commands parse)."""
        name = self._bot().username
        if not name:
            return text
        return without_mention(text, rf"(?<![\w/])@{re.escape(name)}\b", re.IGNORECASE)

    def _mentions_bot(self, message: Message, reply: Message | None) -> bool:
        bot = self._bot()
        handle = f"@{bot.username}".lower()
        for entity, text in _entities(message):
            if entity.type == MessageEntity.MENTION and text.lower() == handle:
                return True
            if entity.type == MessageEntity.BOT_COMMAND and text.lower().endswith(handle):
                return True
            if (
                entity.type == MessageEntity.TEXT_MENTION
                and entity.user
                and entity.user.id == bot.id
            ):
                return True
        return bool(reply and reply.from_user and reply.from_user.id == bot.id)

    async def _on_processed(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        # The bot is there from before the app starts until after it shut down.
        bot = self._bot()
        bot.handled(update.update_id)
        if self._offsets is not None and self._mode == "polling" and bot.holding:
            self._offsets.set_offset_soon(self.name, self.account_id, str(bot.confirmed))

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        if isinstance(context.error, StoreError):
            # Already told in one line by the router (and the update is asked for again):
            # an expected fault, not a bug to trace.
            log.debug("%s: an update not taken: %s", self._label, context.error)
            return
        log.error("%s: handling an update failed", self._label, exc_info=context.error)


def _replied_to(message: Message) -> Message | None:
    """The message this one answers; a topic's creation message does not count."""
    reply = message.reply_to_message
    if reply is None or reply.forum_topic_created is not None:
        return None
    return reply


def _entities(message: Message) -> list[tuple[MessageEntity, str]]:
    """Each entity of ``message`` with its text, as ``Message.parse_entities`` gives them.

    Offsets count UTF-16 code units; a lone surrogate in the text (which that method cannot
    encode) keeps its unit here, so the entities after it still land on their text.
    """
    caption = message.text is None  # a file's caption has its own entities
    raw = ((message.caption if caption else message.text) or "").encode(
        "utf-16-le", "surrogatepass"
    )
    return [
        (
            entity,
            raw[entity.offset * 2 : (entity.offset + entity.length) * 2].decode(
                "utf-16-le", "surrogatepass"
            ),
        )
        for entity in (message.caption_entities if caption else message.entities)
    ]
