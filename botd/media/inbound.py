"""Attachments of inbound messages made into content of the user turn.

``MediaResolver.resolve`` fetches each attachment of a message through its channel's adapter
(``download``, capped at ``media.max_bytes``; a declared size over it is refused without a
download) and turns it into what the model reads:

* an image (JPEG, PNG, GIF or WebP, decided by its bytes and verified by Pillow) becomes an
  image block, scaled down and re-encoded first where the model APIs need it (``images``);
* a voice note or audio file is transcribed (``transcribe``) and becomes text marked as a
  transcript;
* a text file becomes its text, a PDF the text of its pages (``botd[pdf]``), each under the
  file's name and cut at ``DOCUMENT_CHAR_LIMIT`` characters.

Images and PDFs are read in worker processes (``sandbox``): at most a few at once, shared
fairly between conversations (the message's conversation key is the job's), each within
``media.read_timeout`` seconds, killed past it or when ``resolve`` is cancelled.

Whatever cannot be read (too big, a type the model cannot take, audio with no transcription
configured, a failed download or transcription, a corrupt image, a read over its budget)
becomes one line for the user in ``Resolved.problems`` and a short note for the model in
``Resolved.notes``, so that the text of the message still goes through and the model knows
what it did not get. Nothing here raises for a bad file: a failure is always a line for the
user.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from mimetypes import guess_extension

from ..chat import Attachment, DownloadError, InboundMessage, TooLarge
from ..config.schema import MediaSection
from ..events import ImageContent, TextContent
from .documents import (
    PdfSupportMissing,
    capped,
    capped_pdf,
    decode_text,
    image_type,
    is_pdf,
    is_text,
)
from .sandbox import Budget, ReadFailed, Sandbox
from .transcribe import TranscriptionFailed, transcribe

log = logging.getLogger(__name__)

Download = Callable[[InboundMessage, Attachment, int], Awaitable[bytes]]
"""Fetch an attachment of a message (through its channel's adapter), at most so many bytes."""


class _Unreadable(Exception):
    """This attachment is not for the model; the message says why (one short phrase)."""


@dataclass
class Resolved:
    """What one message's attachments became."""

    blocks: list[TextContent | ImageContent] = field(default_factory=list)
    """Content for the model: image blocks, transcripts, document text."""
    notes: list[TextContent] = field(default_factory=list)
    """For the model: what could not be read, and why."""
    problems: list[str] = field(default_factory=list)
    """One line each for the user: what could not be read, and why."""


class MediaResolver:
    """See the module docstring. ``settings`` is called for each message (a reload applies
    to the next one); ``download`` fetches through the message's adapter (None: files
    cannot be fetched at all). ``sandbox`` bounds how many files are read at once (one
    shared with the other readers of the runtime, or its own)."""

    def __init__(
        self,
        settings: Callable[[], MediaSection],
        download: Download | None = None,
        *,
        sandbox: Sandbox | None = None,
    ) -> None:
        self._settings = settings
        self._download = download
        self._sandbox = sandbox or Sandbox()

    async def resolve(self, message: InboundMessage) -> Resolved:
        resolved = Resolved()
        settings = self._settings()
        for attachment in message.attachments:
            label = attachment.label()
            try:
                resolved.blocks.append(await self._read(message, attachment, settings))
            except (_Unreadable, ReadFailed) as exc:
                resolved.problems.append(f"I could not read {label}: {exc}.")
                resolved.notes.append(TextContent(text=f"[{label} could not be read: {exc}]"))
            except DownloadError as exc:
                log.warning("%s of message %s: %s", label, message.message_id, exc)
                resolved.problems.append(f"I could not read {label}: {exc}.")
                resolved.notes.append(TextContent(text=f"[{label} could not be read: {exc}]"))
            except Exception:
                log.exception("reading %s of message %s failed", label, message.message_id)
                resolved.problems.append(f"I could not read {label}: something went wrong.")
                resolved.notes.append(TextContent(text=f"[{label} could not be read]"))
        return resolved

    async def _read(
        self, message: InboundMessage, attachment: Attachment, settings: MediaSection
    ) -> TextContent | ImageContent:
        audio = attachment.kind in ("voice", "audio") or attachment.mime_type.startswith("audio/")
        if attachment.kind == "video" or attachment.mime_type.startswith("video/"):
            raise _Unreadable(f"videos are not supported ({attachment.mime_type or 'video'})")
        if audio and settings.transcription is None:
            raise _Unreadable("no transcription service is configured for voice and audio")
        limit = settings.max_bytes
        if attachment.size is not None and attachment.size > limit:
            raise TooLarge(attachment.size, limit)
        if self._download is None:
            raise _Unreadable("files cannot be fetched here")
        data = await self._download(message, attachment, limit)
        if len(data) > limit:  # an adapter that read past the cap: refused all the same
            raise TooLarge(len(data), limit)
        budget = Budget.of(settings.read_timeout)
        if image_type(data) is not None:
            image = await self._sandbox.fit_image(
                data, budget, conversation=message.conversation_key
            )
            return ImageContent(
                mime_type=image.mime_type, data=base64.b64encode(image.data).decode("ascii")
            )
        if attachment.kind == "image":
            raise _Unreadable("only JPEG, PNG, GIF and WebP images can be read")
        if audio:
            assert settings.transcription is not None
            try:
                text = await transcribe(
                    settings.transcription,
                    data,
                    # The service tells the format by the name's extension.
                    filename=attachment.name
                    or f"{attachment.kind}{guess_extension(attachment.mime_type) or '.ogg'}",
                    mime_type=attachment.mime_type,
                )
            except TranscriptionFailed as exc:
                raise _Unreadable(str(exc)) from None
            mark = (
                "[voice note transcript]"
                if attachment.kind == "voice"
                else f"[audio transcript: {attachment.label()}]"
            )
            return TextContent(text=f"{mark} {text or '(no speech recognised)'}")
        if is_pdf(attachment, data):
            try:
                pdf = await self._sandbox.pdf_text(
                    data, budget, conversation=message.conversation_key
                )
            except PdfSupportMissing as exc:
                log.warning("a PDF was sent but cannot be read: %s", exc)
                raise _Unreadable("PDF reading is not installed here") from None
            return TextContent(text=f"[file: {attachment.label()}]\n{capped_pdf(pdf)}")
        if is_text(attachment, data):
            return TextContent(text=f"[file: {attachment.label()}]\n{capped(decode_text(data))}")
        kind = attachment.mime_type or "unknown"
        raise _Unreadable(f"this type of file is not supported ({kind})")


__all__ = ["Download", "MediaResolver", "Resolved"]
