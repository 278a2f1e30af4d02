"""Messages shared into a Slack message ("Share message"): each reaches the model as a
forward, after the sharer's own words.

Slack sends the shared message as an attachment of the sharing one (``is_msg_unfurl`` or
``is_share``) with its text, author and ``ts``; each becomes ``[forwarded from <author>,
<day>] <text>`` (``botd.speakers.forwarded``: its lines escaped, so it can forge no label).
A link preview (an unfurl of a web page) is no shared message and is left out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from ...speakers import forwarded, speaker

__all__ = ["shared_messages"]


async def shared_messages(
    event: dict[str, Any], name_of: Callable[[str, str], Awaitable[str]]
) -> str:
    """The messages ``event`` shares, each as a forward, one after another ("" for none).
    ``name_of(user, brought)`` names an author (``SenderNames.of``)."""
    said: list[str] = []
    for item in event.get("attachments") or ():
        if not isinstance(item, dict) or not (item.get("is_msg_unfurl") or item.get("is_share")):
            continue
        text = str(item.get("text") or item.get("fallback") or "")
        author = str(item.get("author_id") or "")
        if author:
            brought = str(item.get("author_name") or item.get("author_subname") or "")
            origin = speaker(await name_of(author, brought), author)
        else:
            origin = f"#{item.get('channel_name') or item.get('channel_id') or 'a channel'}"
        try:
            day = f"{datetime.fromtimestamp(float(item.get('ts') or ''), UTC):%Y-%m-%d}"
        except (TypeError, ValueError, OverflowError):
            day = ""
        said.append(forwarded(origin, day, text))
    return " ".join(said)
