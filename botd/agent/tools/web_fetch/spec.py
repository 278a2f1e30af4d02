"""The ``web_fetch`` tool's spec: its settings are ``agent.web_fetch`` (what it may reach, how
much it reads, how long it waits), it needs the ``web`` extra to turn pages into text, and its
module (with httpx) is imported only when a run is offered it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....config.schema import WebFetchSection
from ..registry import ToolDeps, ToolSpec

if TYPE_CHECKING:
    from ..base import Tool

__all__ = ["SPEC"]


def _web_fetch(deps: ToolDeps) -> Tool:
    from .tool import WebFetchTool  # httpx: only when a run is offered the tool

    section = deps.section
    assert isinstance(section, WebFetchSection)
    return WebFetchTool(
        allow_hosts=section.allow_hosts,
        max_bytes=section.max_bytes,
        max_chars=section.max_chars,
        timeout=section.timeout,
        sandbox=deps.sandbox,
        missing=SPEC.missing,  # the extra could have gone since the config was checked
    )


SPEC = ToolSpec(
    name="web_fetch",
    factory=_web_fetch,
    section="agent.web_fetch",
    requirement="botd[web]",
    modules=("markdownify", "bs4"),
)
