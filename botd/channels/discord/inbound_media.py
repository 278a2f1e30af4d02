"""Files in Discord messages: a message's attachments, and how to fetch one.

Each ``discord.Attachment`` becomes an ``Attachment`` holding its CDN URL; a voice message
(the flag Discord sets on clips recorded in the app) is a voice note. The CDN serves the
file by its (signed) URL, no token needed: the download streams it, capped.
"""

from __future__ import annotations

from collections.abc import Iterable

import discord

from ...chat import Attachment, AttachmentKind, TooLarge
from ..downloads import fetch_capped

_KINDS: dict[str, AttachmentKind] = {"image": "image", "audio": "audio", "video": "video"}


def discord_attachments(items: Iterable[discord.Attachment]) -> tuple[Attachment, ...]:
    """The files of a message (its ``attachments``; a forwarded snapshot's), as attachments."""
    found: list[Attachment] = []
    for item in items:
        mime = item.content_type or ""
        kind = "voice" if item.is_voice_message() else _KINDS.get(mime.split("/")[0], "document")
        found.append(Attachment(kind, item.url, item.filename, mime, item.size))
    return tuple(found)


async def discord_download(
    attachment: Attachment, max_bytes: int, proxy: str | None = None
) -> bytes:
    """The bytes of ``attachment`` from Discord's CDN (through ``proxy``, the channel's
    ``proxy:``), at most ``max_bytes``."""
    if attachment.size is not None and attachment.size > max_bytes:
        raise TooLarge(attachment.size, max_bytes)
    body, _ = await fetch_capped(attachment.ref, max_bytes, proxy=proxy)
    return body


__all__ = ["discord_attachments", "discord_download"]
