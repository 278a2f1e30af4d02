"""The console platform's spec: ``channels.console`` (just ``enabled``), its adapter factory,
its one chat (the operator's direct chat), the conversation key of a chat and its probe, which
has nothing to reach."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...config.schema import ChannelSection
from ..base import ChannelAdapter
from ..registry import ChannelContext, ChannelSpec, InitQuestions
from . import targets

if TYPE_CHECKING:
    import httpx

    from ...ops.doctor.checks import Check

__all__ = ["SPEC", "ConsoleSection"]


class ConsoleSection(ChannelSection):
    enabled: bool = False


def _adapter(section: ConsoleSection, context: ChannelContext) -> ChannelAdapter:
    from .adapter import ConsoleAdapter

    return ConsoleAdapter(
        channel=context.instance_name(SPEC.name),
        on_end_of_input=context.on_end_of_input,
        model=context.model,
    )


async def _probe(client: httpx.AsyncClient, section: ConsoleSection) -> list[Check]:
    """Nothing to reach: the console is the terminal botd runs in."""
    return []


SPEC = ChannelSpec(
    name="console",
    section=ConsoleSection,
    factory=_adapter,
    chat_kind=targets.chat_kind,
    conversation_key=targets.console_conversation_key,
    probe=_probe,
    local=True,
    init=InitQuestions(settings=(("enabled", "true"),), rank=3),
)
