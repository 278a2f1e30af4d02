"""What Slack's ids tell: a chat's kind, and one spelling of a messaging-tool target."""

from __future__ import annotations

from ...chat import ChatKind, TargetForm
from ..targets import kind_target, send_message

__all__ = ["TARGET_FORM", "chat_kind"]


def chat_kind(chat_id: str) -> tuple[ChatKind, str | None]:
    """A user id (``U…``, ``W…``) opens a DM with that user; ``D…`` is a DM whose user the id
    does not tell; the rest are channels."""
    if chat_id[:1] in ("U", "W"):
        return "direct", chat_id
    return ("direct", None) if chat_id.startswith("D") else ("group", None)


TARGET_FORM = TargetForm(kind_target, tool_send=send_message)
"""``channel:<id>`` or ``user:<id>``; a thread is ``<target>:thread:<ts>``."""
