"""The ``web_search`` tool: the model searches the web through the service ``agent.web_search``
configures and reads the results as numbered lines: title, URL, snippet.

The request goes through ``botd.net.fetch``, as ``web_fetch``'s do: the service's address must
be public (after DNS, and on every redirect) unless ``allow_private`` lets its configured
host be a loopback or private one; the answer is read within ``max_bytes`` and ``timeout``;
the key goes to the service's own origin only. At most ``max_results`` results are given,
each field cut (``providers``). The results reach the model inside the untrusted marker
(``botd.agent.tools.untrusted``): a snippet is text anyone on the web wrote.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from ....config.schema import WebSearchSection
from ....net.fetch import FetchFailed, fetch
from ...types import ToolDefinition
from ..base import ToolContext, ToolOutput
from .providers import numbered, provider_for

__all__ = ["WebSearchTool"]

QUERY_CHARS = 400
"""The longest query (Brave's own limit)."""

_DESCRIPTION = (
    "Search the web. Gives numbered results: each a title, its URL and a short snippet. "
    "Read a result's page with web_fetch when it is offered."
)

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": QUERY_CHARS,
            "description": "What to search for, as you would type it into a search engine.",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}


def _error(text: str) -> ToolOutput:
    return ToolOutput(text=text, is_error=True, details={"status": "error", "error": text})


class WebSearchTool:
    """The ``web_search`` tool (see the module docstring)."""

    untrusted = True
    """Its results are content from outside (``tools.untrusted``)."""

    def __init__(self, section: WebSearchSection) -> None:
        self._section = section
        self._provider = provider_for(section)
        self.timeout: float | None = section.timeout + 5.0
        self.spec = ToolDefinition(
            name="web_search", description=_DESCRIPTION, input_schema=_SCHEMA
        )

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        query = " ".join(str(args.get("query", "")).split())
        if not query:
            return _error("the query is empty")
        section = self._section
        request = self._provider.request(query, section.max_results)
        host = urlsplit(request.url).hostname or ""
        try:
            fetched = await fetch(
                request.url,
                allow_hosts=[host] if section.allow_private else [],
                max_bytes=section.max_bytes,
                timeout=section.timeout,
                headers=request.headers,
                allowed_by="agent.web_search.allow_private",
            )
        except FetchFailed as exc:
            return _error(f"the search failed: {exc}")
        try:
            answer = json.loads(fetched.body)
            results = self._provider.results(answer)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            return _error(f"the search service's answer could not be read: {exc}")
        shown = results[: section.max_results]
        return ToolOutput(
            text=numbered(query, shown),
            details={"status": "ok", "provider": self._provider.name, "results": len(shown)},
            untrusted_from=f"web search results from {self._provider.name}",
        )
