"""``botd acp`` driven by an ACP client botd does not ship (the TypeScript SDK's, ``client.mjs``),
the model being the loopback Anthropic fake: a turn streams as message chunks and ends with
``end_turn``, a tool call shows its states, an approval is the client's permission request, a
cancel ends the turn ``cancelled``, a malformed or unknown request is a JSON-RPC error while
the connection goes on, and a session is loaded again after the daemon restarts."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.fakes.anthropic_api import (
    FakeAnthropicAPI,
    http_error,
    stream,
    text,
    thinking,
    tool_use,
)
from tests.fakes.image_headers import png
from tests.fakes.loopback import serve
from tests.support.daemon_inprocess import ANTHROPIC_KEY, anthropic_yaml, config_yaml
from tests.support.daemon_process import daemon_env, ended, reap, start_daemon, stop_daemon
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

    async def start(self) -> str:
        """initialize and session/new: the new session's id."""
        init = await self.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        assert init["protocolVersion"] == 1
        assert init["agentCapabilities"]["loadSession"] is True
        assert init["agentCapabilities"]["sessionCapabilities"]["list"] == {}
        assert init["agentCapabilities"]["promptCapabilities"]["image"] is True
        assert init["agentCapabilities"]["promptCapabilities"]["embeddedContext"] is True
        session = await self.request("session/new", {"cwd": "/tmp", "mcpServers": []})
        return str(session["sessionId"])

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


@pytest.fixture
async def model() -> AsyncIterator[FakeAnthropicAPI]:
    async with FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as api:
        yield api


@pytest.fixture
async def client_of(acp_client: Path, tmp_path: Path) -> AsyncIterator[Any]:
    """Starts a client running ``botd acp --config CONFIG`` in ``tmp_path``."""
    started: list[asyncio.subprocess.Process] = []

    async def start(config: Path) -> Client:
        log = (tmp_path / "acp.log").open("ab")
        try:
            process = await asyncio.create_subprocess_exec(
                "node",
                str(acp_client),
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
                cwd=tmp_path,
                env=daemon_env(ANTHROPIC_TEST_KEY=ANTHROPIC_KEY),
            )
        finally:
            log.close()
        started.append(process)
        return Client(process)

    yield start
    for process in started:
        await reap(process)


def write_config(tmp_path: Path, *sections: str) -> Path:
    path = tmp_path / "botd.yaml"
    path.write_text(config_yaml(tmp_path, *sections), encoding="utf-8")
    return path


async def test_a_turn_streams_its_answer_and_a_bad_request_is_answered_with_an_error(
    tmp_path: Path, model: FakeAnthropicAPI, client_of: Any
) -> None:
    model.push(stream(text("Hello ", "from botd.")))
    client = await client_of(write_config(tmp_path, anthropic_yaml(model), ACP_CHANNEL))
    session = await client.start()

    unknown = await client.response(client.send("session/nonsense", {}))
    assert unknown["error"]["code"] == -32601
    malformed = await client.response(client.send("session/prompt", {"sessionId": 5}))
    assert malformed["error"]["code"] == -32602
    assert "sessionId" in json.dumps(malformed["error"]["data"])

    ended = await client.request("session/prompt", prompt(session, "hi"))  # it goes on
    assert ended == {"stopReason": "end_turn"}
    assert client.chunks(session) == "Hello from botd."
    assert await client.close() == 0


async def test_a_prompts_image_and_resources_reach_the_model_and_its_thinking_shows_as_thoughts(
    tmp_path: Path, model: FakeAnthropicAPI, client_of: Any
) -> None:
    model.push(stream(thinking("Looking ", "closely.", signature="sig"), text("A black square.")))
    agent = "agent:\n  reasoning: on\n"
    client = await client_of(write_config(tmp_path, anthropic_yaml(model), agent, ACP_CHANNEL))
    session = await client.start()
    image = base64.b64encode(png(8, 8)).decode()
    blocks = [
        {"type": "text", "text": "What is in it?"},
        {"type": "image", "mimeType": "image/png", "data": image},
        {"type": "resource_link", "name": "notes.md", "uri": "file:///tmp/notes.md"},
        {
            "type": "resource",
            "resource": {
                "uri": "file:///tmp/a.py",
                "text": "print('hi')",
                "mimeType": "text/x-python",
            },
        },
    ]
    ended = await client.request("session/prompt", {"sessionId": session, "prompt": blocks})
    assert ended == {"stopReason": "end_turn"}

    [asked] = model.requests
    content = asked.body["messages"][-1]["content"]
    said = json.dumps(content)
    assert any(block.get("type") == "image" for block in content)
    assert "What is in it?" in said
    assert "[notes.md](file:///tmp/notes.md)" in said
    assert "file:///tmp/a.py" in said and "print('hi')" in said
    thoughts = [
        u["update"]["content"]["text"]
        for u in client.updates
        if u["update"]["sessionUpdate"] == "agent_thought_chunk"
    ]
    assert "".join(thoughts) == "Looking closely."
    assert client.chunks(session) == "A black square."  # the reasoning is no message chunk
    assert await client.close() == 0


async def test_a_failed_run_ends_its_turn_with_end_turn_and_says_so(
    tmp_path: Path, model: FakeAnthropicAPI, client_of: Any
) -> None:
    model.push(http_error(400, "invalid_request_error", "the request is refused"))
    client = await client_of(write_config(tmp_path, anthropic_yaml(model), ACP_CHANNEL))
    session = await client.start()
    ended = await client.request("session/prompt", prompt(session, "hi"))
    assert ended == {"stopReason": "end_turn"}
    assert client.chunks(session)  # told, in botd's words
    assert await client.close() == 0


async def test_a_tool_call_shows_its_states_and_its_approval_is_asked_of_the_client(
    tmp_path: Path, model: FakeAnthropicAPI, client_of: Any
) -> None:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text="the page", content_type="text/plain")

    app = web.Application()
    app.router.add_get("/page", page)
    runner, port = await serve(app)
    try:
        url = f"http://127.0.0.1:{port}/page"
        model.push(
            stream(tool_use("w1", "web_fetch", json.dumps({"url": url})), stop_reason="tool_use"),
            stream(text("I read it.")),
        )
        agent = (
            "agent:\n  tools: [web_fetch]\n  web_fetch: {allow_hosts: [127.0.0.1]}\n"
            "  approvals:\n    tools: [web_fetch]\n"
        )
        client = await client_of(write_config(tmp_path, anthropic_yaml(model), agent, ACP_CHANNEL))
        session = await client.start()
        turn = client.send("session/prompt", prompt(session, "read the page"))
        ask = await until(lambda: client.asks and client.asks[0], "the permission request")
        assert ask["params"]["toolCall"]["toolCallId"] == "w1"
        options = {o["kind"]: o["optionId"] for o in ask["params"]["options"]}
        assert set(options) == {"allow_once", "reject_once"}
        client.answer(ask["ask"], options["allow_once"])

        assert (await client.response(turn))["result"] == {"stopReason": "end_turn"}
        assert client.tool_states("w1") == ["pending", "in_progress", "completed"]
        assert client.chunks(session) == "I read it."
        assert await client.close() == 0
    finally:
        await runner.cleanup()


async def test_a_cancel_ends_the_turn_cancelled(
    tmp_path: Path, model: FakeAnthropicAPI, client_of: Any
) -> None:
    model.push(stream(text("never shown"), delay=0))
    held = model.hold()
    client = await client_of(write_config(tmp_path, anthropic_yaml(model), ACP_CHANNEL))
    session = await client.start()
    turn = client.send("session/prompt", prompt(session, "take your time"))
    await until(lambda: model.pending >= 1, "the model to be asked")
    client.notify("session/cancel", {"sessionId": session})
    assert (await client.response(turn))["result"] == {"stopReason": "cancelled"}
    held.set()
    assert client.chunks(session) == ""
    # Loaded again, it replays the prompt; not the /stop the cancel sent, nor its answer.
    load = client.send("session/load", {"sessionId": session, "cwd": "/tmp", "mcpServers": []})
    await client.response(load)
    replayed = client.updates[: client.updates_before[load]]
    assert client.said(session, replayed) == [("user_message_chunk", "take your time")]
    assert await client.close() == 0


async def test_a_session_is_loaded_again_after_the_daemon_restarts_replaying_what_it_said(
    tmp_path: Path, model: FakeAnthropicAPI, client_of: Any
) -> None:
    model.push(stream(text("First answer.")), stream(text("Second answer.")))
    config = write_config(tmp_path, anthropic_yaml(model), ACP_CHANNEL)
    daemon = await start_daemon(config, tmp_path, ANTHROPIC_TEST_KEY=ANTHROPIC_KEY)
    try:
        await until(lambda: (tmp_path / "state" / "acp.sock").exists(), "the daemon's socket")
        client = await client_of(config)  # bridged to the running daemon
        session = await client.start()
        first = await client.request("session/prompt", prompt(session, "remember me"))
        assert first == {"stopReason": "end_turn"}
        assert await client.close() == 0
        assert await stop_daemon(daemon) == 0

        daemon = await start_daemon(config, tmp_path, ANTHROPIC_TEST_KEY=ANTHROPIC_KEY)
        await until(lambda: (tmp_path / "state" / "acp.sock").exists(), "the socket again")
        again = await client_of(config)
        await again.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        load = again.send("session/load", {"sessionId": session, "cwd": "/tmp", "mcpServers": []})
        assert (await again.response(load))["result"] in ({}, None)
        # The conversation came back, in order, before the load was answered.
        replayed = again.updates[: again.updates_before[load]]
        assert again.said(session, replayed) == [
            ("user_message_chunk", "remember me"),
            ("agent_message_chunk", "First answer."),
        ]
        second = await again.request("session/prompt", prompt(session, "who am I?"))
        assert second == {"stopReason": "end_turn"}
        assert again.chunks(session) == "First answer.Second answer."
        # The model was asked with the first turn before the second.
        said = json.dumps(model.requests[-1].body["messages"])
        assert "remember me" in said and "First answer." in said
        unknown = await again.response(
            again.send("session/load", {"sessionId": "nope", "cwd": "/tmp", "mcpServers": []})
        )
        assert unknown["error"]["code"] == -32002
        assert await again.close() == 0
    finally:
        await stop_daemon(daemon)


async def test_the_sessions_are_listed_after_the_daemon_restarts(
    tmp_path: Path, model: FakeAnthropicAPI, client_of: Any
) -> None:
    model.push(stream(text("Done.")))
    config = write_config(tmp_path, anthropic_yaml(model), ACP_CHANNEL)
    daemon = await start_daemon(config, tmp_path, ANTHROPIC_TEST_KEY=ANTHROPIC_KEY)
    try:
        await until(lambda: (tmp_path / "state" / "acp.sock").exists(), "the daemon's socket")
        client = await client_of(config)
        await client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        made = {
            cwd: (await client.request("session/new", {"cwd": cwd, "mcpServers": []}))["sessionId"]
            for cwd in ("/work/b", "/work/a")
        }
        words = "Fix the parser\nIt breaks on empty lines."
        assert await client.request("session/prompt", prompt(made["/work/b"], words)) == {
            "stopReason": "end_turn"
        }
        assert await client.close() == 0
        assert await stop_daemon(daemon) == 0

        daemon = await start_daemon(config, tmp_path, ANTHROPIC_TEST_KEY=ANTHROPIC_KEY)
        await until(lambda: (tmp_path / "state" / "acp.sock").exists(), "the socket again")
        again = await client_of(config)
        await again.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        listed = await again.request("session/list", {})
        assert [(s["sessionId"], s["cwd"], s.get("title")) for s in listed["sessions"]] == [
            (made["/work/b"], "/work/b", "Fix the parser"),  # prompted last: first
            (made["/work/a"], "/work/a", None),
        ]
        assert all(s["updatedAt"].endswith("Z") for s in listed["sessions"])
        assert listed.get("nextCursor") is None
        in_a = await again.request("session/list", {"cwd": "/work/a"})
        assert [s["sessionId"] for s in in_a["sessions"]] == [made["/work/a"]]
        bad = await again.response(again.send("session/list", {"cursor": "no such"}))
        assert bad["error"]["code"] == -32602
        assert await again.close() == 0
    finally:
        await stop_daemon(daemon)


async def test_a_prompts_image_survives_a_kill_mid_answer(
    tmp_path: Path, model: FakeAnthropicAPI, client_of: Any
) -> None:
    model.push(stream(stall=True))  # the model takes the request and says nothing
    config = write_config(tmp_path, anthropic_yaml(model), ACP_CHANNEL)
    daemon = await start_daemon(config, tmp_path, ANTHROPIC_TEST_KEY=ANTHROPIC_KEY)
    try:
        await until(lambda: (tmp_path / "state" / "acp.sock").exists(), "the daemon's socket")
        client = await client_of(config)
        session = await client.start()
        image = base64.b64encode(png(8, 8)).decode()
        blocks = [
            {"type": "text", "text": "What is in it?"},
            {"type": "image", "mimeType": "image/png", "data": image},
        ]
        client.send("session/prompt", {"sessionId": session, "prompt": blocks})
        await until(lambda: len(model.requests) == 1, "the model asked")
        daemon.kill()  # SIGKILL: no shutdown code runs
        await ended(daemon)

        # The image is a file of the state dir; one older than a finished message is kept
        # (a week) is removed when the channel starts.
        files = tmp_path / "state" / "acp" / "prompt-files"
        [kept] = list(files.iterdir())
        old = files / ("acp-file-" + "0" * 32)
        old.write_bytes(b"an old image")
        eight_days_ago = time.time() - 8 * 24 * 3600
        os.utime(old, (eight_days_ago, eight_days_ago))

        model.push(stream(text("A black square.")))
        daemon = await start_daemon(config, tmp_path, ANTHROPIC_TEST_KEY=ANTHROPIC_KEY)
        await until(lambda: len(model.requests) == 2, "the resumed run to ask the model")
        for asked in model.requests:
            content = asked.body["messages"][-1]["content"]
            assert any(block.get("type") == "image" for block in content), content
        await until(lambda: not old.exists(), "the old file removed")
        assert list(files.iterdir()) == [kept]
        assert await stop_daemon(daemon) == 0
    finally:
        await reap(daemon)
