"""The ``message`` tool's spec: no settings of its own (its targets are ``agent.message_targets``,
decided by the refusal it is given), built for each run with the channels botd runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..registry import ToolDeps, ToolSpec

if TYPE_CHECKING:
    from ..base import Tool

__all__ = ["SPEC"]


def _message(deps: ToolDeps) -> Tool:
    from .tool import MessageTool

    return MessageTool(
        deps.send,
        refusal=deps.refusal,
        send_media=deps.send_media,
        send_buttons=deps.send_buttons,
        channels=deps.config.channels.enabled(),
    )


SPEC = ToolSpec(name="message", factory=_message)
