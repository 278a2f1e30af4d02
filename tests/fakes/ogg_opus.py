"""A small, valid Ogg Opus stream (what a Telegram voice note is), made here rather than
checked in: ``silence(frames)`` is ``frames`` × 20 ms of mono silence, in three Ogg pages
(``OpusHead``, ``OpusTags``, the audio), each with its CRC. ``pages`` reads a stream back
into its pages' packets, checking the capture pattern and every CRC, so a test can tell the
bytes are Ogg Opus and not merely bytes."""

from __future__ import annotations

import struct

_SERIAL = 0x626F7464  # "botd"
_PRE_SKIP = 312
_FRAME_SAMPLES = 960  # 20 ms at 48 kHz
_SILENT_FRAME = b"\xf8\xff\xfe"  # TOC: CELT fullband 20 ms, one frame; then silence


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
        table.append(crc & 0xFFFFFFFF)
    return table


_CRC = _crc_table()


def ogg_crc(data: bytes) -> int:
    """Ogg's CRC-32 (polynomial 0x04C11DB7, unreflected, no final XOR)."""
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _CRC[(crc >> 24) ^ byte]
    return crc


def _page(packets: list[bytes], *, flags: int, granule: int, sequence: int) -> bytes:
    lacing = b""
    for packet in packets:
        assert len(packet) < 255 * 255
        lacing += b"\xff" * (len(packet) // 255) + bytes([len(packet) % 255])
    header = struct.pack(
        "<4sBBqIIIB", b"OggS", 0, flags, granule, _SERIAL, sequence, 0, len(lacing)
    )
    page = header + lacing + b"".join(packets)
    return page[:22] + struct.pack("<I", ogg_crc(page)) + page[26:]


def silence(frames: int = 5) -> bytes:
    """``frames`` × 20 ms of mono Opus silence as an Ogg stream."""
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, 1, _PRE_SKIP, 48000, 0, 0)
    vendor = b"botd tests"
    tags = b"OpusTags" + struct.pack("<I", len(vendor)) + vendor + struct.pack("<I", 0)
    audio = [_SILENT_FRAME] * frames
    return b"".join(
        (
            _page([head], flags=0x02, granule=0, sequence=0),
            _page([tags], flags=0x00, granule=0, sequence=1),
            _page(audio, flags=0x04, granule=_PRE_SKIP + frames * _FRAME_SAMPLES, sequence=2),
        )
    )


def pages(data: bytes) -> list[list[bytes]]:
    """The packets of each Ogg page of ``data``; ``ValueError`` when it is not Ogg (a page
    without the capture pattern, cut short, or with a wrong CRC)."""
    found: list[list[bytes]] = []
    at = 0
    while at < len(data):
        if data[at : at + 4] != b"OggS" or len(data) < at + 27:
            raise ValueError(f"no Ogg page at byte {at}")
        count = data[at + 26]
        lacing = data[at + 27 : at + 27 + count]
        end = at + 27 + count + sum(lacing)
        page = data[at:end]
        if len(page) != end - at:
            raise ValueError(f"the Ogg page at byte {at} is cut short")
        (stated,) = struct.unpack("<I", page[22:26])
        if ogg_crc(page[:22] + b"\0\0\0\0" + page[26:]) != stated:
            raise ValueError(f"the Ogg page at byte {at} has a wrong CRC")
        packets, body, current = [], page[27 + count :], b""
        for size in lacing:
            current, body = current + body[:size], body[size:]
            if size < 255:
                packets.append(current)
                current = b""
        found.append(packets)
        at = end
    return found
