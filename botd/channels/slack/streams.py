"""Slack's native streams (``delivery: stream``): ``SlackStreams`` shows a reply as it is
written, with ``chat.startStream``, ``chat.appendStream`` and ``chat.stopStream``.

A stream needs a thread, and outside a DM the user it answers (``recipient_user_id``,
``recipient_team_id``): the inbound side remembers, for each thread it answers in, who last
wrote there (``remember_recipient``). Streams take Markdown as it is; mass mentions are
defused there too unless allowed.
"""

from __future__ import annotations

from ...bounded import Recent
from ...chat import MessageRef, Target
from .markup import defuse_mass_mentions
from .webapi import WebAPI

__all__ = ["SlackStreams"]

_MEMORY_LIMIT = 4096


def _is_dm(channel: str) -> bool:
    """Whether the Slack channel id ``channel`` is a DM's."""
    return channel.startswith("D")


class SlackStreams:
    """The streamed replies of one Slack app (module docstring); ``channel`` is the channel
    instance the streams' refs are of."""

    def __init__(self, api: WebAPI, *, channel: str, allow_mass_mentions: bool) -> None:
        self._api = api
        self.name = channel
        self.allow_mass_mentions = allow_mass_mentions
        # "channel:thread_ts" -> (user, team) last answered there: a stream's recipient.
        self._recipients: Recent[str, tuple[str, str]] = Recent(_MEMORY_LIMIT)

    def remember_recipient(self, channel: str, thread_ts: str, user: str, team: str) -> None:
        """``user`` (of ``team``) is answered in the thread ``thread_ts`` of ``channel``."""
        self._recipients.remember(f"{channel}:{thread_ts}", (user, team))

    def can_stream(self, target: Target) -> bool:
        """A stream needs a thread, and outside a DM the user it answers (Slack's
        ``recipient_user_id``/``recipient_team_id``), known from the message answered."""
        if target.thread_id is None:
            return False
        return _is_dm(target.chat_id) or f"{target.chat_id}:{target.thread_id}" in self._recipients

    async def stream_start(self, target: Target, markdown: str) -> MessageRef:
        """``chat.startStream`` in ``target``'s thread, showing ``markdown``; the stream's ref."""
        recipient: dict[str, str] = {}
        found = self._recipients.get(f"{target.chat_id}:{target.thread_id}")
        if found is not None and not _is_dm(target.chat_id):
            user, team = found
            recipient = {"recipient_user_id": user}
            if team:
                recipient["recipient_team_id"] = team
        response = await self._api.call(
            "chat.startStream",
            self._api.client.chat_startStream,
            channel=target.chat_id,
            thread_ts=target.thread_id or "",
            markdown_text=self._streamed(markdown),
            **recipient,
        )
        posted_to = Target(self.name, target.chat_id, target.account_id, target.thread_id)
        return MessageRef(posted_to, str(response["ts"]))

    async def stream_append(self, ref: MessageRef, markdown: str) -> None:
        """``chat.appendStream``: ``markdown`` added at the end of the streamed message."""
        await self._api.call(
            "chat.appendStream",
            self._api.client.chat_appendStream,
            channel=ref.target.chat_id,
            ts=ref.message_id,
            markdown_text=self._streamed(markdown),
        )

    async def stream_stop(self, ref: MessageRef, markdown: str = "") -> None:
        """``chat.stopStream``, ``markdown`` (if any) added first: a plain message from now."""
        await self._api.call(
            "chat.stopStream",
            self._api.client.chat_stopStream,
            channel=ref.target.chat_id,
            ts=ref.message_id,
            markdown_text=self._streamed(markdown) if markdown else None,
        )

    def _streamed(self, markdown: str) -> str:
        """Streams take Markdown as it is; mass mentions are defused there too."""
        return markdown if self.allow_mass_mentions else defuse_mass_mentions(markdown)
