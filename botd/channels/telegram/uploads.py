"""Uploads to Telegram: a file sent as a photo, voice note, audio, video or document.

The method follows the file's kind: ``sendPhoto`` for jpeg, png and webp images,
``sendVoice`` for audio marked ``as_voice`` (``[[audio_as_voice]]``), ``sendAudio`` for other
audio, ``sendVideo`` for video and ``sendDocument`` for everything else. Bots may upload 10 MB
as a photo and 50 MB otherwise; a photo over 10 MB goes as a document, a file over 50 MB is
refused before anything is sent. The caption is rendered to Telegram's HTML and, when
Telegram refuses the markup, sent again as plain text, like a message.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from telegram import Bot, Message, ReplyParameters
from telegram.constants import ParseMode
from telegram.error import BadRequest, TelegramError

from ...chat import MessageRef, Target
from ..base import OutboundFile
from .errors import TelegramAPIError, api_error
from .markup import HTML

log = logging.getLogger("botd.channels.telegram")

CAPTION_LIMIT = 1024
PHOTO_LIMIT = 10 * 1024 * 1024
UPLOAD_LIMIT = 50 * 1024 * 1024


def upload_method(file: OutboundFile) -> str:
    """The Bot API method ``file`` is sent with."""
    kind = file.kind
    if kind == "photo" and len(file.data) <= PHOTO_LIMIT:
        return "sendPhoto"
    if kind == "audio":
        return "sendVoice" if file.as_voice else "sendAudio"
    if kind == "video":
        return "sendVideo"
    return "sendDocument"


_FIELDS = {
    "sendPhoto": ("send_photo", "photo"),
    "sendVoice": ("send_voice", "voice"),
    "sendAudio": ("send_audio", "audio"),
    "sendVideo": ("send_video", "video"),
    "sendDocument": ("send_document", "document"),
}


async def send_file(
    bot: Bot,
    per_chat: Callable[[str, Callable[[], Awaitable[Message]]], Awaitable[Message]],
    target: Target,
    file: OutboundFile,
    caption: str,
    *,
    thread: str | None,
) -> list[MessageRef]:
    """Upload ``file`` to ``target`` (in ``thread``, replying to ``target.reply_to_id``).

    ``per_chat`` runs each call under the adapter's per-chat flood waits.
    """
    method = upload_method(file)
    if len(file.data) > UPLOAD_LIMIT:
        raise TelegramAPIError(
            method,
            f"file too large: {file.filename} is {len(file.data)} bytes, "
            f"bots may upload {UPLOAD_LIMIT} bytes",
        )
    name, field = _FIELDS[method]
    extra: dict[str, Any] = {"filename": file.filename}
    if thread is not None:
        extra["message_thread_id"] = int(thread)
    if target.reply_to_id is not None:
        extra["reply_parameters"] = ReplyParameters(
            int(target.reply_to_id), allow_sending_without_reply=True
        )
    call = getattr(bot, name)
    chunks = HTML.chunks(caption, CAPTION_LIMIT) if caption.strip() else []
    chat = target.chat_id
    try:
        if not chunks:
            sent = await per_chat(chat, partial(call, chat, **{field: file.data}, **extra))
        else:
            try:
                sent = await per_chat(
                    chat,
                    partial(
                        call,
                        chat,
                        **{field: file.data},
                        caption=chunks[0].text,
                        parse_mode=ParseMode.HTML,
                        **extra,
                    ),
                )
            except BadRequest as exc:
                if "can't parse entities" not in exc.message.lower():
                    raise
                log.warning("telegram: caption markup refused (%s); sending plain", exc.message)
                sent = await per_chat(
                    chat,
                    partial(call, chat, **{field: file.data}, caption=chunks[0].plain, **extra),
                )
    except TelegramError as exc:
        raise api_error(method, exc) from exc
    return [MessageRef(target, str(sent.message_id))]


__all__ = ["CAPTION_LIMIT", "PHOTO_LIMIT", "UPLOAD_LIMIT", "send_file", "upload_method"]
