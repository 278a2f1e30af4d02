"""What of a Discord message botd reads besides its text and files.

Stickers (``sticker_items``: each by its name) and a poll (its question and answers) become
their marker (``botd.channels.inputs``). A forward (``message_reference.type`` 1) carries the
forwarded message as a snapshot (``message_snapshots``) and nothing of its own: its text,
stickers and files are the forwarded ones, after a label naming the channel it came from and
the day it was first sent (a snapshot names no author).
"""

from __future__ import annotations

from collections.abc import Sequence

import discord

from ...speakers import forwarded, speaker
from .. import inputs

__all__ = ["forwarded_snapshot", "marker_of", "snapshot_text"]


def marker_of(stickers: Sequence[discord.StickerItem], poll: discord.Poll | None) -> str:
    """The markers of ``stickers`` and ``poll`` ("" when there are none)."""
    markers = [inputs.sticker(item.name) for item in stickers]
    if poll is not None:
        markers.append(inputs.poll(poll.question or "", [a.text for a in poll.answers]))
    return " ".join(markers)


def forwarded_snapshot(message: discord.Message) -> discord.MessageSnapshot | None:
    """The message ``message`` forwards (None: it is no forward)."""
    reference = message.reference
    if reference is None or reference.type != discord.MessageReferenceType.forward:
        return None
    return message.message_snapshots[0] if message.message_snapshots else None


def snapshot_text(
    client: discord.Client | None,
    reference: discord.MessageReference,
    snapshot: discord.MessageSnapshot,
) -> str:
    """The forwarded message as it is read: its text and stickers after the label of where
    it came from (the channel's name where ``client`` knows it)."""
    channel = client.get_channel(reference.channel_id) if client is not None else None
    name = getattr(channel, "name", None)
    origin = (
        speaker(f"#{name}", str(reference.channel_id))
        if name
        else f"channel {reference.channel_id}"
    )
    return forwarded(
        origin,
        f"{snapshot.created_at:%Y-%m-%d}",
        snapshot.content,
        marker=marker_of(snapshot.stickers, None),
    )
