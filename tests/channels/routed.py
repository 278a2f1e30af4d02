"""The router in front of an adapter test's sink, as the daemon wires it.

The router is the one writer of the inbound ledger, so an adapter test that checks what a
retry, a twin or a restart delivers hands the adapter's messages to a real ``Router`` on a
real store, with policies that let everything else through, and collects what it accepts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from botd.channels.base import InboundSink
from botd.chat import InboundMessage, Target
from botd.inbound.access import AccessPolicy
from botd.inbound.router import Router
from botd.store import Store

Sink = Callable[[InboundMessage], Awaitable[None]]

OPEN = AccessPolicy(dm_policy="open", group_policy="open", require_mention=False)


async def _no_reply(target: Target, text: str) -> None:
    raise AssertionError(f"the router replied to {target}: {text}")


def through_router(store: Store, sink: Sink, channel: str) -> InboundSink:
    """A sink that passes each message (and its acknowledgement) through a router on
    ``store``; ``sink`` gets what it accepts."""
    return Router(store, sink, _no_reply, {channel: OPEN}).handle
