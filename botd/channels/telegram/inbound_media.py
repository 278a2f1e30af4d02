"""Files in Telegram messages: which of them a message carries, and how to fetch one.

A photo comes in several sizes; the largest is taken. Documents (images sent as files
among them), voice notes, audio files and videos become ``Attachment``s holding the
``file_id``; their caption is the message's text. ``download`` asks ``getFile`` through
python-telegram-bot (which builds the file URL from the bot's ``base_file_url``, so a
configured ``api_base_url`` is honoured) and streams the file, capped.
"""

from __future__ import annotations

from telegram import Bot, Message
from telegram.error import TelegramError
from telegram.ext import filters

from ...chat import Attachment, AttachmentKind, DownloadError, TooLarge
from ..downloads import fetch_capped

MEDIA = (
    filters.PHOTO
    | filters.Document.ALL
    | filters.VOICE
    | filters.AUDIO
    | filters.VIDEO
    | filters.VIDEO_NOTE
)
"""The messages with files the adapter takes (with or without a caption)."""


def telegram_attachments(message: Message) -> tuple[Attachment, ...]:
    """The files ``message`` carries, as attachments."""
    found: list[Attachment] = []
    if message.photo:
        largest = max(message.photo, key=lambda p: (p.file_size or 0, p.width * p.height))
        found.append(
            Attachment("image", largest.file_id, "photo.jpg", "image/jpeg", largest.file_size)
        )
    document = message.document
    if document is not None:
        mime = document.mime_type or ""
        kind: AttachmentKind = "image" if mime.startswith("image/") else "document"
        found.append(
            Attachment(kind, document.file_id, document.file_name or "", mime, document.file_size)
        )
    voice = message.voice
    if voice is not None:
        found.append(
            Attachment("voice", voice.file_id, "", voice.mime_type or "audio/ogg", voice.file_size)
        )
    audio = message.audio
    if audio is not None:
        found.append(
            Attachment(
                "audio",
                audio.file_id,
                audio.file_name or "",
                audio.mime_type or "",
                audio.file_size,
            )
        )
    for video in (message.video, message.video_note):
        if video is not None:
            name = getattr(video, "file_name", None) or "video.mp4"
            mime = getattr(video, "mime_type", None) or "video/mp4"
            found.append(Attachment("video", video.file_id, name, mime, video.file_size))
    return tuple(found)


async def telegram_download(
    bot: Bot, attachment: Attachment, max_bytes: int, proxy: str | None = None
) -> bytes:
    """The bytes of ``attachment``: ``getFile``, then the file itself (through ``proxy``,
    the channel's ``proxy:``), at most ``max_bytes``."""
    if attachment.size is not None and attachment.size > max_bytes:
        raise TooLarge(attachment.size, max_bytes)
    try:
        file = await bot.get_file(attachment.ref)
    except TelegramError as exc:
        # Telegram's own words ("file is too big"); they carry no token.
        raise DownloadError(f"Telegram would not hand it out ({exc.message})") from None
    if file.file_size is not None and file.file_size > max_bytes:
        raise TooLarge(file.file_size, max_bytes)
    if not file.file_path:
        raise DownloadError("Telegram gave no path to download it from")
    body, _ = await fetch_capped(file.file_path, max_bytes, proxy=proxy)
    return body


__all__ = ["MEDIA", "telegram_attachments", "telegram_download"]
