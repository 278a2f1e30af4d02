"""What Slack's ids tell: a chat's kind, the conversation a channel (or thread) is, and one
spelling of a messaging-tool target."""

from __future__ import annotations

from ...chat import ChatKind, TargetForm
from ..targets import kind_target, send_message

__all__ = ["TARGET_FORM", "chat_kind", "slack_conversation_key"]


def chat_kind(chat_id: str) -> tuple[ChatKind, str | None]:
    """A user id (``U…``, ``W…``) opens a DM with that user; ``D…`` is a DM whose user the id
    does not tell; the rest are channels."""
    if chat_id[:1] in ("U", "W"):
        return "direct", chat_id
    return ("direct", None) if chat_id.startswith("D") else ("group", None)


def slack_conversation_key(
    instance: str, chat_id: str, thread_id: str | None = None, *, dm_user: str | None = None
) -> str:
    """``<instance>:<channel>``, and ``<instance>:<channel>:thread:<ts>`` for a thread (one
    conversation each). A DM is a channel (``D…``) of its own, so ``dm_user`` adds nothing."""
    key = f"{instance}:{chat_id}"
    return key if thread_id is None else f"{key}:thread:{thread_id}"


TARGET_FORM = TargetForm(kind_target, tool_send=send_message)
"""``channel:<id>`` or ``user:<id>``; a thread is ``<target>:thread:<ts>``."""
