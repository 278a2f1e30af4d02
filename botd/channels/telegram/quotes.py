"""The message a Telegram message replies to, as the quote the model is shown.

A reply carries the message it answers (``reply_to_message``): its text, or for a file its
caption and the file named (``[sent the image]``), or for a sticker, a location, a poll… its
marker (``inbound_kinds``). Where the user selected a part of it to quote (``quote``), that
part is the quote. A reply to a message of another chat carries no message, only where it came
from (``external_reply``) and the selected part, if any: that part is quoted, by whom Telegram
says wrote it. A reply to the bot's own message is quoted as the bot's (``from_bot``), under
the bot's username.
"""

from __future__ import annotations

from telegram import Message

from ...chat import Quote
from ...speakers import speaker
from .inbound_kinds import marker_of, origin_speaker
from .inbound_media import telegram_attachments

__all__ = ["quote_of"]


def quote_of(message: Message, reply: Message | None, bot_id: int, bot_name: str) -> Quote | None:
    """What ``message`` quotes: ``reply`` (the message it answers, None when it answers
    none in its chat) or the selected part of a message elsewhere; None when nothing.
    ``bot_id`` and ``bot_name``: the bot's user id and username."""
    selected = message.quote.text if message.quote is not None else ""
    if reply is None:
        external = message.external_reply
        if external is None or not selected:
            return None
        return Quote.of(origin_speaker(external.origin), selected)
    author = reply.from_user
    if author is not None and author.id == bot_id:
        return Quote.of(bot_name, selected or _said(reply), from_bot=True)
    files = () if selected else telegram_attachments(reply)
    return Quote.of(_author(reply), selected or _said(reply), files)


def _said(message: Message) -> str:
    # A sticker, a location, a poll… is quoted as the model read it: its marker.
    return message.text or message.caption or marker_of(message)


def _author(message: Message) -> str:
    """Who wrote ``message`` as botd labels a speaker: a channel or an anonymous group
    admin as its chat, else its sender."""
    chat = message.sender_chat
    if chat is not None:
        return speaker(chat.title or chat.username or "", str(chat.id))
    user = message.from_user
    return speaker(user.full_name, str(user.id)) if user is not None else "someone"
