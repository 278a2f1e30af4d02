"""A terminal chat: lines typed on stdin are messages, replies are printed on stdout.

Used by ``make run`` when no platform is configured and by end-to-end tests of the core.
Everything typed is one direct conversation (``console:local``: the channel instance's name
and the one chat, ``local``). Replies are printed as the
agent wrote them (Markdown reads fine in a terminal); nothing else goes to stdout, so
``botd run < questions.txt > answers.txt`` keeps the answers clean.

Input is any stdin: a terminal, a pipe, a regular file, ``/dev/null`` or a closed stdin (no
input at all). A thread reads it (the event loop's pipe transport takes neither regular files
nor every terminal), and the end of input, however it comes, calls ``on_end_of_input`` once
every line read was handed on. Each line is one message; a line holding only ``\"\"\"`` opens a
block that runs to the next such line, and the lines between are sent as one message (a paste,
say). A line, or a block, over ``MAX_MESSAGE_BYTES`` is refused with one warning naming its
line and size; reading goes on with the next line. On a terminal a banner on stderr names the
provider and model that answer and how to quit.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import select
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TextIO

from ...chat import Capabilities, InboundMessage, MessageRef, Target
from ...text.markup import PLAIN
from ..base import ChannelAdapter, InboundSink, OutboundFile, SendScope
from ..errors import ChannelError
from .targets import console_conversation_key

log = logging.getLogger(__name__)

PLATFORM = "console"
"""The platform's name: the console's channel name unless the wiring gives it another."""
CHAT_ID = "local"
"""The console's one chat."""
CONVERSATION_KEY = console_conversation_key(PLATFORM, CHAT_ID)
"""The console's one conversation, ``console:local`` (another instance name spells another)."""
MAX_MESSAGE_BYTES = 1024 * 1024
"""The longest line or ``\"\"\"`` block sent as a message (1 MiB of UTF-8)."""
BLOCK_FENCE = '"""'
"""A line holding only this opens or closes a multi-line message."""
_CHUNK = 64 * 1024

ChunkSource = Callable[[], Awaitable[bytes]]
"""The next bytes of input; ``b""`` at its end."""


@dataclass(frozen=True)
class TooLong:
    """Input refused for its size: lines ``first`` to ``last`` (1-based), ``size`` bytes."""

    first: int
    last: int
    size: int

    def describe(self) -> str:
        where = f"line {self.first}"
        if self.first != self.last:
            where = f"the block of lines {self.first}-{self.last}"
        return (
            f"console: {where} is {self.size} bytes, over the {MAX_MESSAGE_BYTES}-byte "
            "(1 MiB) limit: not sent"
        )


class LineSplitter:
    """Cuts bytes into lines (without their ``\\n``) holding at most ``limit`` bytes each.

    A longer line is not kept in memory: its bytes are counted and dropped, and it comes out
    as a ``TooLong``. The last line of the input needs no ``\\n`` (see ``end``).
    """

    def __init__(self, limit: int = MAX_MESSAGE_BYTES) -> None:
        self._limit = limit
        self._buffer = bytearray()
        self._dropped: int | None = None  # bytes of an over-long line so far
        self.number = 0
        """Lines cut so far."""

    def feed(self, data: bytes) -> list[bytes | TooLong]:
        lines: list[bytes | TooLong] = []
        start = 0
        while True:
            newline = data.find(b"\n", start)
            piece = data[start:] if newline < 0 else data[start:newline]
            if self._dropped is not None:
                self._dropped += len(piece)
            else:
                self._buffer += piece
                if len(self._buffer) > self._limit:
                    self._dropped = len(self._buffer)
                    self._buffer.clear()
            if newline < 0:
                return lines
            lines.append(self._cut())
            start = newline + 1

    def end(self) -> list[bytes | TooLong]:
        """The unfinished last line, if the input ended without a ``\\n``."""
        return [self._cut()] if self._buffer or self._dropped is not None else []

    def _cut(self) -> bytes | TooLong:
        self.number += 1
        if self._dropped is not None:
            line: bytes | TooLong = TooLong(self.number, self.number, self._dropped)
        else:
            line = bytes(self._buffer)
        self._buffer.clear()
        self._dropped = None
        return line


class MessageAssembler:
    """Lines in, messages out: one per non-blank line, or one per ``\"\"\"`` block."""

    def __init__(self, limit: int = MAX_MESSAGE_BYTES) -> None:
        self._limit = limit
        self._block: list[str] | None = None
        self._first = 0  # the block's opening line
        self._size = 0
        self._refused = False
        self._number = 0

    def line(self, line: bytes | TooLong) -> list[str | TooLong]:
        self._number += 1
        if isinstance(line, TooLong):
            if self._block is None:
                return [line]
            self._refused = True
            self._size += line.size + 1
            return []
        text = line.decode("utf-8", errors="replace").removesuffix("\r")
        if text.strip() == BLOCK_FENCE:
            if self._block is None:
                self._block, self._first, self._size, self._refused = [], self._number, 0, False
                return []
            return self._close()
        if self._block is not None:
            self._size += len(line) + 1
            if self._size > self._limit:
                self._refused = True
                self._block.clear()  # not kept: it will not be sent
            if not self._refused:
                self._block.append(text)
            return []
        text = text.strip()
        return [text] if text else []

    def end(self) -> list[str | TooLong]:
        """At the end of input: a block left open is sent as it is."""
        return self._close() if self._block is not None else []

    def _close(self) -> list[str | TooLong]:
        lines, self._block = self._block or [], None
        if self._refused:
            return [TooLong(self._first, self._number, self._size)]
        # Blank lines around the block go; indentation and the lines inside stay.
        while lines and not lines[0].strip():
            lines.pop(0)
        while lines and not lines[-1].strip():
            lines.pop()
        text = "\n".join(line.rstrip() for line in lines)
        return [text] if text else []


class ConsoleAdapter(ChannelAdapter):
    """See the module docstring. ``reader`` defaults to stdin, ``output`` to stdout, ``notices``
    (the banner) to stderr. The banner is printed when stdin is a terminal, or when
    ``banner=True``; ``model`` is what it says answers, e.g. ``scripted provider (model x)``."""

    capabilities = Capabilities(text_limit=1_000_000, markup=PLAIN, can_edit=False)

    def __init__(
        self,
        reader: asyncio.StreamReader | None = None,
        output: TextIO | None = None,
        *,
        channel: str = PLATFORM,
        on_end_of_input: Callable[[], Awaitable[None]] | None = None,
        user: str = "you",
        model: str | None = None,
        notices: TextIO | None = None,
        banner: bool | None = None,
    ) -> None:
        self.name = channel
        self._reader = reader
        # None when botd was started with stdout closed: replies then go nowhere.
        self._output: TextIO | None = output if output is not None else sys.stdout
        self._notices = notices
        self._on_end = on_end_of_input
        self._user = user
        self._model = model
        self._banner = banner
        self._warned_closed = False
        self._task: asyncio.Task[None] | None = None
        # Ids unique across restarts, so inbound dedupe never swallows a new line.
        self._ids = (f"{int(time.time() * 1000)}-{n}" for n in itertools.count(1))

    async def start(self, sink: InboundSink) -> None:
        if self._reader is not None:
            source: ChunkSource = functools.partial(self._reader.read, _CHUNK)
            terminal = False
        else:
            source, terminal = _stdin_source(sys.stdin)
        if self._banner if self._banner is not None else terminal:
            notices = self._notices or sys.stderr
            with contextlib.suppress(AttributeError, OSError, ValueError):  # stderr closed
                notices.write(banner_text(self._model) + "\n")
                notices.flush()
        self._task = asyncio.create_task(self._read(source, sink), name="console-input")

    async def _read(self, source: ChunkSource, sink: InboundSink) -> None:
        splitter = LineSplitter()
        messages = MessageAssembler()
        while True:
            chunk = await source()
            lines = splitter.feed(chunk) if chunk else splitter.end()
            for line in lines:
                for message in messages.line(line):
                    await self._submit(message, sink)
            if not chunk:
                break
        for message in messages.end():
            await self._submit(message, sink)
        if self._on_end is not None:
            await self._on_end()

    async def _submit(self, message: str | TooLong, sink: InboundSink) -> None:
        if isinstance(message, TooLong):
            log.warning("%s", message.describe())
            return
        inbound = InboundMessage(
            channel=self.name,
            chat_id=CHAT_ID,
            sender_id=self._user,
            text=message,
            message_id=next(self._ids),
            conversation_key=console_conversation_key(self.name, CHAT_ID),
            is_direct=True,
            mentions_bot=True,
        )
        try:
            await sink(inbound)
        except Exception:
            # A line the core could not take (the store failing, say) was already
            # reported to the operator; input goes on with the next line.
            log.exception("console: a line could not be handled")

    async def stop_inbound(self) -> None:
        await self.stop()  # stops reading; printing replies keeps working

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._task = None

    async def send_file(
        self,
        target: Target,
        file: OutboundFile,
        caption: str = "",
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """Print the caption and what the file is: a terminal shows no uploads."""
        named = f"[file: {file.source or file.filename}]"
        return await self.send(target, f"{caption}\n{named}" if caption.strip() else named)

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """Print the reply. Once stdout is closed (``botd run | head -1``, ``>&-``) replies are
        dropped, with one warning: nobody reads them, and retrying cannot change that. Any
        other write error (a full disk under ``> answers.txt``) is a retryable failure."""
        output = self._output
        if output is not None:
            try:
                output.write(markdown.rstrip() + "\n")
                output.flush()
            except (BrokenPipeError, ValueError):  # ValueError: a closed file
                self._output_gone(output)
            except OSError as exc:
                raise ChannelError(
                    f"console: writing stdout failed: {exc}", retryable=True
                ) from exc
        elif not self._warned_closed:
            self._output_gone(None)
        return [MessageRef(target, next(self._ids))]

    def _output_gone(self, output: TextIO | None) -> None:
        self._output = None
        self._warned_closed = True
        log.warning("console: stdout is closed; replies are no longer printed")
        if output is sys.stdout and output is not None:
            # What could not be written stays buffered, and flushing it at exit would fail
            # again: the descriptor is pointed at /dev/null instead.
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, output.fileno())
                os.close(devnull)

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """A terminal cannot change a printed line: the new text is printed as a new reply."""
        return await self.send(ref.target, markdown)

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        """A printed line stays printed: nothing to do."""
        return None

    async def react(self, ref: MessageRef, emoji: str) -> None:
        return None

    async def typing(self, target: Target) -> None:
        return None


def banner_text(model: str | None) -> str:
    """What the console prints on a terminal before the first line is read."""
    answers = f" — {model}" if model else ""
    return (
        f"botd console{answers}. Type a message and press Enter; for several lines, type "
        f"{BLOCK_FENCE} on a line of its own before and after them. Ctrl-D to quit."
    )


async def _nothing() -> bytes:
    return b""


def _stdin_source(stdin: TextIO | None) -> tuple[ChunkSource, bool]:
    """Where stdin's bytes come from, and whether it is a terminal.

    A closed stdin (``botd run <&-``: Python then has no ``sys.stdin``) is an input that has
    already ended. Its file descriptor is never read: the next file opened takes that number.
    """
    try:
        fd = stdin.fileno() if stdin is not None else -1
    except (OSError, ValueError):
        fd = -1
    if fd < 0:
        log.warning("console: stdin is closed; nothing to read (end of input)")
        return _nothing, False
    terminal = os.isatty(fd)
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[bytes] = asyncio.Queue(maxsize=4)  # a bounded read-ahead
    thread = threading.Thread(
        target=_pump, args=(fd, loop, chunks), name="console-stdin", daemon=True
    )
    thread.start()
    return chunks.get, terminal


def _pump(fd: int, loop: asyncio.AbstractEventLoop, chunks: asyncio.Queue[bytes]) -> None:
    """Reads ``fd`` until its end and hands each chunk to the loop, ``b""`` last.

    ``os.read`` rather than ``sys.stdin.buffer``: a blocked read holds no lock that the
    interpreter would want at exit (the thread is a daemon, left blocked on a terminal).
    """
    while True:
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:  # a stdin left non-blocking by whoever started botd
            select.select([fd], [], [])
            continue
        except OSError as exc:
            log.warning("console: reading stdin failed (%s): treated as end of input", exc)
            chunk = b""
        try:
            asyncio.run_coroutine_threadsafe(chunks.put(chunk), loop).result()
        except BaseException:  # the loop closed or the console stopped: nobody reads on
            return
        if not chunk:
            return
