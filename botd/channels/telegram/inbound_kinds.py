"""What of a Telegram message botd reads besides its text and files.

A sticker, a location, a venue, a contact, a poll and a dice become their marker
(``botd.channels.inputs``): the message's text. A forward keeps where it came from
(``forward_origin``: a user, a user who hides their account, a group, a channel) and when it
was first sent; ``forwarded_text`` puts that label before its words. Any other message
(a game, an invoice, a story, a service message…) is not read: ``message_kind`` names its
kind for the log line that says so.
"""

from __future__ import annotations

from telegram import (
    Message,
    MessageOrigin,
    MessageOriginChannel,
    MessageOriginChat,
    MessageOriginHiddenUser,
    MessageOriginUser,
)
from telegram.ext import filters

from ...speakers import forwarded, hidden_speaker, speaker
from .. import inputs

__all__ = ["MARKED", "forwarded_text", "marker_of", "message_kind", "origin_speaker"]

MARKED = (
    filters.Sticker.ALL
    | filters.LOCATION
    | filters.VENUE
    | filters.CONTACT
    | filters.POLL
    | filters.Dice.ALL
)
"""The messages without text or files the adapter takes, as their marker."""


def marker_of(message: Message) -> str:
    """The marker of a sticker, location, venue, contact, poll or dice ("" for others)."""
    if (sticker := message.sticker) is not None:
        # An animated or video sticker too: its emoji says it, nothing is downloaded.
        return inputs.sticker(sticker.emoji or "")
    if (venue := message.venue) is not None:  # (a venue carries its location too)
        at = venue.location
        return inputs.venue(venue.title, venue.address, at.latitude, at.longitude)
    if (point := message.location) is not None:
        return inputs.location(point.latitude, point.longitude)
    if (card := message.contact) is not None:
        name = " ".join(part for part in (card.first_name, card.last_name) if part)
        return inputs.contact(name, card.phone_number)
    if (asked := message.poll) is not None:
        options = [option.text for option in asked.options]
        return inputs.poll(asked.question, options, quiz=asked.type == "quiz")
    if (thrown := message.dice) is not None:
        return inputs.dice(thrown.emoji, thrown.value)
    return ""


def origin_speaker(origin: MessageOrigin) -> str:
    """Who wrote a message that came from elsewhere (a forward, a reply to another chat's
    message), as botd names a speaker; a user who hides their account by the name they
    show, marked as hidden."""
    if isinstance(origin, MessageOriginUser):
        return speaker(origin.sender_user.full_name, str(origin.sender_user.id))
    if isinstance(origin, MessageOriginChat):
        chat = origin.sender_chat
        return speaker(chat.title or chat.username or "", str(chat.id))
    if isinstance(origin, MessageOriginChannel):
        return speaker(origin.chat.title or origin.chat.username or "", str(origin.chat.id))
    if isinstance(origin, MessageOriginHiddenUser):
        return hidden_speaker(origin.sender_user_name)
    return "someone"


def forwarded_text(message: Message, words: str, marker: str) -> str:
    """``words`` (the text or caption) or ``marker`` of ``message`` as it is read: after the
    label of where it was forwarded from, when it is a forward."""
    origin = message.forward_origin
    if origin is None:
        return words or marker
    return forwarded(
        origin_speaker(origin), f"{origin.date:%Y-%m-%d}", words, marker="" if words else marker
    )


_NOT_KINDS = frozenset(
    {
        "message_id",
        "message_thread_id",
        "direct_messages_topic",
        "from",
        "sender_chat",
        "sender_boost_count",
        "sender_business_bot",
        "date",
        "business_connection_id",
        "chat",
        "forward_origin",
        "is_topic_message",
        "is_automatic_forward",
        "reply_to_message",
        "external_reply",
        "quote",
        "reply_to_story",
        "reply_to_checklist_task_id",
        "via_bot",
        "edit_date",
        "has_protected_content",
        "is_from_offline",
        "is_paid_post",
        "media_group_id",
        "author_signature",
        "paid_star_count",
        "text",
        "entities",
        "link_preview_options",
        "suggested_post_info",
        "effect_id",
        "caption",
        "caption_entities",
        "show_caption_above_media",
        "has_media_spoiler",
        "reply_markup",
    }
)
"""Fields any message may carry: none of them says what kind of message it is."""


def message_kind(message: Message) -> str:
    """What ``message`` is, by the first field that says so (``game``, ``invoice``,
    ``new_chat_members``…; a field this SDK does not know yet counts as well)."""
    for field, value in message.to_dict().items():
        if field not in _NOT_KINDS and value not in (None, False, "", [], {}):
            return field
    return "unknown"
