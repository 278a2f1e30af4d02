"""What the web page reads of the store (``PageReads``): the conversations with their
last activity and queue, one conversation's messages and pieces with their delivery state,
and the approval requests still pending. Both backends run the same queries (``{p}`` is
their placeholder) and build the records here.

A piece's ``delivery`` is ``sent``, ``failed`` (the platform refused it), ``superseded`` (a
resumed run replaced it), ``pending`` (written, its run still going) or ``in doubt``:
written and never confirmed while its message's run is over (a crash between the send and
its record; the resume that finds it decides).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .rows import inbound_from_json

__all__ = [
    "CONVERSATIONS_QUERY",
    "PIECES_QUERY",
    "ConversationSummary",
    "Delivery",
    "LoggedPiece",
    "conversation_summaries",
    "logged_pieces",
]

Delivery = Literal["received", "sent", "pending", "in doubt", "failed", "superseded"]
"""A piece's delivery state; ``received`` for the user's own messages."""

_OPEN = ("accepted", "running")

CONVERSATIONS_QUERY = (
    "SELECT conversation_key, min(channel), max(updated_at), "
    "sum(CASE WHEN state = 'accepted' THEN 1 ELSE 0 END), "
    "sum(CASE WHEN state = 'running' THEN 1 ELSE 0 END) "
    "FROM inbox GROUP BY conversation_key ORDER BY 3 DESC LIMIT {p}"
)
"""Each conversation's channel, last change, messages waiting and running, latest first."""

PIECES_QUERY = (
    "SELECT 'user', message, accepted_at, id, state, 0 FROM inbox WHERE conversation_key = {p} "
    "UNION ALL "
    "SELECT 'bot', o.text, o.created_at, o.anchor, o.state, o.id FROM outbox o JOIN inbox i "
    "ON o.anchor = i.id WHERE i.conversation_key = {p} AND "
    "(o.state <> 'pending' OR i.state IN ('accepted', 'running')) "
    "UNION ALL "
    "SELECT 'doubt', o.text, o.created_at, o.anchor, o.state, o.id FROM outbox o JOIN inbox i "
    "ON o.anchor = i.id WHERE i.conversation_key = {p} AND o.state = 'pending' "
    "AND i.state NOT IN ('accepted', 'running')"
)
"""A conversation's messages (its inbox rows) and the pieces answering them, each piece
once: the last part are the pending pieces of a run that is over (in doubt)."""


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """One conversation as the page lists it."""

    key: str
    channel: str
    last_activity: float
    waiting: int
    """Messages accepted and not yet taken by a run."""
    running: int
    """Messages a run is answering now."""


@dataclass(frozen=True, slots=True)
class LoggedPiece:
    """A message the user sent (``by`` ``user``) or a piece botd wrote (``bot``), in the
    conversation's order, with its delivery state."""

    by: Literal["user", "bot"]
    text: str
    at: float
    turn: int
    """The inbox row: the message's own, or the one the piece answers."""
    delivery: Delivery
    sender: str = ""
    """Who wrote a user's message (their name, else their id)."""


def conversation_summaries(rows: Sequence[Sequence[Any]]) -> list[ConversationSummary]:
    """The records of ``CONVERSATIONS_QUERY``'s rows."""
    return [
        ConversationSummary(str(key), str(channel), float(at), int(waiting), int(running))
        for key, channel, at, waiting, running in rows
    ]


def logged_pieces(rows: Sequence[Sequence[Any]]) -> list[LoggedPiece]:
    """The records of ``PIECES_QUERY``'s rows, in order (a message before what answers it,
    pieces in the order written); the presses of buttons, which nobody typed, left out."""
    pieces: list[tuple[float, int, int, LoggedPiece]] = []
    for by, text, at, turn, state, piece_id in rows:
        if by == "user":
            message = inbound_from_json(str(text))
            if message.press is not None:
                continue
            sender = message.sender_name or message.sender_id
            piece = LoggedPiece("user", message.text, float(at), int(turn), "received", sender)
            pieces.append((float(at), 0, int(turn), piece))
            continue
        delivery: Delivery = "in doubt" if by == "doubt" else _delivery(str(state))
        piece = LoggedPiece("bot", str(text), float(at), int(turn), delivery)
        pieces.append((float(at), 1, int(piece_id), piece))
    pieces.sort(key=lambda item: item[:3])
    return [piece for *_, piece in pieces]


def _delivery(state: str) -> Delivery:
    if state in ("sent", "failed", "superseded", "pending"):
        return state  # type: ignore[return-value]
    return "pending"
