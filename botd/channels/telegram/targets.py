"""What Telegram's ids tell: a chat's kind, the conversation a chat (or forum topic) is, and
one spelling of a messaging-tool target."""

from __future__ import annotations

import re

from ...chat import ChatKind, TargetForm
from ..targets import send_message

__all__ = [
    "GENERAL_TOPIC",
    "TARGET_FORM",
    "chat_kind",
    "normalize_target",
    "telegram_conversation_key",
]

GENERAL_TOPIC = "1"
"""A forum's General topic: its messages carry no thread id and sends must omit it."""

_PREFIX = re.compile(r"^(?:telegram|tg):", re.IGNORECASE)
_LINK = re.compile(r"^(?:https?://)?t\.me/([A-Za-z0-9_]+)/?$", re.IGNORECASE)


def chat_kind(chat_id: str) -> tuple[ChatKind, str | None]:
    """A private chat has the user's (positive) id; a group a negative one or an ``@name``."""
    direct = chat_id.isascii() and chat_id.isdigit() and int(chat_id) > 0
    return ("direct", chat_id) if direct else ("group", None)


def telegram_conversation_key(
    instance: str, chat_id: str, thread_id: str | None = None, *, dm_user: str | None = None
) -> str:
    """``<instance>:<chat>``, and ``<instance>:<chat>:topic:<topic>`` for a forum's topic
    (one conversation each). A private chat's id is its user's, so ``dm_user`` adds
    nothing."""
    return f"{instance}:{chat_id}" + (f":topic:{thread_id}" if thread_id else "")


def normalize_target(base: str) -> str:
    """``telegram:<chat>`` lowercased: a ``telegram:`` or ``tg:`` prefix is accepted, a
    ``t.me/<name>`` link becomes ``@<name>``, usernames keep their ``@``."""
    chat = _PREFIX.sub("", base, count=1).strip()
    link = _LINK.match(chat)
    if link:
        chat = "@" + link.group(1)
    return f"telegram:{chat.lower()}" if chat else ""


TARGET_FORM = TargetForm(normalize_target, tool_send=send_message)
