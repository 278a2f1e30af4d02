"""The run's scope as delivery reads it today: the lease fence and the piece being sent.

Both still travel in context variables: the fence of a conversation owned by lease in
``botd.cluster.fencing``, and the key of the message being posted in
``botd.channels.base.sending`` (which the adapters read to tag the message). This module is
the only one in ``botd.delivery`` that reads or sets them, so that passing them explicitly (a
``RunScope``) changes these functions and their callers, and nothing else.

* The fence: ``check_fence`` before a reply is delivered, a preview shown or a stream no
  final took over stopped, and ``fenced`` around every retried adapter call (checked before
  each try, since a backoff may outlast the lease; a ``LeaseLost`` the SDK wrapped is raised
  as it is); ``fence_now`` for the outbox, which gives the lease up when a piece cannot be
  written down.
* The piece: ``posting_piece`` marks the piece ``send_text`` posts; ``keyed`` numbers each
  message (or upload) of it and sets its ``MessageKey`` around every try of that message.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import TypeVar

from ..channels.base import sending
from ..channels.errors import ChannelError
from ..chat import MessageKey, MessageRef, PieceKey
from ..cluster import fencing
from ..cluster.fencing import Fence

_T = TypeVar("_T")


def check_fence() -> None:
    """``LeaseLost`` when the lease of the conversation being served forbids a send now."""
    fencing.check_send()


def fence_now() -> Fence | None:
    """The fence of the conversation being served (None: it is not held by lease)."""
    return fencing.current()


def fenced(attempt: Callable[[], Awaitable[_T]]) -> Callable[[], Awaitable[_T]]:
    """``attempt`` started only while the lease has its margin left, its ``LeaseLost``
    unwrapped from a platform error (the platform's HTTP client checks the fence too, as each
    request is written, and its SDK wraps what that raised)."""

    async def checked() -> _T:
        fencing.check_send()
        try:
            return await attempt()
        except ChannelError as exc:
            lost = fencing.lost_in(exc)
            if lost is not None:
                raise lost from exc
            raise

    return checked


class _PieceMessages:
    """Numbers the messages of one piece in the order they are posted (``MessageKey``)."""

    def __init__(self, piece: PieceKey) -> None:
        self.piece = piece
        self.count = 0

    def next(self) -> MessageKey:
        key = self.piece.message(self.count)
        self.count += 1
        return key


_piece: ContextVar[_PieceMessages | None] = ContextVar("_piece", default=None)
"""The piece ``send_text`` is posting, if it was given one: its messages get their keys."""


@contextmanager
def posting_piece(piece: PieceKey | None) -> Iterator[None]:
    """Within the block, the messages posted (through ``keyed``) are those of ``piece``
    (None: of no piece, even inside another's block)."""
    token = _piece.set(None if piece is None else _PieceMessages(piece))
    try:
        yield
    finally:
        _piece.reset(token)


def keyed(
    attempt: Callable[[], Awaitable[list[MessageRef]]],
) -> Callable[[], Awaitable[list[MessageRef]]]:
    """``attempt`` (one message of the piece being posted, if any) with that message's key set
    for the adapter around each try: numbered once, so every retry carries the same key. A
    retry's key says the piece is unconfirmed (the try before may have landed), written when
    the first try began, so an adapter that looks before posting again does so."""
    messages = _piece.get()
    if messages is None:
        return attempt
    first = messages.next()
    began: float | None = None

    async def keyed_attempt() -> list[MessageRef]:
        nonlocal began
        key = first
        if began is None:
            began = time.time()
        elif not first.piece.unconfirmed:
            written = first.piece.written_at or began
            key = replace(first.piece, unconfirmed=True, written_at=written).message(first.index)
        token = sending.set(key)
        try:
            return await attempt()
        finally:
            sending.reset(token)

    return keyed_attempt


__all__ = ["check_fence", "fence_now", "fenced", "keyed", "posting_piece"]
