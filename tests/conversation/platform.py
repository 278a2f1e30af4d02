"""A platform at the edge of a conversation's tests: every post in order, and sends that
go through, are refused, fail with a 5xx or hang, as a test scripts them."""

from __future__ import annotations

import asyncio
from collections import deque

from botd.channels.base import InboundSink, OutboundFile
from botd.channels.errors import ChannelError
from botd.chat import Attachment, Capabilities, DownloadError, MessageRef, Target
from botd.text.markup import PLAIN


class Platform:
    """What the chat shows: every post, in order, whichever process made it."""

    def __init__(self) -> None:
        self.posts: list[str] = []
        self.script: deque[str] = deque()
        """How the next sends go: ``ok``, ``refuse``, ``5xx`` (then ok), ``hang``."""
        self.gate = asyncio.Event()
        self.hanging = 0


class Edge:
    """One process's adapter to the platform; dead once its process crashed."""

    name = "console"
    capabilities = Capabilities(text_limit=100_000, markup=PLAIN)

    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self.alive = True

    async def start(self, sink: InboundSink) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(self, target: Target, markdown: str) -> list[MessageRef]:
        platform = self.platform
        how = platform.script.popleft() if platform.script else "ok"
        if not self.alive:
            raise ChannelError("the process is gone")
        if how == "refuse":
            raise ChannelError("Bad Request: chat not found")
        if how == "5xx":
            raise ChannelError("502 Bad Gateway", retryable=True)
        if how == "hang":
            platform.hanging += 1
            try:
                await platform.gate.wait()
            finally:
                platform.hanging -= 1
            if not self.alive:
                raise ChannelError("the process is gone")
        platform.posts.append(markdown)
        return [MessageRef(target, str(len(platform.posts)))]

    async def edit(self, ref: MessageRef, markdown: str) -> list[MessageRef]:
        return [ref]

    async def stop_inbound(self) -> None:
        return None

    async def delete(self, ref: MessageRef) -> None:
        return None

    async def send_file(
        self, target: Target, file: OutboundFile, caption: str = ""
    ) -> list[MessageRef]:
        raise ChannelError(f"{self.name}: file uploads are not supported")

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        raise DownloadError(f"files cannot be fetched from {self.name}")

    async def react(self, ref: MessageRef, emoji: str) -> None:
        return None

    async def typing(self, target: Target) -> None:
        return None
