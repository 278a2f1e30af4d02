"""The run's scope as delivery reads it: the lease fence and the piece being sent.

Every call of the delivery made for a conversation is given its ``RunScope`` (the
conversation and its lease's fence, None when unfenced: a node alone, a reply of no
conversation). This module is the only one in ``botd.delivery`` that reads the fence out of
it or turns it into what an adapter call is given (``channels.base.SendScope``: the fence and
the key of the message being posted).

* The fence: ``check_fence`` before a reply is delivered, a preview shown or a stream no
  final took over stopped; ``tries`` checks it before each try of a retried adapter call
  (a backoff may outlast the lease) and hands it to the adapter, whose SDK checks it again
  as the request is written (a ``LeaseLost`` the SDK wrapped is raised as it is);
  ``send_scope`` for an adapter call tried once (a preview), ``status_scope`` for a status
  line's (paced after previews, silent); the calls
  ``tries`` makes are an answer's (``SendScope.final``: paced first); ``fence_of`` for
  the outbox, which gives the lease up when a piece cannot be written down.
* The piece: ``PieceMessages`` numbers the messages (and uploads) of the piece ``send_text``
  posts; ``tries`` gives each message its ``MessageKey``, the same in every try.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Protocol, TypeVar

from ..channels.base import SendScope
from ..channels.errors import ChannelError
from ..chat import MessageKey, PieceKey
from ..cluster.fencing import Fence, RunScope, lost_in

_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)


class ScopedCall(Protocol[_T_co]):
    """An adapter call, given its ``SendScope`` (``partial(adapter.send, target, text)``)."""

    def __call__(self, *, scope: SendScope | None = None) -> Awaitable[_T_co]: ...


def check_fence(scope: RunScope | None) -> None:
    """``LeaseLost`` when the lease of the conversation ``scope`` is of forbids a send now."""
    if scope is not None:
        scope.check_send()


def fence_of(scope: RunScope | None) -> Fence | None:
    """The fence of the conversation ``scope`` is of (None: it is not held by lease)."""
    return None if scope is None else scope.fence


def send_scope(scope: RunScope | None, *, silent: bool = False) -> SendScope:
    """What a single adapter call for ``scope``'s conversation is given (a preview: no
    piece's message); ``silent``: what it posts is not the answer, and notifies no one."""
    return SendScope(fence_of(scope), silent=silent)


def status_scope(scope: RunScope | None) -> SendScope:
    """What an adapter call that posts or edits ``scope``'s tool status line is given: paced
    after answers and previews (``SendScope.status_line``), and posted without a
    notification (``SendScope.silent``): a status line is not the answer."""
    return SendScope(fence_of(scope), status_line=True, silent=True)


def unkeyed(fence: Fence | None) -> SendScope:
    """What an adapter call made under ``fence`` is given when it posts no piece's message."""
    return SendScope(fence)


class PieceMessages:
    """Numbers the messages of one piece in the order they are posted (``MessageKey``)."""

    def __init__(self, piece: PieceKey) -> None:
        self.piece = piece
        self.count = 0

    def next(self) -> MessageKey:
        key = self.piece.message(self.count)
        self.count += 1
        return key


def tries(
    call: ScopedCall[_T], fence: Fence | None, messages: PieceMessages | None = None
) -> Callable[[], Awaitable[_T]]:
    """One try of ``call`` per await: each started only while ``fence`` has its margin left,
    handed the fence and, when it posts a message of a piece (``messages``), that message's
    key, numbered once so every retry carries the same key. A retry's key says the piece is
    unconfirmed (the try before may have landed), written when the first try began, so an
    adapter that looks before posting again does so. A ``LeaseLost`` the platform's SDK
    wrapped (its HTTP client checks the fence as each request is written) is raised as it is.
    """
    first = None if messages is None else messages.next()
    began: float | None = None

    async def attempt() -> _T:
        nonlocal began
        if fence is not None:
            fence.check_send(time.monotonic())
        key = first
        if first is not None:
            if began is None:
                began = time.time()
            elif not first.piece.unconfirmed:
                written = first.piece.written_at or began
                key = replace(first.piece, unconfirmed=True, written_at=written).message(
                    first.index
                )
        try:
            return await call(scope=SendScope(fence, key, final=True))
        except ChannelError as exc:
            lost = lost_in(exc)
            if lost is not None:
                raise lost from exc
            raise

    return attempt


def fenced_out(exc: BaseException) -> bool:
    """Whether ``exc`` is a send the conversation's lease forbade (a ``LeaseLost``, however
    an SDK wrapped it): an expected end, not a platform's refusal."""
    return lost_in(exc) is not None


__all__ = [
    "Fence",
    "PieceMessages",
    "RunScope",
    "ScopedCall",
    "SendScope",
    "check_fence",
    "fence_of",
    "fenced_out",
    "send_scope",
    "tries",
    "unkeyed",
]
