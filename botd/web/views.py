"""The JSON the page's API answers with, from the store's records (``botd.store``)."""

from __future__ import annotations

from typing import Any

from ..store import StoredApproval
from ..store.overview import ConversationSummary, LoggedPiece

__all__ = ["approval_view", "conversation_view", "piece_view"]


def conversation_view(summary: ConversationSummary) -> dict[str, Any]:
    """A conversation as the list shows it: its key, channel, chat, last activity and
    queue (``idle``, ``running``, ``waiting``: messages accepted and not taken yet)."""
    queue = "running" if summary.running else "waiting" if summary.waiting else "idle"
    return {
        "key": summary.key,
        "channel": summary.channel,
        "chat": _chat_of(summary.key, summary.channel),
        "last_activity": round(summary.last_activity, 3),
        "queue": queue,
        "waiting": summary.waiting,
        "running": summary.running,
    }


def _chat_of(key: str, channel: str) -> str:
    """The chat part of a conversation key (``telegram:42`` → ``42``)."""
    return key.removeprefix(f"{channel}:")


def piece_view(piece: LoggedPiece) -> dict[str, Any]:
    """A message or piece of a transcript: who, its text, when, the message it belongs to
    and its delivery state."""
    return {
        "by": piece.by,
        "sender": piece.sender,
        "text": piece.text,
        "at": round(piece.at, 3),
        "turn": piece.turn,
        "delivery": piece.delivery,
    }


def approval_view(approval: StoredApproval) -> dict[str, Any]:
    """A pending request: its token (what a decision names), the tool and the call, the
    conversation it waits in, when it was made and when it expires, and its choices."""
    conversation = approval.key.rsplit("/", 2)[0]
    verbs = ["approve", "always", "deny"] if approval.grant is not None else ["approve", "deny"]
    return {
        "token": approval.token,
        "tool": approval.tool_name,
        "summary": approval.summary,
        "conversation": conversation,
        "created_at": round(approval.created_at, 3),
        "deadline": round(approval.deadline, 3),
        "verbs": verbs,
    }
