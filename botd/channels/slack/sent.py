"""Reply pieces on Slack, tagged and found again.

Every message of a reply piece is posted with message metadata naming it
(``{"event_type": "botd_reply", "event_payload": {"piece": <MessageKey.token>}}``). When a
crash came between a piece's send and its sent mark, nobody knows whether Slack has it: before
posting it again the adapter reads the channel (``conversations.history``) or the thread
(``conversations.replies``) from a little before the piece was written, with
``include_all_metadata``, and takes a message tagged with its key for the one posted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from ...chat import MessageKey

EVENT_TYPE = "botd_reply"
LOOKBACK = 120.0
"""Seconds before a piece was written that the look-up starts at: the clocks of this host and
Slack's may differ a little."""
PAGE = 200
PAGES = 10
"""At most this many pages of ``PAGE`` messages are read: the look-up is bounded, a piece
posted in a busier channel than that since it was written is taken for not posted."""

Call = Callable[..., Awaitable[AsyncSlackResponse]]
"""The Web API call (``WebAPI.call``: 429s waited out, failures as ``SlackError``)."""


def metadata(key: MessageKey, part: int) -> dict[str, Any]:
    """The metadata tagging message ``part`` of the piece message ``key``."""
    return {"event_type": EVENT_TYPE, "event_payload": {"piece": key.token(part)}}


async def posted_pieces(
    call: Call, client: AsyncWebClient, channel: str, thread_ts: str | None, since: float | None
) -> dict[str, str]:
    """The reply-piece messages in ``channel`` (in the thread ``thread_ts``, if any) since
    ``since`` (wall-clock seconds, None: as far as the pages go): each key's token -> ts."""
    found: dict[str, str] = {}
    args: dict[str, Any] = {"channel": channel, "include_all_metadata": True, "limit": PAGE}
    if since is not None:
        args["oldest"] = f"{max(0.0, since - LOOKBACK):.6f}"
    method, func = "conversations.history", client.conversations_history
    if thread_ts is not None:
        method, args["ts"] = "conversations.replies", thread_ts
        func = client.conversations_replies  # type: ignore[assignment]
    for _ in range(PAGES):
        response = await call(method, func, **args)
        for message in response.get("messages") or []:
            token = _token(message)
            if token is not None and "ts" in message:
                found[token] = str(message["ts"])
        cursor = (response.get("response_metadata") or {}).get("next_cursor")
        if not response.get("has_more") or not cursor:
            break
        args["cursor"] = cursor
    return found


def _token(message: Any) -> str | None:
    if not isinstance(message, dict):
        return None
    meta = message.get("metadata")
    if not isinstance(meta, dict) or meta.get("event_type") != EVENT_TYPE:
        return None
    payload = meta.get("event_payload")
    piece = payload.get("piece") if isinstance(payload, dict) else None
    return piece if isinstance(piece, str) else None


__all__ = ["EVENT_TYPE", "LOOKBACK", "metadata", "posted_pieces"]
