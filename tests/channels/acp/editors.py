"""Editors driving botd over ACP in a test: ``client.mjs`` (the TypeScript SDK's client app)
running ``botd acp --config CONFIG``, as an editor starts it.

``Editors`` is the opening every test shares (the ``editors`` fixture): a config with the
loopback model and the ACP channel, a daemon started on it (``botd run``) when the test
wants one running before the editor (``botd acp`` then bridges to its socket; without one
it runs the daemon itself), a client connected and initialized, a session made. What was
started is stopped when the test ends, whatever failed.

``Client`` sends requests, notifications and permission answers, and collects responses,
updates and permission requests, each response with how many updates came before it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.support.daemon_inprocess import ANTHROPIC_KEY, anthropic_yaml, config_yaml
from tests.support.daemon_process import (
    RunningDaemon,
    daemon_env,
    reap,
    start_daemon,
    stop_daemon,
)
from tests.support.waiting import HANG_GUARD, until

ACP_CHANNEL = "channels:\n  acp:\n    enabled: true\n"


class Client:
    """``client.mjs`` running ``botd acp --config CONFIG``: requests, notifications and
    permission answers go in; responses, updates and permission requests are collected."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process
        self._ids = 0
        self.responses: dict[int, dict[str, Any]] = {}
        self.updates_before: dict[int, int] = {}
        """For each response, how many updates the client had received before it."""
        self.updates: list[dict[str, Any]] = []
        self.asks: list[dict[str, Any]] = []
        self.exit: int | None = None
        self._reading = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self._process.stdout is not None
        async for line in self._process.stdout:
            said = json.loads(line)
            if "update" in said:
                self.updates.append(said["update"])
            elif "ask" in said:
                self.asks.append(said)
            elif "exit" in said:
                self.exit = said["exit"]
            else:
                self.updates_before[said["id"]] = len(self.updates)
                self.responses[said["id"]] = said

    def _order(self, order: dict[str, Any]) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write((json.dumps(order) + "\n").encode())

    def send(self, method: str, params: dict[str, Any]) -> int:
        self._ids += 1
        self._order({"op": "request", "id": self._ids, "method": method, "params": params})
        return self._ids

    async def response(self, request: int) -> dict[str, Any]:
        def answered() -> dict[str, Any]:
            return self.responses.get(request, {})

        return await until(answered, f"the answer to request {request}")

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        answer = await self.response(self.send(method, params))
        assert "result" in answer, answer
        return answer["result"]

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self._order({"op": "notify", "method": method, "params": params})

    def answer(self, ask: int, option_id: str) -> None:
        response = {"outcome": {"outcome": "selected", "optionId": option_id}}
        self._order({"op": "answer", "ask": ask, "response": response})

    def chunks(self, session_id: str) -> str:
        return "".join(
            u["update"]["content"]["text"]
            for u in self.updates
            if u["sessionId"] == session_id
            and u["update"]["sessionUpdate"] == "agent_message_chunk"
        )

    def said(self, session_id: str, updates: list[dict[str, Any]]) -> list[tuple[str, str]]:
        """The message chunks among ``updates`` of ``session_id``: (kind, text) in order."""
        return [
            (u["update"]["sessionUpdate"], u["update"]["content"]["text"])
            for u in updates
            if u["sessionId"] == session_id
            and u["update"]["sessionUpdate"] in ("user_message_chunk", "agent_message_chunk")
        ]

    def tool_states(self, call_id: str) -> list[str]:
        return [
            u["update"]["status"]
            for u in self.updates
            if u["update"]["sessionUpdate"] in ("tool_call", "tool_call_update")
            and u["update"]["toolCallId"] == call_id
            and u["update"].get("status")
        ]

    async def initialize(self) -> None:
        """``initialize``, checking what botd says it can do."""
        init = await self.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        assert init["protocolVersion"] == 1
        assert init["agentCapabilities"]["loadSession"] is True
        assert init["agentCapabilities"]["sessionCapabilities"]["list"] == {}
        assert init["agentCapabilities"]["promptCapabilities"]["image"] is True
        assert init["agentCapabilities"]["promptCapabilities"]["embeddedContext"] is True

    async def new_session(self, cwd: str = "/tmp") -> str:
        """``session/new`` in ``cwd``: the new session's id."""
        session = await self.request("session/new", {"cwd": cwd, "mcpServers": []})
        return str(session["sessionId"])

    def load(self, session_id: str) -> int:
        """Send ``session/load`` of ``session_id``: the request's id."""
        return self.send("session/load", {"sessionId": session_id, "cwd": "/tmp", "mcpServers": []})

    async def replayed(self, session_id: str) -> list[dict[str, Any]]:
        """``session/load`` of ``session_id``, answered: the updates sent before its answer."""
        load = self.load(session_id)
        assert (await self.response(load))["result"] in ({}, None)
        return self.updates[: self.updates_before[load]]

    async def close(self) -> int | None:
        self._order({"op": "close"})
        assert self._process.stdin is not None
        self._process.stdin.close()
        await until(lambda: self.exit is not None, "botd acp to end")
        await asyncio.wait_for(self._process.wait(), HANG_GUARD)
        await self._reading
        return self.exit


def prompt(session_id: str, words: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": words}]}


class Editors:
    """The opening of every ACP test (see the module docstring), in ``tmp_path``."""

    def __init__(self, acp_client: Path, tmp_path: Path, model: FakeAnthropicAPI) -> None:
        self._acp_client = acp_client
        self._tmp_path = tmp_path
        self._model = model
        self._clients: list[asyncio.subprocess.Process] = []
        self.daemon: RunningDaemon | None = None
        """The daemon ``start_daemon`` started last (None: none yet)."""

    def config(self, *sections: str) -> Path:
        """A config file with the loopback model, ``sections`` and the ACP channel."""
        path = self._tmp_path / "botd.yaml"
        text = config_yaml(self._tmp_path, anthropic_yaml(self._model), *sections, ACP_CHANNEL)
        path.write_text(text, encoding="utf-8")
        return path

    @property
    def socket(self) -> Path:
        return self._tmp_path / "state" / "acp.sock"

    async def start_daemon(self, config: Path) -> RunningDaemon:
        """``botd run`` on ``config``, once it serves editors on its socket."""
        self.daemon = await start_daemon(config, self._tmp_path, ANTHROPIC_TEST_KEY=ANTHROPIC_KEY)
        await until(self.socket.exists, "the daemon's socket")
        return self.daemon

    async def stop_daemon(self) -> int:
        """Stop the running daemon (SIGTERM): its exit status."""
        assert self.daemon is not None
        return await stop_daemon(self.daemon)

    async def spawn(self, config: Path) -> Client:
        """A client running ``botd acp --config CONFIG``, nothing asked yet."""
        log = (self._tmp_path / "acp.log").open("ab")
        try:
            process = await asyncio.create_subprocess_exec(
                "node",
                str(self._acp_client),
                "--",
                sys.executable,
                "-m",
                "botd",
                "acp",
                "--config",
                str(config),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                cwd=self._tmp_path,
                env=daemon_env(ANTHROPIC_TEST_KEY=ANTHROPIC_KEY),
            )
        finally:
            log.close()
        self._clients.append(process)
        return Client(process)

    async def connect(self, config: Path) -> Client:
        """A client of ``botd acp --config CONFIG``, initialized."""
        client = await self.spawn(config)
        await client.initialize()
        return client

    async def open(self, config: Path) -> tuple[Client, str]:
        """A client of ``botd acp --config CONFIG``, initialized, with a new session."""
        client = await self.connect(config)
        return client, await client.new_session()

    async def aclose(self) -> None:
        for process in self._clients:
            await reap(process)
        if self.daemon is not None:
            await reap(self.daemon)
