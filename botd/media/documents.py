"""What of a file the model can read: the image formats it takes, text files, PDF text.

``image_type`` sniffs the bytes (a photo's declared type is not trusted: an image sent as
a file may be named anything). Text files are decoded as UTF-8, an undecodable byte
becoming U+FFFD. PDF text is read with PDFium through pypdfium2, an optional dependency
(``botd[pdf]``); without it ``pdf_text`` raises ``PdfSupportMissing``. ``pdf_text`` runs in
the reading worker (``worker``), so this module imports nothing of botd at run time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pypdfium2

    from ..chat import Attachment

log = logging.getLogger(__name__)

DOCUMENT_CHAR_LIMIT = 40_000
"""Characters of one document's text given to the model; the rest is cut, and said so."""

TEXT_EXTENSIONS = frozenset(
    """txt text md markdown rst csv tsv json jsonl ndjson yaml yml toml ini cfg conf env log
    xml html htm css js mjs cjs ts tsx jsx py pyi rb go rs java kt kts scala c h cc cpp cxx
    hpp cs swift m mm php pl pm lua r sql sh bash zsh fish ps1 bat cmd dockerfile makefile
    gradle tf hcl proto graphql gql vue svelte dart ex exs erl hs clj elm nim zig diff patch
    tex bib srt vtt properties lock""".split()
)
"""File name extensions read as text."""

TEXT_MIME_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/x-javascript",
        "application/x-sh",
        "application/sql",
        "application/x-ndjson",
    }
)


class PdfSupportMissing(Exception):
    """pypdfium2 is not installed (``pip install 'botd[pdf]'``)."""


class DocumentUnreadable(Exception):
    """The file could not be read as what it claimed to be (a broken PDF, say)."""


def image_type(data: bytes) -> str | None:
    """The MIME type of ``data`` when it is an image the model takes (JPEG, PNG, GIF, WebP)."""
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def is_pdf(attachment: Attachment, data: bytes) -> bool:
    return data.startswith(b"%PDF-") or (
        attachment.mime_type == "application/pdf" and b"%PDF-" in data[:1024]
    )


def is_text(attachment: Attachment, data: bytes) -> bool:
    """Whether ``data`` is a text file: by its name or type, or (untyped) by its bytes."""
    name = PurePath(attachment.name.lower())
    mime = attachment.mime_type.split(";")[0].strip().lower()
    if name.suffix.lstrip(".") in TEXT_EXTENSIONS or name.name in TEXT_EXTENSIONS:
        return True
    if mime.startswith("text/") or mime in TEXT_MIME_TYPES or mime.endswith(("+json", "+xml")):
        return True
    if mime in ("", "application/octet-stream") and b"\x00" not in data[:8192]:
        try:
            data[:8192].decode("utf-8")
        except UnicodeDecodeError as exc:
            return exc.start > 8188  # only a character cut at the sample's end
        return True
    return False


def decode_text(data: bytes) -> str:
    """``data`` as UTF-8 text (a byte order mark dropped, bad bytes as U+FFFD)."""
    return data.decode("utf-8-sig", errors="replace")


@dataclass(frozen=True)
class PdfText:
    text: str
    """The text of the pages read, a blank line between pages."""
    pages_read: int
    pages: int
    """How many pages the PDF has: more than ``pages_read`` when reading stopped early."""


def pdf_text(data: bytes, enough: int = DOCUMENT_CHAR_LIMIT) -> PdfText:
    """The text of a PDF's pages, read page by page until it is longer than ``enough``
    characters (synchronous CPU work: run in the reading worker).

    PDFium reads a page's text whole, however many text operations draw it (in the order it
    stores the characters, including those drawn outside the page's box, as a text layer
    would be); a page is never cut short."""
    try:
        import pypdfium2 as pdfium
        import pypdfium2.raw as pdfium_c
    except ImportError:
        raise PdfSupportMissing("PDF support is not installed: pip install 'botd[pdf]'") from None
    texts: list[str] = []
    length = 0
    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if exc.err_code == pdfium_c.FPDF_ERR_PASSWORD:
            raise DocumentUnreadable("the PDF is encrypted") from None
        log.warning("a PDF could not be read: %s", exc)
        raise DocumentUnreadable("the PDF could not be read") from None
    try:
        pages = len(document)
        for number in range(pages):
            if length > enough:
                break
            text = _page_text(document, number).strip()
            texts.append(text)
            if text:
                length += len(text) + (2 if length else 0)  # as joined below
    except pdfium.PdfiumError as exc:
        log.warning("a PDF could not be read: %s", exc)
        raise DocumentUnreadable("the PDF could not be read") from None
    finally:
        document.close()
    return PdfText("\n\n".join(text for text in texts if text), len(texts), pages)


def _page_text(document: pypdfium2.PdfDocument, number: int) -> str:
    """The text of one page, its line ends as ``\\n``."""
    page = document[number]
    try:
        text_page = page.get_textpage()
        try:
            text: str = text_page.get_text_range()
        finally:
            text_page.close()
    finally:
        page.close()
    return text.replace("\r\n", "\n").replace("\r", "\n")


def capped(text: str, limit: int = DOCUMENT_CHAR_LIMIT) -> str:
    """``text``, cut at ``limit`` characters with a line saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[… cut: {len(text) - limit} more characters not shown]"


def capped_pdf(pdf: PdfText, limit: int = DOCUMENT_CHAR_LIMIT) -> str:
    """A PDF's text cut at ``limit`` characters, saying so when reading stopped early."""
    if pdf.pages_read == pdf.pages:
        return capped(pdf.text, limit)
    return (
        f"{pdf.text[:limit]}\n[… cut: only the first {limit} characters are shown, "
        f"from pages 1–{pdf.pages_read} of {pdf.pages}]"
    )


__all__ = [
    "DOCUMENT_CHAR_LIMIT",
    "DocumentUnreadable",
    "PdfSupportMissing",
    "PdfText",
    "capped",
    "capped_pdf",
    "decode_text",
    "image_type",
    "is_pdf",
    "is_text",
    "pdf_text",
]
