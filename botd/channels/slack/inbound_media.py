"""Files in Slack messages: which of them a ``message`` event carries, and how to fetch one.

A message with files (subtype ``file_share``) lists them under ``files``; each becomes an
``Attachment`` holding its ``url_private_download`` (or ``url_private``). Fetching one needs
the bot token as a Bearer token and the app's ``files:read`` scope: without the scope Slack
answers with its HTML sign-in page instead of the file, which is refused here with a line
naming the scope. The token is sent only to Slack's file host (``files.slack.com``) or the
host of the configured API URL, never to a URL some other host put in an event.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from ...chat import Attachment, AttachmentKind, DownloadError, TooLarge
from ..downloads import fetch_capped

FILE_HOSTS = frozenset({"files.slack.com"})
"""Where Slack serves the files of messages."""


def slack_attachments(event: dict[str, Any]) -> tuple[Attachment, ...]:
    """The files of a ``message`` event, as attachments (files Slack did not give a private
    URL for, such as a Slack Connect file still being checked, are left out)."""
    files = event.get("files")
    if not isinstance(files, list):
        return ()
    return tuple(_attachment(f) for f in files if isinstance(f, dict) and _url(f))


_KINDS: dict[str, AttachmentKind] = {"image": "image", "audio": "audio", "video": "video"}


def _url(file: dict[str, Any]) -> str:
    return str(file.get("url_private_download") or file.get("url_private") or "")


def _attachment(file: dict[str, Any]) -> Attachment:
    mime = str(file.get("mimetype") or "")
    kind: AttachmentKind = _KINDS.get(mime.split("/")[0], "document")
    if file.get("subtype") == "slack_audio":
        kind = "voice"  # a clip recorded in Slack
    size = file.get("size")
    return Attachment(
        kind,
        _url(file),
        str(file.get("name") or file.get("title") or ""),
        mime,
        size if isinstance(size, int) else None,
    )


async def slack_download(
    attachment: Attachment,
    max_bytes: int,
    *,
    bot_token: str,
    api_hosts: Iterable[str],
    proxy: str | None = None,
) -> bytes:
    """The bytes of ``attachment``, fetched with the bot token (through ``proxy``, the
    channel's ``proxy:``), at most ``max_bytes``."""
    if attachment.size is not None and attachment.size > max_bytes:
        raise TooLarge(attachment.size, max_bytes)
    host = urlsplit(attachment.ref).hostname or ""
    if host not in FILE_HOSTS and host not in set(api_hosts):
        raise DownloadError("the file is not on Slack's file server")
    body, content_type = await fetch_capped(
        attachment.ref, max_bytes, headers={"Authorization": f"Bearer {bot_token}"}, proxy=proxy
    )
    if content_type.startswith("text/html") and not attachment.mime_type.startswith("text/html"):
        raise DownloadError("Slack sent its sign-in page instead (does the app have files:read?)")
    return body


__all__ = ["FILE_HOSTS", "slack_attachments", "slack_download"]
