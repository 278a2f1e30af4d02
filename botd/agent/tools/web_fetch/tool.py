"""The ``web_fetch`` tool: the model reads a web page or text file by URL.

Pages come back as markdown (scripts, styles and other non-content elements removed), other
text as it is, both cut at a character cap that the result states. Only public addresses are
fetched unless the operator allowed a host (``botd.net.fetch`` does the refusing, after DNS and on
every redirect). Anything that is not text is an error result naming its type.

A page is parsed in a reading worker (``botd.media.sandbox``, the one that reads the files
users send, in a lane of its own so that it never waits behind their documents, shared fairly
between conversations): a large or hostile page costs a process of its own within a time, CPU
and memory budget, never the event loop or the thread pool DNS lookups use.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from ....media.sandbox import Budget, ReadFailed, Sandbox
from ....net.fetch import Fetched, FetchFailed, fetch
from ...types import ToolDefinition
from ..base import ToolContext, ToolOutput

_DESCRIPTION = (
    "Fetch a web page or text file by its http(s) URL and read it as text (pages are turned "
    "into markdown). Only public addresses can be fetched. Long pages are cut; the result "
    "says where."
)

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "minLength": 1, "description": "The http or https URL."},
    },
    "required": ["url"],
    "additionalProperties": False,
}

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/x-yaml",
        "application/yaml",
        "application/toml",
        "application/x-ndjson",
    }
)


def _error(text: str) -> ToolOutput:
    return ToolOutput(text=text, is_error=True, details={"status": "error", "error": text})


def _is_text(content_type: str) -> bool:
    return (
        content_type.startswith("text/")
        or content_type in _TEXT_TYPES
        or content_type.endswith(("+json", "+xml"))
    )


def _looks_like_html(body: bytes) -> bool:
    head = body[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html")) or b"<body" in head


def _plain_text(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", errors="replace")


def _installed() -> str | None:
    return None


class WebFetchTool:
    """The ``web_fetch`` tool (see the module docstring)."""

    def __init__(
        self,
        *,
        allow_hosts: Collection[str] = (),
        max_bytes: int = 2_000_000,
        max_chars: int = 20_000,
        timeout: float = 20.0,
        read_timeout: float | None = None,
        sandbox: Sandbox | None = None,
        missing: Callable[[], str | None] = _installed,
    ) -> None:
        """``missing``: what to install before a page can be read (None: ready), asked at
        each call (the spec's ``ToolSpec.missing``)."""
        self._missing = missing
        self._allow_hosts = tuple(allow_hosts)
        self._sandbox = sandbox or Sandbox()
        self._max_bytes = max_bytes
        self._max_chars = max_chars
        self._fetch_timeout = timeout
        self._read_timeout = timeout if read_timeout is None else read_timeout
        """The parsing's own budget (the fetch's timeout unless given), past which its
        worker is killed."""
        self.timeout: float | None = timeout + self._read_timeout + 10.0
        self.spec = ToolDefinition(name="web_fetch", description=_DESCRIPTION, input_schema=_SCHEMA)

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        missing = self._missing()
        if missing is not None:
            return _error(missing)
        url = str(args.get("url", "")).strip()
        try:
            fetched = await fetch(
                url,
                allow_hosts=self._allow_hosts,
                max_bytes=self._max_bytes,
                timeout=self._fetch_timeout,
            )
        except FetchFailed as exc:
            return _error(str(exc))
        return await self._readable(fetched, context.conversation_key)

    async def _readable(self, fetched: Fetched, conversation: str) -> ToolOutput:
        kind = fetched.content_type
        title = ""
        if kind in _HTML_TYPES or (not kind and _looks_like_html(fetched.body)):
            try:
                title, text = await self._sandbox.page_markdown(
                    fetched.body,
                    fetched.charset,
                    Budget.of(self._read_timeout),
                    conversation=conversation,
                )
            except ReadFailed as exc:
                return _error(f"{fetched.url} could not be read: {exc}")
        elif _is_text(kind) or not kind:
            text = _plain_text(fetched.body, fetched.charset)
        else:
            return _error(f"{fetched.url} is {kind}, not a page or text web_fetch can read")
        total = len(text)
        cut = total > self._max_chars
        if cut:
            text = text[: self._max_chars]
        lines = [f"URL: {fetched.url}"]
        if title:
            lines.append(f"Title: {title}")
        lines.append(f"Content-Type: {kind or 'unknown'}")
        if cut:
            lines.append(f"(Showing the first {self._max_chars:,} of {total:,} characters.)")
        body = "\n".join(lines) + "\n\n" + text
        details = {"status": "ok", "url": fetched.url, "chars": total, "truncated": cut}
        return ToolOutput(text=body, details=details)
