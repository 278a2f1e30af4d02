"""``PairingWelcomes``: a sender approved by pairing is told they can talk now, and what
they wrote while they waited is answered.

An approval is made by an owner's ``/pair`` in a chat (this process) or by ``botd pairing
approve`` (another process, maybe while the daemon is down). Either way the pairing store
keeps a welcome for the sender with the messages held with their code (``Pairing.hold``: the
first ``HELD_AT_MOST``, for as long as the code is valid, an hour), durable until this
service took it: the welcome line is sent to the chat of the first held message, then each
held message is handed to the router as if it came now (``release``: accepted into the
inbox once, under keys of its own), then the welcome is forgotten (``welcomed``). A crash
before that sends the line again at the next start; the messages are not taken twice.

The store is looked at every ``interval`` seconds (a file's timestamp for ``pairing.json``,
one query on PostgreSQL) and at once when ``wake`` is called (``/pair`` here). A welcome
whose line cannot be sent now (the platform down) stays for the next look. A welcome without
held messages (a code issued before botd kept them) has no chat to go to: it is forgotten.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from ..chat import InboundMessage, Target
from ..store import Pairing, Welcome
from ..store.rows import inbound_from_json

log = logging.getLogger(__name__)

YOU_CAN_TALK = "You're approved: you can talk to me now."
"""The line an approved sender gets."""
ANSWERING = " I'll answer what you wrote meanwhile."
"""Added to it: what they wrote while they waited is answered next."""
WELCOME_INTERVAL = 2.0
"""Seconds between looks at the pairing store for approvals made elsewhere."""

Tell = Callable[[Target, str], Awaitable[None]]
Release = Callable[[InboundMessage], Awaitable[bool]]


class PairingWelcomes:
    """See the module docstring. ``tell`` sends a line (raises when it could not be sent);
    ``release`` hands a held message to the router."""

    def __init__(
        self,
        pairing: Pairing,
        tell: Tell,
        release: Release,
        *,
        interval: float = WELCOME_INTERVAL,
    ) -> None:
        self._pairing = pairing
        self._tell = tell
        self._release = release
        self._interval = interval
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """Look at the store now (an approval was just made here)."""
        self._wake.set()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="pairing-welcomes")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.deliver()
            except Exception as exc:  # the store unreadable now: looked at again later
                log.warning("pairing welcomes could not be read: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval)

    async def deliver(self) -> None:
        """Welcome every approved sender not told yet (see the module docstring)."""
        for welcome in await self._pairing.welcomes():
            await self._welcome(welcome)

    async def _welcome(self, welcome: Welcome) -> None:
        held = [inbound_from_json(text) for text in welcome.held]
        if not held:
            log.info(
                "pairing: %s on %s approved; no chat known to tell them",
                welcome.sender,
                welcome.channel,
            )
            await self._pairing.welcomed(welcome.channel, welcome.sender)
            return
        line = YOU_CAN_TALK + ANSWERING
        try:
            await self._tell(held[0].reply_target(), line)
        except Exception as exc:
            log.warning(
                "pairing: telling %s on %s they are approved failed (%s); tried again later",
                welcome.sender,
                welcome.channel,
                exc,
            )
            return
        for message in held:
            await self._release(message)
        await self._pairing.welcomed(welcome.channel, welcome.sender)
        log.info(
            "pairing: %s on %s told they can talk; %d waiting message(s) handed on",
            welcome.sender,
            welcome.channel,
            len(held),
        )


__all__ = ["ANSWERING", "WELCOME_INTERVAL", "YOU_CAN_TALK", "PairingWelcomes"]
