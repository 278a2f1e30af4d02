"""Talking to one MCP server through the official SDK: connecting, listing, converting.

The SDK (PyPI ``mcp``, the extra ``botd[mcp]``) is imported here only, and only when a
server is connected, so a botd without MCP servers never loads it. ``connect`` enters a
connected ``mcp.Client`` on an exit stack: a stdio server's process is started then and
stopped (stdin closed, then terminated, then killed) when the stack closes.
"""

from __future__ import annotations

import importlib.util
import json
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from ...config.schema import McpServerSection
from ...events import ImageContent
from ..tools import ToolOutput

if TYPE_CHECKING:
    from mcp import Client

__all__ = [
    "INSTALL_HINT",
    "MAX_RESULT_CHARS",
    "McpUnavailable",
    "connect",
    "describe_error",
    "list_tools",
    "require_sdk",
    "to_output",
]

INSTALL_HINT = "pip install 'botd[mcp]'"
MAX_RESULT_CHARS = 100_000
"""Text of one tool result beyond this is cut (with a note), to spare the model's context."""
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
"""Image types the model APIs take; others are named in the text instead."""
_LIST_PAGES = 100
"""Pages of ``tools/list`` read at most (a server whose cursor never ends cannot hang us)."""


class McpUnavailable(RuntimeError):
    """MCP servers are configured but the MCP SDK is not installed."""


def require_sdk() -> None:
    """Raise ``McpUnavailable`` naming the extra when the MCP SDK is missing."""
    if importlib.util.find_spec("mcp") is None:
        raise McpUnavailable(
            f"agent.mcp_servers is configured but the MCP SDK is not installed: {INSTALL_HINT}"
        )


async def connect(stack: AsyncExitStack, section: McpServerSection) -> Client:
    """A connected client for ``section``'s server, closed with ``stack``."""
    require_sdk()
    from mcp import Client, StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    if section.url is not None:
        import httpx2

        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=dict(section.headers),
                timeout=httpx2.Timeout(30.0, read=300.0),
            )
        )
        # The transport's own connection, not a cache of answers: every listing is fresh.
        client = Client(streamable_http_client(section.url, http_client=http), cache=None)
    else:
        assert section.command is not None  # the config allows nothing else
        params = StdioServerParameters(
            command=section.command,
            args=list(section.args),
            env=dict(section.env) or None,
            cwd=section.cwd,
        )
        client = Client(params, cache=None)
    return await stack.enter_async_context(client)


async def list_tools(client: Client) -> list[Any]:
    """Every tool the server lists (``mcp.types.Tool``), following its pages."""
    tools: list[Any] = []
    cursor: str | None = None
    for _ in range(_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def describe_error(exc: BaseException) -> str:
    """One line for a failure the SDK raised (its own errors carry a code and a message)."""
    # A task group's failure wraps the one that matters.
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return describe_error(exc.exceptions[0])
    message = getattr(exc, "message", None)
    if not isinstance(message, str):
        message = str(exc)
    text = " ".join(message.split())
    return text or type(exc).__name__


def to_output(result: Any) -> ToolOutput:
    """A ``CallToolResult`` as the model reads it: text as text, images as image blocks,
    anything else named in the text; ``isError`` makes it an error result."""
    texts: list[str] = []
    images: list[ImageContent] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            texts.append(block.text)
        elif kind == "image" and block.mime_type in IMAGE_TYPES:
            images.append(ImageContent(mime_type=block.mime_type, data=block.data))
        elif kind in ("image", "audio"):
            texts.append(f"[{kind} of type {block.mime_type} left out]")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            texts.append(text if isinstance(text, str) else f"[resource {resource.uri} left out]")
        elif kind == "resource_link":
            texts.append(f"[resource: {block.uri}]")
        else:
            texts.append(f"[{kind or 'unknown'} content left out]")
    if not texts and result.structured_content is not None:
        texts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(texts)
    if len(text) > MAX_RESULT_CHARS:
        cut = len(text) - MAX_RESULT_CHARS
        text = f"{text[:MAX_RESULT_CHARS]}\n[{cut} more characters cut]"
    if not text and not images:
        text = "(the tool returned nothing)"
    return ToolOutput(
        text=text,
        is_error=bool(result.is_error),
        details={"status": "error" if result.is_error else "ok"},
        images=tuple(images),
    )
