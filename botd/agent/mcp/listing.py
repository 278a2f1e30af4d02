"""A server's tool listings, checked tool by tool before the MCP SDK reads them.

The SDK validates a ``tools/list`` result as a whole: one tool it refuses (an input schema
whose ``type`` is not ``object``, a malformed field) fails the listing, and with it every
tool of the server, its periodic check and even calls (the SDK lists the tools again to
check a result it does not know the tool of). ``checked_listings`` wraps a transport: it
notes the ids of the ``tools/list`` requests botd sends and, in each answer, checks every
listed tool on its own against the SDK's rules for the connection's protocol version. A
tool that fails is left out of the answer, with one warning naming the server, the tool
and why; the SDK then reads the rest as an ordinary listing (its own per-tool state, like
output schemas, included). Tools the SDK takes but botd does not (an input schema that is no
valid JSON Schema) are left out later, by the manager.

Like ``client``, this module imports the SDK: it is imported only when a server is connected.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Self

import anyio
from mcp.client import Transport
from mcp.shared.message import SessionMessage
from mcp.types import Tool
from mcp.types.jsonrpc import JSONRPCError, JSONRPCRequest, JSONRPCResponse
from mcp.types.methods import SERVER_RESULTS, validate_server_result
from pydantic import ValidationError

__all__ = ["checked_listings"]

log = logging.getLogger(__name__)

_LIST = "tools/list"


@asynccontextmanager
async def checked_listings(
    transport: Transport, server: str, version: Callable[[], str | None]
) -> AsyncIterator[tuple[_CheckedReads, _NotedWrites]]:
    """``transport``, its ``tools/list`` answers checked tool by tool (see the module
    docstring); ``server`` names the server in warnings, ``version`` gives the protocol
    version the connection agreed on (None before it did)."""
    async with transport as (read, write):
        pending: set[str | int] = set()
        check = _ToolCheck(server, version)
        yield _CheckedReads(read, pending, check), _NotedWrites(write, pending)


class _ToolCheck:
    """Whether each listed tool is one the SDK takes; warns once per tool and reason."""

    def __init__(self, server: str, version: Callable[[], str | None]) -> None:
        self._server = server
        self._version = version
        self._warned: set[tuple[str, str]] = set()

    def result(self, result: dict[str, Any]) -> dict[str, Any]:
        """``result`` without the tools the SDK would refuse (itself when it keeps all)."""
        tools = result.get("tools")
        if not isinstance(tools, list):
            return result  # the SDK's own error says what is wrong
        version = self._version()
        if version is not None and (_LIST, version) not in SERVER_RESULTS:
            version = None  # a version the SDK has no rules of its own for
        if _refusal({**result, "tools": []}, version) is not None:
            return result  # wrong whatever the tools: the SDK's own error says what
        kept = [tool for tool in tools if self._takes(tool, result, version)]
        return result if len(kept) == len(tools) else {**result, "tools": kept}

    def _takes(self, tool: Any, result: dict[str, Any], version: str | None) -> bool:
        why = _tool_refusal(tool) or _refusal({**result, "tools": [tool]}, version)
        if why is None:
            return True
        name = tool.get("name") if isinstance(tool, dict) else None
        shown = name if isinstance(name, str) else repr(tool)[:80]
        if (shown, why) not in self._warned:
            self._warned.add((shown, why))
            log.warning("MCP server %s: tool %r left out: %s", self._server, shown, why)
        return False


def _tool_refusal(tool: Any) -> str | None:
    """What the MCP specification forbids a listed tool in every version, in plain words."""
    if not isinstance(tool, dict):
        return "it is not an object"
    schema = tool.get("inputSchema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        kind = schema.get("type") if isinstance(schema, dict) else type(schema).__name__
        return f"its input schema is not an object schema (type {kind!r})"
    return None


def _refusal(result: dict[str, Any], version: str | None) -> str | None:
    """Why the SDK would refuse ``result`` (a listing of one tool or none), if it would:
    the rules of the agreed ``version`` and the model it reads the tools into."""
    try:
        if version is not None:
            validate_server_result(_LIST, version, result)
        for tool in result["tools"]:
            Tool.model_validate(tool, by_name=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first["loc"][2:] if first["loc"][:2] == ("tools", 0) else first["loc"]
        where = ".".join(str(part) for part in loc)
        return f"the MCP SDK refuses it: {where}: {first['msg']}"
    return None


class _Wrapped:
    """One of the transport's streams, wrapped: closing it closes the stream inside, and
    it is its own async context (as the SDK's streams are)."""

    _inner: Any

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _CheckedReads(_Wrapped):
    """The transport's read stream, with ``tools/list`` answers checked."""

    def __init__(self, inner: Any, pending: set[str | int], check: _ToolCheck) -> None:
        self._inner = inner
        self._pending = pending
        self._check = check

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        item: SessionMessage | Exception = await self._inner.receive()
        if isinstance(item, Exception):
            return item
        message = item.message
        if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id in self._pending:
            self._pending.discard(message.id)
            if isinstance(message, JSONRPCResponse):
                result = self._check.result(message.result)
                if result is not message.result:
                    checked = message.model_copy(update={"result": result})
                    return dataclasses.replace(item, message=checked)
        return item

    def __aiter__(self) -> _CheckedReads:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class _NotedWrites(_Wrapped):
    """The transport's write stream, noting the ids of ``tools/list`` requests."""

    def __init__(self, inner: Any, pending: set[str | int]) -> None:
        self._inner = inner
        self._pending = pending

    async def send(self, item: SessionMessage, /) -> None:
        message = item.message
        if isinstance(message, JSONRPCRequest) and message.method == _LIST:
            self._pending.add(message.id)
        await self._inner.send(item)
