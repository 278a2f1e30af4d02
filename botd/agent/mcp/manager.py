"""The configured MCP servers, kept running beside the daemon, and their tools.

``McpManager.start`` starts one keeper task per server; the daemon does not wait for them
longer than ``wait_started`` allows. A keeper connects (a stdio server's process is started
then), lists the server's tools and is ``running``; it then watches the connection: a call
that failed, or a probe every ``probe_interval`` seconds (a fresh ``tools/list``), tells it
the server is gone. A server that cannot start or is gone is ``down``, with its reason
logged in one line, and connected again after a backoff delay (``RETRY_FIRST`` doubling up
to ``RETRY_CAP``, jittered), for as long as botd runs; its tools are left out of runs
meanwhile. ``close`` stops every server (a stdio server's process is stopped and waited
for) at shutdown.

States are ``starting``, ``running``, ``down`` and ``stopped``; ``health`` gives them to
``/healthz`` as components named ``mcp:<name>``.

What a server answers is content from outside: its results reach the model inside the
untrusted marker (``botd.agent.tools.untrusted``), naming the server and the tool.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack, suppress
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import jsonschema

from ...config.schema import McpServerSection
from ...retry import Backoff
from ..tools.base import Tool, ToolContext, ToolOutput, schema_validator
from ..types import ToolDefinition
from .client import HttpRefusals, connect, describe_error, list_tools, require_sdk, to_output
from .names import tool_name

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["PROBE_INTERVAL", "RETRY_CAP", "RETRY_FIRST", "McpManager", "McpTool"]

log = logging.getLogger(__name__)

RETRY_FIRST = 2.0
"""Seconds before the first reconnection of a server that failed (jitter makes it 1 to 2)."""
RETRY_CAP = 300.0
"""The longest wait between two attempts at a server that keeps failing."""
STABLE_AFTER = 60.0
"""Seconds a server must stay up before its backoff starts over: one that dies right after
every start keeps backing off instead of being restarted every few seconds."""
START_TIMEOUT = 30.0
"""Seconds connecting and listing the tools may take before the attempt counts as failed."""
PROBE_INTERVAL = 30.0
"""Seconds between two checks that an idle server still answers."""
STOP_WAIT = 10.0
"""Seconds a server gets to stop at shutdown before its keeper is cancelled."""


class McpTool:
    """One tool of an MCP server, as the agent loop calls it."""

    untrusted = True
    """Its results come from outside botd (``tools.untrusted``)."""

    def __init__(self, keeper: _Keeper, name: str, remote: str, spec: ToolDefinition) -> None:
        self.spec = spec
        self.timeout = keeper.section.timeout
        self.server = keeper.name
        self.remote_name = remote
        """The tool's name on its server."""
        self._keeper = keeper

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        return await self._keeper.call(self.remote_name, args)


class _Keeper:
    """Keeps one server connected (see the module docstring)."""

    def __init__(
        self,
        name: str,
        section: McpServerSection,
        backoff: Backoff,
        *,
        probe_interval: float,
        start_timeout: float,
    ) -> None:
        self.name = name
        self.section = section
        self.state = "stopped"
        self.reason = ""
        self.tools: list[McpTool] = []
        self.started = asyncio.Event()
        """Set once the first attempt ended, whichever way."""
        self._backoff = backoff
        self._up_since: float | None = None
        self._probe_interval = probe_interval
        self._start_timeout = start_timeout
        self._client: Client | None = None
        self._refusals = HttpRefusals()
        self._wake = asyncio.Event()
        self._closing = False
        self.task: asyncio.Task[None] | None = None

    # -- calls ------------------------------------------------------------------------------

    async def call(self, tool: str, args: dict[str, Any]) -> ToolOutput:
        client = self._client
        if client is None or self.state != "running":
            return _error(f"MCP server {self.name!r} is not running: {self.reason or 'down'}")
        try:
            result = await client.call_tool(tool, args)
        except Exception as exc:
            # Maybe the server is gone: its keeper checks now rather than at the next probe.
            self._wake.set()
            why = describe_error(exc, self._refusals)
            return _error(f"MCP server {self.name!r} failed the call: {why}")
        # What the server answered is content from outside: the model reads it marked.
        return replace(to_output(result), untrusted_from=f"MCP server {self.name}, tool {tool}")

    # -- keeping it up ----------------------------------------------------------------------

    def stop(self) -> None:
        self._closing = True
        self._wake.set()

    async def keep(self) -> None:
        while not self._closing:
            self.state = "starting"
            try:
                reason = await self._session()
            except Exception as exc:
                reason = describe_error(exc, self._refusals)
            self._client = None
            self.tools = []
            self.started.set()
            if self._closing:
                break
            if self._up_since is not None and time.monotonic() - self._up_since >= STABLE_AFTER:
                self._backoff.reset()
            self._up_since = None
            self.state, self.reason = "down", reason
            delay = self._backoff.next_delay()
            log.error(
                "MCP server %s down: %s; retry %d in %.1fs",
                self.name,
                reason,
                self._backoff.failures,
                delay,
            )
            self._wake.clear()
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
        self.state = "stopped"

    async def _session(self) -> str:
        """One connection, from start to its end; returns why it ended."""
        async with AsyncExitStack() as stack:
            async with asyncio.timeout(self._start_timeout):
                self._refusals = HttpRefusals()
                client = await connect(stack, self.section, self._refusals, name=self.name)
                listed = await list_tools(client)
            self.tools = self._tools_of(listed)
            self._client = client
            self._wake.clear()
            failures = self._backoff.failures
            self._up_since = time.monotonic()
            self.state, self.reason = "running", ""
            self.started.set()
            again = f" (up again after {failures} failed attempt(s))" if failures else ""
            log.info("MCP server %s running: %d tool(s)%s", self.name, len(self.tools), again)
            return await self._watch(client)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _watch(self, client: Client) -> str:
        """Wait until the server is gone (or botd closes); returns why it ended."""
        # Closing may have begun while it was starting (the wake-up it set is cleared).
        while not self._closing:
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._probe_interval)
            if self._closing:
                break
            self._wake.clear()
            try:
                async with asyncio.timeout(self._start_timeout):
                    await client.list_tools(cache_mode="refresh")
            except Exception as exc:
                return f"stopped answering: {describe_error(exc, self._refusals)}"
        return "stopped"

    def _tools_of(self, listed: list[Any]) -> list[McpTool]:
        wanted = self.section.tools
        tools: list[McpTool] = []
        taken: list[str] = []
        for remote in listed:
            if wanted is not None and remote.name not in wanted:
                continue
            schema = remote.input_schema or {"type": "object"}
            try:
                # Checked and compiled here, once per listing, not by every run.
                schema_validator(schema)
            except jsonschema.SchemaError as exc:
                log.warning(
                    "MCP server %s: tool %r left out: its input schema is invalid: %s",
                    self.name,
                    remote.name,
                    exc.message,
                )
                continue
            name = tool_name(self.name, remote.name, taken=taken)
            taken.append(name)
            spec = ToolDefinition(
                name=name, description=remote.description or "", input_schema=schema
            )
            tools.append(McpTool(self, name, remote.name, spec))
        if wanted is not None:
            missing = sorted(set(wanted) - {t.remote_name for t in tools})
            if missing:
                log.warning(
                    "MCP server %s does not offer %s (listed in its tools)",
                    self.name,
                    ", ".join(missing),
                )
        return tools


class McpManager:
    """Every configured MCP server, kept running (see the module docstring)."""

    def __init__(
        self,
        servers: Mapping[str, McpServerSection],
        *,
        backoff: Callable[[], Backoff] | None = None,
        probe_interval: float = PROBE_INTERVAL,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        """Raises ``McpUnavailable`` (naming ``botd[mcp]``) when servers are configured and
        the MCP SDK is not installed."""
        if servers:
            require_sdk()
        new_backoff = backoff or (lambda: Backoff(RETRY_FIRST, factor=2.0, cap=RETRY_CAP))
        self._keepers = {
            name: _Keeper(
                name,
                section,
                new_backoff(),
                probe_interval=probe_interval,
                start_timeout=start_timeout,
            )
            for name, section in servers.items()
        }
        self._clashes: set[str] = set()

    @property
    def names(self) -> list[str]:
        return list(self._keepers)

    def start(self) -> None:
        """Start every server in the background."""
        for name, keeper in self._keepers.items():
            if keeper.task is None:
                keeper.task = asyncio.create_task(keeper.keep(), name=f"mcp:{name}")

    async def wait_started(self, timeout: float) -> None:
        """Wait at most ``timeout`` seconds for every server's first attempt to end."""
        waits = [asyncio.create_task(k.started.wait()) for k in self._keepers.values()]
        if not waits:
            return
        _, slow = await asyncio.wait(waits, timeout=timeout)
        for task in slow:
            task.cancel()
        if slow:
            await asyncio.wait(slow)
            names = ", ".join(n for n, k in self._keepers.items() if not k.started.is_set())
            log.warning("MCP server(s) %s still starting; going on meanwhile", names)

    def tools(self) -> list[Tool]:
        """The tools of every running server, in the config's order. A name another server's
        tool has already (server ``a`` tool ``b__c`` and server ``a__b`` tool ``c``) is
        left out, so a run never gets two tools of one name."""
        chosen: dict[str, Tool] = {}
        for keeper in self._keepers.values():
            if keeper.state != "running":
                continue
            for tool in keeper.tools:
                name = tool.spec.name
                if name not in chosen:
                    chosen[name] = tool
                elif name not in self._clashes:
                    self._clashes.add(name)
                    log.warning(
                        "MCP server %s: tool %r left out: another server's tool is named %s",
                        keeper.name,
                        tool.remote_name,
                        name,
                    )
        return list(chosen.values())

    def states(self) -> dict[str, str]:
        return {name: keeper.state for name, keeper in self._keepers.items()}

    def down(self) -> dict[str, str]:
        """The servers not running now, each with its state (``/status``)."""
        return {name: state for name, state in self.states().items() if state != "running"}

    def health(self) -> dict[str, str | None]:
        """``/healthz`` components: ``mcp:<name>`` -> None while running, else its state and
        reason (``down: <why>``, ``starting``)."""
        return {f"mcp:{name}": _health(keeper) for name, keeper in self._keepers.items()}

    async def close(self, wait: float = STOP_WAIT) -> None:
        """Stop every server and wait for it (cancelled after ``wait`` seconds)."""
        tasks = [k.task for k in self._keepers.values() if k.task is not None]
        for keeper in self._keepers.values():
            keeper.stop()
        if not tasks:
            return
        _, slow = await asyncio.wait(tasks, timeout=wait)
        for task in slow:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for keeper in self._keepers.values():
            keeper.state = "stopped"


def _health(keeper: _Keeper) -> str | None:
    if keeper.state == "running":
        return None
    if keeper.state == "down":
        return f"down: {keeper.reason}"
    return keeper.state


def _error(text: str) -> ToolOutput:
    return ToolOutput(text=text, is_error=True, details={"status": "error"})
