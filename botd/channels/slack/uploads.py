"""Uploads to Slack with ``files_upload_v2``: the SDK asks for an upload URL
(``files.getUploadURLExternal``), posts the bytes there and shares the file in the channel
(``files.completeUploadExternal``) with the caption as its ``initial_comment``.

The three steps are one call here: when the bytes cannot be posted (a 5xx of the upload URL)
the SDK raises a request error, which is retryable; a file whose upload was never completed
is not shared, so a retry shows the file once. Slack takes files of up to 1 GB.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slack_sdk.errors import SlackRequestError

from ...chat import MessageRef, Target
from ..base import OutboundFile

if TYPE_CHECKING:
    from .adapter import SlackAdapter

UPLOAD_LIMIT = 1024 * 1024 * 1024
METHOD = "files_upload_v2"


async def send_file(
    adapter: SlackAdapter, target: Target, file: OutboundFile, caption: str
) -> list[MessageRef]:
    """Upload ``file`` to ``target``'s channel (and thread); one ref named by the file id."""
    from .errors import SlackError

    if len(file.data) > UPLOAD_LIMIT:
        raise SlackError(METHOD, f"file_too_large ({file.filename}: {len(file.data)} bytes)")
    comments = adapter._render(caption) if caption.strip() else []
    thread_ts = adapter._thread_for(target)
    try:
        response = await adapter._call(
            METHOD,
            adapter.client.files_upload_v2,
            channel=target.chat_id,
            content=file.data,
            filename=file.filename,
            title=file.filename,
            initial_comment=comments[0] if comments else None,
            thread_ts=thread_ts,
        )
    except SlackRequestError as exc:
        raise SlackError(METHOD, str(exc), retryable=True) from exc
    posted_to = Target("slack", target.chat_id, target.account_id, thread_ts)
    files = response.get("files") or []
    file_id = str(files[0].get("id", "")) if files and isinstance(files[0], dict) else ""
    return [MessageRef(posted_to, file_id)]


__all__ = ["UPLOAD_LIMIT", "send_file"]
