"""Talking to one MCP server through the official SDK: connecting, listing, converting.

The SDK (PyPI ``mcp``, the extra ``botd[mcp]``) is imported here and in ``listing`` only,
and only when a server is connected, so a botd without MCP servers never loads it.
``connect`` enters a connected ``mcp.Client`` on an exit stack: a stdio server's process is
started then and stopped (stdin closed, then terminated, then killed) when the stack closes.
On Linux it is started through ``launcher``, which ends what the server started along with
it, and everything when botd dies without closing it. Its tool listings are checked tool by
tool (``listing``), so one tool the SDK refuses does not cost the server's other tools.

What a stdio server writes to its stderr is logged line by line under its name
(``mcp[files]: ...``, at most ``STDERR_LINE_CHARS`` characters a line) instead of landing
unlabelled in botd's own stderr.

The SDK turns a streamable-HTTP server's error status into one generic error ("Server
returned an error response"), whatever the status was. ``HttpRefusals`` watches the HTTP
client's answers to the requests botd posts, and ``describe_error`` adds the status the
server last refused with (``HTTP 401 Unauthorized``), which says what to fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import sys
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, TextIO

from ...config.schema import McpServerSection
from ...events import ImageContent
from ..tools.base import ToolOutput
from .launcher import check_executable, launch_command

if TYPE_CHECKING:
    from mcp import Client, StdioServerParameters

__all__ = [
    "INSTALL_HINT",
    "MAX_RESULT_CHARS",
    "HttpRefusals",
    "McpUnavailable",
    "connect",
    "describe_error",
    "list_tools",
    "require_sdk",
    "to_output",
]

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'botd[mcp]'"
STDERR_LINE_CHARS = 1000
"""A stdio server's stderr line longer than this is cut in the log."""
MAX_RESULT_CHARS = 100_000
"""Text of one tool result beyond this is cut (with a note), to spare the model's context."""
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
"""Image types the model APIs take; others are named in the text instead."""
_LIST_PAGES = 100
"""Pages of ``tools/list`` read at most (a server whose cursor never ends cannot hang us)."""


class HttpRefusals:
    """The error status of the latest answer a streamable-HTTP server gave to a POST (the
    requests that carry botd's messages), cleared by the next successful one."""

    def __init__(self) -> None:
        self.last = ""

    async def note(self, response: Any) -> None:
        """An ``httpx2`` response hook."""
        if response.request.method != "POST":
            return  # a GET for the server's own stream may be refused (405) by design
        if response.status_code >= 400:
            self.last = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
        else:
            self.last = ""


class McpUnavailable(RuntimeError):
    """MCP servers are configured but the MCP SDK is not installed."""


def require_sdk() -> None:
    """Raise ``McpUnavailable`` naming the extra when the MCP SDK is missing."""
    if importlib.util.find_spec("mcp") is None:
        raise McpUnavailable(
            f"agent.mcp_servers is configured but the MCP SDK is not installed: {INSTALL_HINT}"
        )


async def connect(
    stack: AsyncExitStack,
    section: McpServerSection,
    refusals: HttpRefusals | None = None,
    *,
    name: str = "",
) -> Client:
    """A connected client for ``section``'s server (``name``: for its stderr lines), closed
    with ``stack``; ``refusals`` hears a streamable-HTTP server's answers (see the module
    docstring)."""
    require_sdk()
    from mcp import Client
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    from .listing import checked_listings

    entered: Client | None = None

    def version() -> str | None:
        """The protocol version the connection agreed on, for the listing check."""
        return entered.protocol_version if entered is not None else None

    errlog: TextIO | None = None
    if section.url is not None:
        import httpx2

        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=dict(section.headers),
                timeout=httpx2.Timeout(30.0, read=300.0),
                event_hooks={"response": [refusals.note]} if refusals is not None else None,
            )
        )
        transport = streamable_http_client(section.url, http_client=http)
    else:
        params = _stdio_parameters(section)  # raises for a missing command, before the pipe
        errlog = await _stderr_logged(stack, name or str(section.command))
        transport = stdio_client(params, errlog=errlog)
    label = name or str(section.url or section.command)
    # The transport's own connection, not a cache of answers: every listing is fresh.
    client = Client(checked_listings(transport, label, version), cache=None)
    try:
        entered = await stack.enter_async_context(client)
    finally:
        if errlog is not None:
            errlog.close()  # the server process holds its own copy
    return entered


def _stdio_parameters(section: McpServerSection) -> StdioServerParameters:
    """How the SDK starts ``section``'s command: through the launcher on Linux, with the
    error a missing command gives raised here, since the launcher only meets it later."""
    from mcp import StdioServerParameters
    from mcp.client.stdio import get_default_environment

    assert section.command is not None  # the config allows nothing else
    command, args = section.command, list(section.args)
    if sys.platform == "linux" and sys.executable:
        # The environment the SDK gives the process, for the PATH the command is found in.
        env = get_default_environment() | dict(section.env)
        check_executable(command, env, os.fspath(section.cwd) if section.cwd else None)
        command, args = launch_command(command, args)
    return StdioServerParameters(
        command=command, args=args, env=dict(section.env) or None, cwd=section.cwd
    )


async def _stderr_logged(stack: AsyncExitStack, name: str) -> TextIO:
    """A file for a server's stderr whose lines are logged under ``name`` until the server
    closes it; the reading ends with ``stack`` at the latest."""
    read_fd, write_fd = os.pipe()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
    )

    async def relay() -> None:
        try:
            while line := await reader.readline():
                text = line.decode("utf-8", "replace").rstrip()
                if text:
                    log.info("mcp[%s]: %s", name, text[:STDERR_LINE_CHARS])
        except (ValueError, OSError) as exc:  # a line beyond the limit, a broken pipe
            log.warning("mcp[%s]: reading its stderr stopped: %s", name, exc)

    task = asyncio.create_task(relay(), name=f"mcp-stderr:{name}")

    async def stop() -> None:
        if not task.done():
            # The process is gone by now; what it wrote is read to the end, briefly.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), 1.0)
            task.cancel()
            await asyncio.wait({task})
        transport.close()

    stack.push_async_callback(stop)
    return os.fdopen(write_fd, "w", encoding="utf-8")


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


def describe_error(exc: BaseException, refusals: HttpRefusals | None = None) -> str:
    """One line for a failure the SDK raised (its own errors carry a code and a message),
    with the HTTP status the server last refused with, when there is one."""
    # A task group's failure wraps the one that matters.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    message = getattr(exc, "message", None)
    if not isinstance(message, str):
        message = str(exc)
    text = " ".join(message.split()) or type(exc).__name__
    if refusals is not None and refusals.last and refusals.last not in text:
        text = f"{text} ({refusals.last})"
    return text


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
