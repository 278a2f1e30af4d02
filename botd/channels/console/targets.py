"""What the console's ids tell: its one chat is the operator's direct chat, one conversation."""

from __future__ import annotations

from ...chat import ChatKind

__all__ = ["chat_kind", "console_conversation_key"]


def chat_kind(chat_id: str) -> tuple[ChatKind, str | None]:
    """The console is its operator's direct chat."""
    return "direct", chat_id


def console_conversation_key(
    instance: str, chat_id: str, thread_id: str | None = None, *, dm_user: str | None = None
) -> str:
    """``<instance>:<chat>``: ``console:local``, the console's one conversation."""
    return f"{instance}:{chat_id}"
