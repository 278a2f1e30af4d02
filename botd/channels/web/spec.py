"""The web channel's spec: no ``channels:`` section of its own (``web.enabled`` turns it on:
``botd.config.schema.WebSection``), its adapter factory, its chats (each a browser's
conversation, the operator's direct chat) and their conversation keys (``web:<id>``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import model_validator

from ...config.schema import ChannelSection, DeliveryMode
from ..base import ChannelAdapter
from ..registry import ChannelContext, ChannelSpec
from . import targets

if TYPE_CHECKING:
    import httpx

    from ...ops.doctor.checks import Check

__all__ = ["SPEC", "WebChannelSection"]


class WebChannelSection(ChannelSection):
    """What ``web.enabled`` puts under ``channels.web``: the answer streams as an ``edit``
    preview (one message, edited as it grows)."""

    enabled: bool = False
    delivery: DeliveryMode = "edit"

    @model_validator(mode="after")
    def _not_another_instance(self) -> WebChannelSection:
        if self.platform is not None:
            raise ValueError("the web chat is not set here: it runs when web.enabled is true")
        return self


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
    chat_kind=targets.chat_kind,
    conversation_key=targets.web_conversation_key,
    probe=_probe,
)
