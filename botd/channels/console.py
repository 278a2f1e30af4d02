"""A terminal chat: lines typed on stdin are messages, replies are printed on stdout.

Used by ``make run`` when no platform is configured and by end-to-end tests of the core.
Everything typed is one direct conversation (``console:local``). Replies are printed as the
agent wrote them (Markdown reads fine in a terminal).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TextIO

from ..chat import Capabilities, InboundMessage, MessageRef, Target
from .base import InboundSink

log = logging.getLogger(__name__)

CONVERSATION_KEY = "console:local"


class ConsoleAdapter:
    """See the module docstring. ``reader`` defaults to stdin, ``output`` to stdout."""

    name = "console"
    capabilities = Capabilities(text_limit=1_000_000, markdown="plain", can_edit=False)

    def __init__(
        self,
        reader: asyncio.StreamReader | None = None,
        output: TextIO | None = None,
        *,
        on_end_of_input: Callable[[], Awaitable[None]] | None = None,
        user: str = "you",
    ) -> None:
        self._reader = reader
        self._output = output or sys.stdout
        self._on_end = on_end_of_input
        self._user = user
        self._task: asyncio.Task[None] | None = None
        # Ids unique across restarts, so inbound dedupe never swallows a new line.
        self._ids = (f"{int(time.time() * 1000)}-{n}" for n in itertools.count(1))

    async def start(self, sink: InboundSink) -> None:
        reader = self._reader or await _stdin_reader()
        self._task = asyncio.create_task(self._read(reader, sink), name="console-input")

    async def _read(self, reader: asyncio.StreamReader, sink: InboundSink) -> None:
        while True:
            raw = await reader.readline()
            if not raw:
                break
            text = raw.decode("utf-8", errors="replace").strip()
            if not text:
                continue
            message = InboundMessage(
                channel="console",
                chat_id="local",
                sender_id=self._user,
                text=text,
                message_id=next(self._ids),
                conversation_key=CONVERSATION_KEY,
                is_direct=True,
                mentions_bot=True,
            )
            try:
                await sink(message)
            except Exception:
                # A line the core could not take (the store failing, say) was already
                # reported to the operator; input goes on with the next line.
                log.exception("console: a line could not be handled")
        if self._on_end is not None:
            await self._on_end()

    async def stop_inbound(self) -> None:
        await self.stop()  # stops reading; printing replies keeps working

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._task = None

    async def send(self, target: Target, markdown: str) -> list[MessageRef]:
        self._output.write(markdown.rstrip() + "\n")
        self._output.flush()
        return [MessageRef(target, next(self._ids))]

    async def edit(self, ref: MessageRef, markdown: str) -> list[MessageRef]:
        """A terminal cannot change a printed line: the new text is printed as a new reply."""
        return await self.send(ref.target, markdown)

    async def delete(self, ref: MessageRef) -> None:
        """A printed line stays printed: nothing to do."""
        return None

    async def react(self, ref: MessageRef, emoji: str) -> None:
        return None

    async def typing(self, target: Target) -> None:
        return None


async def _stdin_reader() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader
