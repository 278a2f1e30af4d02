"""What the web channel's ids are: conversation ids a client names (the page makes a random
one), each the operator's direct chat, keyed ``web:<id>``."""

from __future__ import annotations

import re

from ...chat import ChatKind

__all__ = ["CONVERSATION_ID", "chat_kind", "web_conversation_key"]

CONVERSATION_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")
"""What a conversation id a client names must match."""


def chat_kind(chat_id: str) -> tuple[ChatKind, str | None]:
    """Every web chat is the operator's direct chat."""
    return "direct", chat_id


def web_conversation_key(
    instance: str, chat_id: str, thread_id: str | None = None, *, dm_user: str | None = None
) -> str:
    """``<instance>:<conversation id>``: ``web:k3f…``, one conversation per browser's id."""
    return f"{instance}:{chat_id}"
