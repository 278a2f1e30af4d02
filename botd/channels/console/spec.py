"""The console channel's spec: ``channels.console`` (just ``enabled``), its adapter factory,
its one chat (the operator's direct chat) and its probe, which has nothing to reach."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...chat import ChatKind
from ...config.schema import ChannelSection
from ..base import ChannelAdapter
from ..registry import ChannelContext, ChannelSpec, InitQuestions

if TYPE_CHECKING:
    import httpx

    from ...ops.doctor.checks import Check

__all__ = ["SPEC", "ConsoleSection"]


class ConsoleSection(ChannelSection):
    enabled: bool = False


def _adapter(section: ConsoleSection, context: ChannelContext) -> ChannelAdapter:
    from .adapter import ConsoleAdapter

    return ConsoleAdapter(on_end_of_input=context.on_end_of_input, model=context.model)


async def _probe(client: httpx.AsyncClient, section: ConsoleSection) -> list[Check]:
    """Nothing to reach: the console is the terminal botd runs in."""
    return []


def _chat_kind(chat_id: str) -> tuple[ChatKind, str | None]:
    """The console is its operator's direct chat."""
    return "direct", chat_id


SPEC = ChannelSpec(
    name="console",
    section=ConsoleSection,
    factory=_adapter,
    chat_kind=_chat_kind,
    probe=_probe,
    local=True,
    init=InitQuestions(settings=(("enabled", "true"),), rank=3),
)
