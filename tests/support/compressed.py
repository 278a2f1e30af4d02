"""Compressed bodies for the tests of hostile servers: gzip streams of nothing but zeros,
which expand about a thousand times (1 GiB inside about 1 MB).

Compressing 1 GiB takes seconds; ``gzip_of_zeros`` takes a fraction of one. Each MiB of zeros
is compressed after a full flush, which resets the compressor, so every MiB after the first
compresses to the same bytes: the stream is the first MiB (with the gzip header), that block
repeated, an empty final block and the trailer (the CRC-32 and size of all the zeros),
computed here. It is a valid gzip stream of exactly ``mib`` MiB of zeros.

``peak_allocated`` measures what reading one costs: the most memory allocated at once.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import struct
import tracemalloc
import zlib
from collections.abc import Callable, Iterator

MIB = 1 << 20


@functools.cache
def gzip_of_zeros(mib: int) -> bytes:
    """A gzip stream (one member) of ``mib`` MiB of zeros."""
    zeros = bytes(MIB)
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = packer.compress(zeros) + packer.flush(zlib.Z_FULL_FLUSH)
    repeated = packer.compress(zeros) + packer.flush(zlib.Z_FULL_FLUSH)
    final_block = packer.flush()[:-8]  # its trailer counts only the 2 MiB seen here
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(zeros, crc)
    trailer = struct.pack("<II", crc, (mib * MIB) & 0xFFFFFFFF)
    return first + repeated * (mib - 1) + final_block + trailer


def gzip_bomb() -> bytes:
    """1 GiB of zeros, gzipped once (about 1 MB)."""
    return gzip_of_zeros(1024)


@functools.cache
def stacked_bomb() -> bytes:
    """1 GiB of zeros inside two gzip layers (about 2.5 KB): ``Content-Encoding: gzip, gzip``."""
    return gzip.compress(gzip_bomb())


@contextlib.contextmanager
def peak_allocated() -> Iterator[Callable[[], int]]:
    """Inside: a function giving the most memory allocated at once since entering, beyond
    what was held then (tracemalloc's peak, which counts every bytes object zlib returns)."""
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        yield lambda: tracemalloc.get_traced_memory()[1] - before
    finally:
        if not tracing:
            tracemalloc.stop()
