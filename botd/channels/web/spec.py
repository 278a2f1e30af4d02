"""The web channel's spec: no ``channels:`` section of its own (``web.enabled`` turns it on:
``botd.config.schema.WebSection``), its adapter factory, its chats (each a browser's
conversation, the operator's direct chat) and their conversation keys (``web:<id>``)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ...chat import ChatKind
from ...config.schema import ChannelSection, DeliveryMode
from ..base import ChannelAdapter
from ..registry import ChannelContext, ChannelSpec

if TYPE_CHECKING:
    import httpx

    from ...ops.doctor.checks import Check

__all__ = ["CONVERSATION_ID", "SPEC", "WebChannelSection", "chat_kind", "web_conversation_key"]

CONVERSATION_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")
"""What a conversation id a client names must match (the page makes a random one)."""


class WebChannelSection(ChannelSection):
    """What ``web.enabled`` puts under ``channels.web``: the answer streams as an ``edit``
    preview (one message, edited as it grows)."""

    enabled: bool = False
    delivery: DeliveryMode = "edit"


def chat_kind(chat_id: str) -> tuple[ChatKind, str | None]:
    """Every web chat is the operator's direct chat."""
    return "direct", chat_id


def web_conversation_key(
    instance: str, chat_id: str, thread_id: str | None = None, *, dm_user: str | None = None
) -> str:
    """``<instance>:<conversation id>``: ``web:k3f…``, one conversation per browser's id."""
    return f"{instance}:{chat_id}"


def _adapter(section: WebChannelSection, context: ChannelContext) -> ChannelAdapter:
    from .adapter import WebChatAdapter

    return WebChatAdapter(channel=context.instance_name(SPEC.name), said=context.editor_sessions)


async def _probe(client: httpx.AsyncClient, section: WebChannelSection) -> list[Check]:
    """Nothing to reach: the page comes to botd."""
    return []


SPEC = ChannelSpec(
    name="web",
    section=WebChannelSection,
    factory=_adapter,
    chat_kind=chat_kind,
    conversation_key=web_conversation_key,
    probe=_probe,
)
