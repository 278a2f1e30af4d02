"""filechat: a toy chat platform kept in a spool directory, as a separate distribution.

People write to ``<spool>/inbox.jsonl`` (one JSON object a line: ``id``, ``chat``, ``sender``,
``text``); the bot answers in ``<spool>/outbox.jsonl`` (``chat``, ``text``). A chat named
``dm-<user>`` is a direct chat with that user, ``room-<name>`` a group. Its markup is its
own: strong text in capitals, emphasis between slashes, a link as ``label <url>``
(``FilechatMarkup``). The package registers its ``ChannelSpec`` under the ``botd.channels``
entry point, with everything botd's core asks a platform: section, factory, chat kinds,
target form and doctor probe; its adapter's capabilities name its renderer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from markdown_it.tree import SyntaxTreeNode

from botd.channels.base import InboundSink, SendScope
from botd.channels.registry import ChannelContext, ChannelSpec
from botd.chat import Capabilities, ChatKind, InboundMessage, MessageRef, Target, TargetForm
from botd.config import ChatChannelSection
from botd.text.markup import MarkupWriter, Renderer

if TYPE_CHECKING:
    import httpx

    from botd.ops.doctor.checks import Check

__all__ = ["MARKUP", "SPEC", "FilechatAdapter", "FilechatMarkup", "FilechatSection"]

POLL = 0.05
"""How often the adapter looks for new lines in the inbox (the toy platform's own pace)."""


class _Writer(MarkupWriter):
    markup = True

    def emphasised(self, kind: str, inner: str) -> str:
        return inner.upper() if kind == "strong" else f"/{inner}/"

    def hyperlink(self, node: SyntaxTreeNode, href: str, shown: str, label: str, same: bool) -> str:
        return f"<{href}>" if same else f"{label} <{href}>"


class FilechatMarkup(Renderer):
    """filechat's markup (see the module docstring), on botd's shared Markdown parse."""

    def render(self, markdown: str) -> str:
        return _Writer().document(markdown)


MARKUP = FilechatMarkup()


class FilechatSection(ChatChannelSection):
    platform_text_limit = 1000
    spool: str


class FilechatAdapter:
    """Reads the inbox file from where it left off; appends answers to the outbox file."""

    name = "filechat"
    capabilities = Capabilities(text_limit=1000, markup=MARKUP, can_edit=False)

    def __init__(self, spool: Path, account_id: str) -> None:
        self._spool = spool
        self._account = account_id
        self._task: asyncio.Task[None] | None = None
        self._sent = 0

    async def start(self, sink: InboundSink) -> None:
        self._task = asyncio.create_task(self._read(sink))

    async def _read(self, sink: InboundSink) -> None:
        inbox = self._spool / "inbox.jsonl"
        offset = 0
        while True:
            text = inbox.read_text(encoding="utf-8") if inbox.exists() else ""
            end = text.rfind("\n") + 1
            for line in text[offset:end].splitlines():
                note = json.loads(line)
                chat = str(note["chat"])
                await sink(
                    InboundMessage(
                        channel=self.name,
                        chat_id=chat,
                        sender_id=str(note["sender"]),
                        text=str(note["text"]),
                        message_id=str(note["id"]),
                        conversation_key=f"filechat:{self._account}:{chat}",
                        account_id=self._account,
                        is_direct=chat.startswith("dm-"),
                        mentions_bot=True,
                        target=Target(self.name, chat, self._account),
                    )
                )
            offset = end
            await asyncio.sleep(POLL)

    async def stop_inbound(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def stop(self) -> None:
        await self.stop_inbound()

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        refs = []
        with (self._spool / "outbox.jsonl").open("a", encoding="utf-8") as out:
            for chunk in MARKUP.chunks(markdown, self.capabilities.text_limit):
                out.write(json.dumps({"chat": target.chat_id, "text": chunk.text}) + "\n")
                self._sent += 1
                refs.append(MessageRef(target, str(self._sent)))
        return refs

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        return await self.send(ref.target, markdown)

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        return None

    async def react(self, ref: MessageRef, emoji: str) -> None:
        return None

    async def typing(self, target: Target) -> None:
        return None


def _factory(section: FilechatSection, context: ChannelContext) -> FilechatAdapter:
    return FilechatAdapter(Path(section.spool), section.account)


def _chat_kind(chat_id: str) -> tuple[ChatKind, str | None]:
    if chat_id.startswith("dm-"):
        return "direct", chat_id.removeprefix("dm-")
    return ("group", None) if chat_id.startswith("room-") else ("unknown", None)


def _normalize(target: str) -> str:
    """``filechat:<chat>``, lowercased; ``fc:`` is accepted for ``filechat:``."""
    chat = re.sub(r"^(?:filechat|fc):", "", target.strip(), flags=re.IGNORECASE).strip()
    return f"filechat:{chat.lower()}" if chat else ""


async def _probe(client: httpx.AsyncClient, section: FilechatSection) -> list[Check]:
    from botd.ops.doctor.checks import failed, passed

    spool = Path(section.spool)
    if spool.is_dir():
        return [passed("filechat.spool", f"filechat: spool {spool} is there")]
    return [failed("filechat.spool", f"filechat: no spool directory {spool}", "create it")]


SPEC = ChannelSpec(
    name="filechat",
    section=FilechatSection,
    factory=_factory,
    chat_kind=_chat_kind,
    targets=TargetForm(_normalize),
    probe=_probe,
)
