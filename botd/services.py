"""What the App starts and stops: services, entered in one declared order.

A ``Service`` has a name, an async ``start`` and an async ``close``. ``enter_services``
starts each in order and pushes its close on the App's exit stack as soon as it started,
so the stack closes them in the reverse order by construction, also when a later one fails
to start (only what started is closed). A new server is one more entry in the App's list.

Where a part's close belongs at another place in the shutdown than its start in the
start-up, it is two entries, each named for what it does: the channels' adapters are
closed after the sessions flushed their deliveries (``channel outlets``, entered early, with
nothing to start) but stop taking input first (``channel input``, entered once everything
they hand messages to runs). ``Step`` makes such an entry from two callables.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Service", "Step", "enter_services"]

log = logging.getLogger(__name__)


class Service(Protocol):
    """Something the App runs from its start to its stop."""

    @property
    def name(self) -> str:
        """What it is, in the debug log of the start and the stop."""
        ...

    async def start(self) -> None:
        """Start it; an exception stops botd's start (what started before is closed)."""
        ...

    async def close(self) -> None:
        """Stop it and end every task it started (awaited)."""
        ...


async def _nothing() -> None:
    return None


@dataclass(frozen=True, eq=False)
class Step:
    """A service made of two callables, either of which may do nothing."""

    name: str
    on_start: Callable[[], Awaitable[None]] = _nothing
    on_close: Callable[[], Awaitable[None]] = _nothing

    async def start(self) -> None:
        await self.on_start()

    async def close(self) -> None:
        await self.on_close()


async def enter_services(stack: contextlib.AsyncExitStack, services: Sequence[Service]) -> None:
    """Start ``services`` in order, each one's close pushed on ``stack`` once it started."""
    for service in services:
        log.debug("starting %s", service.name)
        await service.start()
        stack.push_async_callback(_close, service)


async def _close(service: Service) -> None:
    log.debug("closing %s", service.name)
    await service.close()
