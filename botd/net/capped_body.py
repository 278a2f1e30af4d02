"""Reading an HTTP response body without ever doing more than a size limit's worth of work.

Every body botd downloads for a chat goes through ``read_capped_body``: pages and ``MEDIA:``
URLs (``botd.net.fetch``) and the files people send on Telegram, Slack and Discord
(``botd.channels.downloads``). A hostile server can make a small body expand enormously
(1 GiB of zeros gzips to about 1 MB), so the size that counts is the size *after* decoding,
and it is counted while decoding happens, not after:

* the raw bytes are read as they arrive (``Response.aiter_raw``) and decoded here with zlib,
  each decompress call limited to ``STEP`` bytes of output (the rest of the input waits in
  ``unconsumed_tail``), so no single call produces more than that, whatever the ratio;
* the reading stops the moment the decoded size passes ``max_bytes``, and the raw size may
  not pass it either (plus a little for the format's framing): an endless run of empty gzip
  members is no way around the limit;
* after every ``STEP`` of output the event loop gets a turn, so the other chats are served
  while a large body is decoded.

Content encodings: ``identity``, ``gzip`` (also ``x-gzip``; members one after another are
read as one body) and ``deflate`` (zlib-wrapped, as the standard says, or raw, as some
servers send it) are decoded, and ``ACCEPT_ENCODING`` says so to the server. At most ONE
encoding is taken: a body with stacked encodings (``Content-Encoding: gzip, gzip``) is
refused before any of it is read. No legitimate server stacks them, and each layer
multiplies what a small body expands to by about a thousand. An encoding botd does not
decode (``br``, ``zstd``, anything unknown) and a broken or cut-short stream are refused too:
undecoded bytes are never passed on as the body.

``BodyTooLarge`` and ``BodyUnreadable`` say why; their messages are phrases safe to show a
user (no URL, no header beyond the encoding's name). The caller turns them into its own
error, and handles ``httpx.HTTPError`` from the network itself.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ACCEPT_ENCODING",
    "STEP",
    "BodyTooLarge",
    "BodyUnreadable",
    "read_capped_body",
]

ACCEPT_ENCODING = "gzip, deflate"
"""The ``Accept-Encoding`` to send: exactly the encodings ``read_capped_body`` decodes."""

STEP = 256 * 1024
"""The most one decompress call may produce; the event loop gets a turn after each."""

_GZIP = frozenset({"gzip", "x-gzip"})
_SHOWN_NAME = 40  # an encoding's name is cut to this in a message (a server chooses it)


class BodyTooLarge(Exception):
    """The body (decoded, or as sent) is over the limit."""

    def __init__(self, declared: int | None, limit: int) -> None:
        self.declared, self.limit = declared, limit
        super().__init__(f"it is larger than {limit:,} bytes")


class BodyUnreadable(Exception):
    """The body cannot be decoded; the message is one phrase a user may read."""


def _shown(coding: str) -> str:
    printable = "".join(c for c in coding if c.isprintable())
    return printable[:_SHOWN_NAME] + ("…" if len(printable) > _SHOWN_NAME else "")


def _content_codings(response: httpx.Response) -> list[str]:
    """The response's content encodings, in the order applied, ``identity`` left out."""
    codings = response.headers.get_list("content-encoding", split_commas=True)
    return [c for c in (c.strip().lower() for c in codings) if c and c != "identity"]


class _Decompressor(Protocol):
    """What ``zlib.decompressobj`` returns, as far as ``_Inflater`` uses it."""

    def decompress(self, data: bytes, max_length: int = ..., /) -> bytes: ...

    @property
    def unconsumed_tail(self) -> bytes: ...

    @property
    def unused_data(self) -> bytes: ...

    @property
    def eof(self) -> bool: ...


class _Inflater:
    """A gzip or deflate decoder fed raw bytes, giving its output in pieces of at most
    ``STEP`` bytes (see the module docstring)."""

    def __init__(self, coding: str) -> None:
        self._gzip = coding in _GZIP
        self._name = "gzip" if self._gzip else "deflate"
        self._stream: _Decompressor | None = None
        self._head = b""  # deflate: the first bytes, until they tell zlib-wrapped from raw
        self._ended = False  # deflate: the stream's end was seen; what follows is ignored
        self._members = 0  # gzip: members read to their end

    def pieces(self, data: bytes) -> Iterator[bytes]:
        """The output of ``data``, a piece per decompress call."""
        try:
            yield from self._pieces(data)
        except zlib.error:
            raise BodyUnreadable(f"its {self._name} data is broken") from None

    def _pieces(self, data: bytes) -> Iterator[bytes]:
        while data and not self._ended:
            stream = self._stream
            if stream is None:
                if self._gzip:
                    if self._members:
                        data = data.lstrip(b"\0")  # zero padding after a member
                        if not data:
                            return
                    stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
                else:
                    self._head += data
                    if len(self._head) < 2:
                        return
                    data, self._head = self._head, b""
                    stream = zlib.decompressobj(_deflate_wbits(data))
                self._stream = stream
            while True:
                out = stream.decompress(data, STEP)
                data = stream.unconsumed_tail
                if out:
                    yield out
                if stream.eof:
                    data = stream.unused_data
                    self._stream = None
                    self._members += 1
                    self._ended = not self._gzip
                    break
                # A full piece may leave output inside zlib even with all input taken in.
                if not data and len(out) < STEP:
                    return

    def finish(self) -> None:
        """Check, once the body has ended, that the stream ended too."""
        if self._stream is not None or self._head:
            raise BodyUnreadable(f"its {self._name} data is cut short")


def _deflate_wbits(head: bytes) -> int:
    """zlib's window bits for a deflate body starting with ``head``: a zlib header (method 8,
    the two bytes a multiple of 31) or, failing that, a raw deflate stream."""
    zlib_wrapped = head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0
    return zlib.MAX_WBITS if zlib_wrapped else -zlib.MAX_WBITS


def _raw_limit(max_bytes: int) -> int:
    """The most raw bytes an encoded body of at most ``max_bytes`` may take: deflate adds
    a few bytes per 64 KiB stored block and gzip a header and trailer; 1 % and 64 KiB more
    is far beyond either."""
    return max_bytes + max_bytes // 100 + 65_536


async def read_capped_body(response: httpx.Response, max_bytes: int) -> bytes:
    """The decoded body of the streamed ``response``, at most ``max_bytes`` of it.

    Raises ``BodyTooLarge`` past the limit (a ``Content-Length`` over it is refused before
    reading when the body is not encoded; an encoded one, when it passes the raw limit) and
    ``BodyUnreadable`` for stacked, unknown or broken encodings, stacked ones before reading.
    """
    codings = _content_codings(response)
    if len(codings) > 1:
        shown = ", ".join(_shown(c) for c in codings[:4]) + (", …" if len(codings) > 4 else "")
        raise BodyUnreadable(
            f"it came with stacked content encodings ({shown}), which botd refuses"
        )
    if codings and codings[0] not in _GZIP and codings[0] != "deflate":
        raise BodyUnreadable(
            f"it came in the {_shown(codings[0])!r} content encoding, which botd does not decode"
        )
    inflater = _Inflater(codings[0]) if codings else None
    raw_limit = max_bytes if inflater is None else _raw_limit(max_bytes)
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > raw_limit:
        raise BodyTooLarge(int(declared) if inflater is None else None, max_bytes)
    body = bytearray()
    raw_size = 0
    since_turn = 0
    async for raw in response.aiter_raw():
        raw_size += len(raw)
        if raw_size > raw_limit:
            raise BodyTooLarge(None, max_bytes)
        pieces = inflater.pieces(raw) if inflater is not None else (raw,)
        for piece in pieces:
            if len(body) + len(piece) > max_bytes:
                raise BodyTooLarge(None, max_bytes)
            body += piece
            since_turn += len(piece)
            if since_turn >= STEP:
                since_turn = 0
                await asyncio.sleep(0)  # a large body decodes while other chats are served
    if inflater is not None:
        inflater.finish()
    return bytes(body)
