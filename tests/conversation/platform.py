"""A platform at the edge of a conversation's tests: every post in order, and sends that
go through, are refused, fail with a 5xx or hang, as a test scripts them."""

from __future__ import annotations

import asyncio
from collections import deque

from botd.channels.base import SendScope
from botd.channels.errors import ChannelError
from botd.chat import Capabilities, MessageRef, Target
from botd.text.markup import PLAIN
from tests.support.text_only_adapter import TextOnlyAdapter


class Platform:
    """What the chat shows: every post, in order, whichever process made it."""

    def __init__(self) -> None:
        self.posts: list[str] = []
        self.script: deque[str] = deque()
        """How the next sends go: ``ok``, ``refuse``, ``5xx`` (then ok), ``hang``."""
        self.gate = asyncio.Event()
        self.hanging = 0


class Edge(TextOnlyAdapter):
    """One process's adapter to the platform; dead once its process crashed."""

    name = "console"
    capabilities = Capabilities(text_limit=100_000, markup=PLAIN)

    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self.alive = True

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
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
