"""The message a Discord reply answers, as the quote the model is shown.

A reply (message type ``REPLY``) names the message it answers (``message_reference``), and
the gateway usually sends that message along (``referenced_message``, which discord.py
resolves) or discord.py has it cached. When neither, ``fetch_quote`` asks the REST API for it
(``GET /channels/{id}/messages/{id}``, which needs the Read Message History permission)
within ``FETCH_TIMEOUT`` seconds; a refusal, a deleted message, a timeout or a dropped
connection is logged in one line with Discord's words and the message goes on without the
quote. A forward (a reference of type ``forward``) quotes nothing: it is no reply.

The quote is the message's text and its files named (``[sent photo.png]``), under its
author's display name and id; the bot's own message is quoted as the bot's (``from_bot``).
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import discord

from ...chat import Quote
from ...speakers import speaker
from .inbound_media import discord_attachments

log = logging.getLogger(__name__)

__all__ = ["FETCH_TIMEOUT", "fetch_quote", "quote_of", "unresolved_reply"]

FETCH_TIMEOUT = 3.0
"""Seconds a reply waits for the message it answers to be fetched."""


def _replied(message: discord.Message) -> discord.MessageReference | None:
    reference = message.reference
    if message.type is not discord.MessageType.reply or reference is None:
        return None
    if reference.type is not discord.MessageReferenceType.default:
        return None
    return reference


def _known(reference: discord.MessageReference) -> discord.Message | None:
    resolved = reference.resolved
    if isinstance(resolved, discord.Message):
        return resolved
    return reference.cached_message


def quote_of(message: discord.Message, me: discord.ClientUser) -> Quote | None:
    """What ``message`` quotes, from what the gateway sent or discord.py cached (None: no
    reply, a deleted message, or one to fetch: ``unresolved_reply``)."""
    reference = _replied(message)
    replied = _known(reference) if reference is not None else None
    return None if replied is None else _quote(replied, me)


def unresolved_reply(message: discord.Message) -> discord.MessageReference | None:
    """The reference of a reply whose message neither came along nor is cached, and was not
    deleted (Discord sends ``referenced_message: null`` for a deleted one)."""
    reference = _replied(message)
    if reference is None or reference.message_id is None or reference.resolved is not None:
        return None
    return reference if reference.cached_message is None else None


async def fetch_quote(
    client: discord.Client,
    reference: discord.MessageReference,
    me: discord.ClientUser,
    timeout: float = FETCH_TIMEOUT,
) -> Quote | None:
    """The message ``reference`` names, fetched and quoted; None when it cannot be had."""
    assert reference.message_id is not None
    channel = client.get_partial_messageable(reference.channel_id)
    try:
        async with asyncio.timeout(timeout):
            replied = await channel.fetch_message(reference.message_id)
    except discord.HTTPException as exc:
        _not_fetched(reference, f"{exc.status} {exc.text or exc}")
        return None
    except TimeoutError:
        _not_fetched(reference, f"no answer within {timeout:g}s")
        return None
    except (aiohttp.ClientError, OSError) as exc:
        _not_fetched(reference, f"cannot reach Discord: {exc or type(exc).__name__}")
        return None
    return _quote(replied, me)


def _not_fetched(reference: discord.MessageReference, reason: str) -> None:
    hint = " (the bot needs Read Message History there)" if reason.startswith("403") else ""
    log.warning(
        "discord: the message %s a reply answers was not fetched, so it is not quoted: %s%s",
        reference.message_id,
        reason,
        hint,
    )


def _quote(replied: discord.Message, me: discord.ClientUser) -> Quote | None:
    author = replied.author
    files = discord_attachments(replied.attachments)
    if author.id == me.id:
        return Quote.of(me.name, replied.content, files, from_bot=True)
    return Quote.of(speaker(author.display_name, str(author.id)), replied.content, files)
