"""What the ACP channel's ids tell: each ACP session is one direct conversation of its own."""

from __future__ import annotations

from ...chat import ChatKind

__all__ = ["acp_conversation_key", "chat_kind"]


def chat_kind(chat_id: str) -> tuple[ChatKind, str | None]:
    """An ACP session is its editor user's direct chat."""
    return "direct", None


def acp_conversation_key(
    instance: str, chat_id: str, thread_id: str | None = None, *, dm_user: str | None = None
) -> str:
    """``<instance>:<session id>``: one conversation per ACP session."""
    return f"{instance}:{chat_id}"
