"""The size an image file claims in its header, for the model fakes' image checks.

The real APIs refuse an image by the size its header claims (Anthropic: more than 8000
pixels on a side), before decoding any pixel. The fakes do the same, reading the header by
hand: a decoder (Pillow) refuses to even open a 50000×50000 header as a decompression
bomb, and the fakes must judge what a client sends, not share botd's own tools for it.

A header that cannot be read (a stub fixture, a broken CRC, an unknown format) gives None:
the fakes let such an image through, as the media fixtures that are only a signature and a
few bytes rely on.
"""

from __future__ import annotations

import base64
import binascii
import struct
import zlib

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
"""Start-of-frame markers (not DHT C4, JPG C8 or DAC CC, which share the range)."""


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) as a PNG, JPEG or GIF header claims it; None when unreadable."""
    if data.startswith(PNG_SIGNATURE):
        return _png_size(data)
    if data.startswith(b"\xff\xd8"):
        return _jpeg_size(data)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return int(width), int(height)
    return None


def base64_image_size(data: str) -> tuple[int, int] | None:
    """``image_size`` of base64 text; None when it is not base64 either."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    return image_size(raw)


def _png_size(data: bytes) -> tuple[int, int] | None:
    # The first chunk must be IHDR: length 13, type, width, height, 5 more bytes, CRC.
    header = data[8:33]
    if len(header) < 25 or header[:8] != b"\x00\x00\x00\x0dIHDR":
        return None
    (crc,) = struct.unpack(">I", header[21:25])
    if zlib.crc32(header[4:21]) != crc:
        return None
    width, height = struct.unpack(">II", header[8:16])
    return int(width), int(height)


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if marker in _JPEG_SOF:
            if at + 9 > len(data):
                return None
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return int(width), int(height)
        at += 2 + length
    return None


def png(width: int, height: int) -> bytes:
    """A valid one-bit greyscale PNG of that size, all black (small: it compresses well)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    row = b"\x00" + bytes((width + 7) // 8)  # filter byte, then the packed pixels
    pixels = zlib.compress(row * height, 9)
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return PNG_SIGNATURE + chunk(b"IHDR", ihdr) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


__all__ = ["PNG_SIGNATURE", "base64_image_size", "image_size", "png"]
