"""The ``web_search`` tool's spec: its settings are ``agent.web_search`` (which service, where,
its key, how many results), it needs nothing beyond botd itself, and its module is imported
only when a run is offered it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....config.schema import WebSearchSection
from ..registry import ToolDeps, ToolSpec

if TYPE_CHECKING:
    from ..base import Tool

__all__ = ["SPEC"]


def _web_search(deps: ToolDeps) -> Tool:
    from .tool import WebSearchTool  # httpx: only when a run is offered the tool

    section = deps.section
    assert isinstance(section, WebSearchSection)  # the config needs it when the tool is listed
    return WebSearchTool(section)


SPEC = ToolSpec(name="web_search", factory=_web_search, section="agent.web_search")
