"""The part of ``ChannelAdapter`` a test's text-only edge adapter does not use: edits keep the
message, deletes, reactions and typing do nothing, files are refused as the console refuses
them. A test adapter subclasses it and writes ``send`` (and ``start``/``stop`` if it needs)."""

from __future__ import annotations

from botd.channels.base import InboundSink, OutboundFile, SendScope
from botd.channels.errors import ChannelError
from botd.chat import Attachment, DownloadError, MessageRef, Target


class TextOnlyAdapter:
    name: str

    async def start(self, sink: InboundSink) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        return [ref]

    async def stop_inbound(self) -> None:
        return None

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        return None

    async def send_file(
        self,
        target: Target,
        file: OutboundFile,
        caption: str = "",
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        raise ChannelError(f"{self.name}: file uploads are not supported")

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        raise DownloadError(f"files cannot be fetched from {self.name}")

    async def react(self, ref: MessageRef, emoji: str) -> None:
        return None

    async def typing(self, target: Target) -> None:
        return None
