"""Small real files for the media tests: images Pillow reads, PDFs with text or slow to read,
and files that are only what their first bytes claim."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Sequence

from PIL import Image


def png(size: tuple[int, int] = (4, 3), color: tuple[int, ...] = (10, 200, 30)) -> bytes:
    """A PNG of one colour (RGBA when ``color`` has four values)."""
    out = io.BytesIO()
    Image.new("RGBA" if len(color) == 4 else "RGB", size, color).save(out, "PNG")
    return out.getvalue()


def jpeg(
    size: tuple[int, int] = (8, 8),
    color: tuple[int, int, int] = (200, 30, 10),
    *,
    orientation: int | None = None,
) -> bytes:
    """A JPEG of one colour, with an EXIF orientation tag when given one."""
    out = io.BytesIO()
    image = Image.new("RGB", size, color)
    if orientation is None:
        image.save(out, "JPEG")
    else:
        exif = Image.Exif()
        exif[0x0112] = orientation
        image.save(out, "JPEG", exif=exif)
    return out.getvalue()


PNG = png()
JPEG = jpeg()
OGG = b"OggS\x00\x02" + bytes(range(100))
ZIP = b"PK\x03\x04" + bytes(range(100))


def claimed_png(width: int, height: int) -> bytes:
    """A small PNG whose header claims ``width``×``height`` RGB pixels (a decompression bomb's
    claim: its one IDAT chunk holds only a few rows)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        checksum = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + checksum

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = zlib.compress(bytes(3 * width + 1) * 4)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")
    )


def pdf(contents: Sequence[bytes], *, compressed: bool = False) -> bytes:
    """A PDF with a page for each content stream (Helvetica as /F1), with a correct xref
    table; the same stream given twice is written once and shared by its pages."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b"", b""]
    objects[2] = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    streams: dict[bytes, int] = {}
    pages: list[int] = []
    for content in contents:
        if content not in streams:
            data, extra = (
                (zlib.compress(content), b" /Filter /FlateDecode")
                if compressed
                else (
                    content,
                    b"",
                )
            )
            objects.append(b"<< /Length %d%s >>\nstream\n%s\nendstream" % (len(data), extra, data))
            streams[content] = len(objects)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R >> >> >>" % streams[content]
        )
        pages.append(len(objects))
    kids = b" ".join(b"%d 0 R" % page for page in pages)
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(pages))
    return _document(objects)


def _document(objects: Sequence[bytes]) -> bytes:
    """A PDF file of these objects (numbered from 1, the first the catalog), with a correct
    xref table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def showing(text: str) -> bytes:
    """A page's content stream showing ``text`` (ASCII, no parentheses)."""
    return f"BT /F1 24 Tf 72 720 Td ({text}) Tj ET".encode()


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF showing ``text`` (ASCII, no parentheses)."""
    return pdf([showing(text)])


def slow_pdf() -> bytes:
    """A small PDF (under 2 kB) whose text takes PDFium minutes of CPU to look for, in little
    memory: its page draws a form ten times, which draws the next form ten times, six forms
    deep, and the last shows an empty string 10,000 times (10^9 operations parsed)."""
    depth = 6
    first = 5  # the object number of the outermost form
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
        b"/Resources << /XObject << /X %d 0 R >> >> >>" % (first + depth, first),
    ]
    for level in range(depth):
        if level == depth - 1:
            content = b"BT /F1 1 Tf " + b"() Tj " * 10_000 + b"ET"
            resources = b"<< /Font << /F1 3 0 R >> >>"
        else:
            content = b"/X Do " * 10
            resources = b"<< /XObject << /X %d 0 R >> >>" % (first + level + 1)
        data = zlib.compress(content)
        objects.append(
            b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources %s "
            b"/Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream"
            % (resources, len(data), data)
        )
    objects.append(b"<< /Length 5 >>\nstream\n/X Do\nendstream")
    return _document(objects)


def dense_text_pdf(operations: int) -> tuple[bytes, str]:
    """A one-page PDF drawn by ``operations`` text operations of one character each (``(c)Tj``,
    6 bytes: 780,000 of them make a 4.7 MB file, the shape of a PDF whose every glyph is
    placed on its own), in lines of 1,000 characters at 1 point; and the characters it shows,
    in order (letters and digits cycling)."""
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    shown = "".join(alphabet[n % len(alphabet)] for n in range(operations))
    lines = [shown[start : start + 1000] for start in range(0, operations, 1000)]
    content = b"BT /F1 1 Tf 1 TL 10 790 Td\n" + b"T*\n".join(
        b"".join(b"(%s)Tj " % c.encode() for c in line) for line in lines
    )
    return pdf([content + b"\nET"]), shown
