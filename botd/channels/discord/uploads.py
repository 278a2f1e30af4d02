"""Uploads to Discord: a message carrying the file as an attachment (``discord.File``), the
caption as its content. Discord takes attachments of up to 10 MiB from a bot in a server
without boosts; a larger file is refused before anything is sent.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import discord

from ...chat import MessageRef, Target
from ..base import OutboundFile

if TYPE_CHECKING:
    from .adapter import DiscordAdapter

UPLOAD_LIMIT = 10 * 1024 * 1024


async def send_file(
    adapter: DiscordAdapter, target: Target, file: OutboundFile, caption: str
) -> list[MessageRef]:
    """Post ``file`` as an attachment in ``target``'s channel or thread."""
    from .adapter import ALLOWED_MENTIONS, DiscordError, _refusals

    if len(file.data) > UPLOAD_LIMIT:
        raise DiscordError(
            "upload", 413, f"file too large: {file.filename} is {len(file.data)} bytes"
        )
    channel = adapter._channel(target)
    chunks = adapter._chunks(caption) if caption.strip() else []
    content = chunks[0].text if chunks else None
    attachment = discord.File(io.BytesIO(file.data), filename=file.filename)
    with _refusals("upload"):
        if target.reply_to_id is None:
            sent = await channel.send(content, file=attachment, allowed_mentions=ALLOWED_MENTIONS)
        else:
            reference = discord.MessageReference(
                message_id=int(target.reply_to_id),
                channel_id=channel.id,
                fail_if_not_exists=False,
            )
            sent = await channel.send(
                content, file=attachment, allowed_mentions=ALLOWED_MENTIONS, reference=reference
            )
    return [MessageRef(target, str(sent.id))]


__all__ = ["UPLOAD_LIMIT", "send_file"]
