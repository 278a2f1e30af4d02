"""MCP tools in a running botd, over the real Telegram, Anthropic and MCP SDKs: the scripted
model calls ``mcp__<server>__<tool>`` and its next request carries the result (text, an
image, an error); a server whose command does not exist leaves botd answering and shows in
``/healthz``; a server that dies is started again; a streamable-HTTP server works the same;
a group's ``tools`` list hides and refuses the rest; a tool the SDK would refuse is left out
alone; and no server process, nor one a server started, outlives botd, stopped or killed."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import botd.app
from botd.agent.tools.untrusted import mark_untrusted
from botd.app import App
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, tool_use
from tests.fakes.mcp_http import serving_mcp_http
from tests.fakes.telegram_api import FakeTelegramAPI, user
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
    HANG_GUARD,
    TELEGRAM_TOKEN,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)
from tests.support.health_probe import free_port
from tests.support.waiting import until

FAKE = str(Path(__file__).resolve().parent.parent / "fakes" / "mcp_server.py")
FRIEND = 111
NARROW = -100200  # offered message and mcp__t__echo only
SERVER_WIDE = -100300  # offered every tool of server t


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split(") ")[-1][:1] != "Z"  # a zombie has ended
    except (ProcessLookupError, OSError):
        return False


def _healthz(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


@pytest.fixture
def pidfile(tmp_path: Path) -> Iterator[Path]:
    """Where the servers write their pids (``children`` beside it: the processes they
    start); whatever the test did, none is left running after it."""
    path = tmp_path / "pids"
    yield path
    for pid in _pids(path) + _pids(tmp_path / "children"):
        if _alive(pid):
            os.kill(pid, 9)


@pytest.fixture
def http_server() -> Iterator[str]:
    """The fake MCP server on streamable HTTP, a bearer token required; yields its URL."""
    with serving_mcp_http("web-token-7") as url:
        yield url


def _agent(pidfile: Path, *servers: str, **env: str) -> str:
    """The ``agent:`` section: the fake on stdio as ``t`` (``env``: more of its
    environment), then ``servers``."""
    variables = json.dumps({"FAKE_MCP_PIDFILE": str(pidfile), **env})
    stdio = f"""    t:
      command: {json.dumps(sys.executable)}
      args: [{json.dumps(FAKE)}]
      env: {variables}
"""
    return "agent:\n  mcp_servers:\n" + stdio + "".join(servers)


def _marked(text: str, tool: str = "echo", server: str = "t") -> list[dict[str, Any]]:
    """The text of an MCP tool's result as the model reads it: marked as untrusted."""
    return [{"type": "text", "text": mark_untrusted(text, f"MCP server {server}, tool {tool}")}]


def _tool_results(body: dict[str, Any]) -> dict[str, tuple[bool, list[dict[str, Any]]]]:
    """Every tool result in a request: tool_use_id -> (is_error, content blocks)."""
    found: dict[str, tuple[bool, list[dict[str, Any]]]] = {}
    for message in body["messages"]:
        if not isinstance(message["content"], list):
            continue
        for block in message["content"]:
            if block.get("type") == "tool_result":
                inner = block.get("content", [])
                parts = [{"type": "text", "text": inner}] if isinstance(inner, str) else inner
                found[block["tool_use_id"]] = (bool(block.get("is_error")), parts)
    return found


def _text(parts: list[dict[str, Any]]) -> str:
    return "".join(part.get("text", "") for part in parts)


class Chat:
    """Runs in a chat of a running botd: the model makes the calls, then says "done"."""

    def __init__(self, telegram: FakeTelegramAPI, model: FakeAnthropicAPI) -> None:
        self.telegram, self.model = telegram, model

    async def run(self, chat: int, *calls: Any) -> tuple[list[str], dict[str, Any]]:
        """The tool names the first request offered, and the results the second carried."""
        first = len(self.model.requests)
        answered = len(self.telegram.calls_to("sendMessage", ok_only=True))
        if calls:
            self.model.push(stream(*calls, stop_reason="tool_use"))
        self.model.push(stream(text("done")))
        self.telegram.push_text(chat, "use your tools", sender=user(FRIEND))
        await until(
            lambda: any(
                c.params["text"] == "done" and int(c.params["chat_id"]) == chat
                for c in self.telegram.calls_to("sendMessage", ok_only=True)[answered:]
            ),
            f'"done" in chat {chat}',
        )
        offered = [tool["name"] for tool in self.model.requests[first].body.get("tools", [])]
        return offered, _tool_results(self.model.requests[-1].body)


async def test_the_model_uses_mcp_tools_and_botd_keeps_the_servers(
    tmp_path: Path, pidfile: Path, http_server: str
) -> None:
    port = free_port()
    servers = (
        "    gone:\n      command: /nonexistent/mcp-server\n",
        f"    web:\n      url: {json.dumps(http_server)}\n"
        "      headers: {Authorization: Bearer web-token-7}\n",
    )
    async with (
        FakeTelegramAPI(TELEGRAM_TOKEN) as telegram,
        FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model,
    ):
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            f"health: {{enabled: true, port: {port}}}\n",
            _agent(pidfile, *servers),
            telegram_yaml(telegram, "dm_policy: open"),
        )
        daemon: App
        async with daemon_running(config) as daemon:
            assert daemon.runtime is not None
            mcp = daemon.runtime.mcp
            await until(
                lambda: mcp.states()["t"] == mcp.states()["web"] == "running",
                "both servers running",
            )
            chat = Chat(telegram, model)
            offered, results = await chat.run(
                FRIEND,
                tool_use("c1", "mcp__t__echo", '{"text": ', '"hello"}'),
                tool_use("c2", "mcp__t__fail", '{"why": "broken"}'),
                tool_use("c3", "mcp__t__image", "{}"),
                tool_use("c4", "mcp__web__add", '{"a": 40, "b": 2}'),
            )
            assert {"message", "schedule", "mcp__t__echo", "mcp__web__add"} <= set(offered)
            assert not [name for name in offered if name.startswith("mcp__gone__")]
            assert results["c1"] == (False, _marked("echo: hello"))
            failed, parts = results["c2"]
            assert failed and "fail" in _text(parts)
            image_error, image = results["c3"]
            assert not image_error and [image[0]] == _marked("a 1x1 picture:", "image")
            assert image[1]["type"] == "image"
            assert image[1]["source"]["media_type"] == "image/png"
            assert results["c4"] == (False, _marked("42", "add", "web"))

            # The missing server is down in /healthz, the daemon answered all the same.
            loop = asyncio.get_running_loop()
            status, body = await loop.run_in_executor(None, _healthz, port)
            assert status == 503 and body["status"] == "degraded"
            assert body["channels"] == {"telegram": "running"}
            assert body["components"]["mcp:t"] == {"status": "ok"}
            assert body["components"]["mcp:web"] == {"status": "ok"}
            gone = body["components"]["mcp:gone"]
            assert gone["status"] == "degraded" and gone["reason"].startswith("down: ")
            assert "No such file" in gone["reason"]
            assert [p for p in body["problems"] if p.startswith("mcp:gone: down: ")]

            # /status tells the chat which server's tools are missing, not why (a path, a host).
            told = len(telegram.calls_to("sendMessage", ok_only=True))
            telegram.push_text(FRIEND, "/status", sender=user(FRIEND))
            await until(
                lambda: len(telegram.calls_to("sendMessage", ok_only=True)) > told,
                "the next answer",
            )
            said = str(telegram.calls_to("sendMessage", ok_only=True)[told].params["text"])
            assert re.search(r"MCP server gone is (down|starting): its tools are not", said)
            assert "MCP server t " not in said and "MCP server web " not in said
            assert "nonexistent" not in said and "No such file" not in said

            # A server that dies mid-call: an error result, then it is started again.
            started = len(pidfile.read_text().split())
            _, results = await chat.run(FRIEND, tool_use("c5", "mcp__t__crash", "{}"))
            crashed, parts = results["c5"]
            assert crashed and _text(parts).startswith("MCP server 't' failed the call: ")
            await until(
                lambda: len(pidfile.read_text().split()) > started, "the server started again"
            )
            await until(lambda: mcp.states()["t"] == "running", "t running")
            _, results = await chat.run(FRIEND, tool_use("c6", "mcp__t__add", '{"a":1,"b":1}'))
            assert results["c6"] == (False, _marked("2", "add"))
            pids = [int(p) for p in pidfile.read_text().split()]
            assert [p for p in pids if _alive(p)] == [pids[-1]]
    # botd stopped: no server process of its own is left.
    assert not [p for p in pids if _alive(p)]


async def test_a_group_list_narrows_the_tools(tmp_path: Path, pidfile: Path) -> None:
    async with (
        FakeTelegramAPI(TELEGRAM_TOKEN) as telegram,
        FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model,
    ):
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            _agent(pidfile),
            telegram_yaml(
                telegram,
                "dm_policy: open",
                "groups:",
                f'  "{NARROW}": {{require_mention: false, tools: [message, mcp__t__echo]}}',
                f'  "{SERVER_WIDE}": {{require_mention: false, tools: ["mcp__t__*"]}}',
            ),
        )
        async with daemon_running(config) as daemon:
            assert daemon.runtime is not None
            mcp = daemon.runtime.mcp
            await until(lambda: mcp.states()["t"] == "running", "t running")
            chat = Chat(telegram, model)
            offered, results = await chat.run(
                NARROW,
                tool_use("g1", "mcp__t__echo", '{"text": "ok"}'),
                tool_use("g2", "mcp__t__add", '{"a": 1, "b": 2}'),
                tool_use("g3", "schedule", '{"action": "list"}'),
            )
            assert offered == ["message", "mcp__t__echo"]
            assert results["g1"] == (False, _marked("echo: ok"))
            for refused in ("g2", "g3"):
                is_error, parts = results[refused]
                assert is_error and _text(parts).startswith("Unknown tool ")
                assert "Available tools: mcp__t__echo, message." in _text(parts)

            offered, _ = await chat.run(SERVER_WIDE)
            assert offered and all(name.startswith("mcp__t__") for name in offered)
            assert "mcp__t__image" in offered

            # Unset in a DM: everything the agent has.
            offered, _ = await chat.run(FRIEND)
            assert {"message", "schedule", "mcp__t__echo", "mcp__t__add"} <= set(offered)


async def test_without_the_sdk_botd_refuses_to_start_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util
    import logging

    from botd.agent.mcp import McpUnavailable
    from botd.config import parse_config

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mcp" else real(name, *a)
    )
    config = config_yaml(tmp_path, _agent(tmp_path / "pids"), "channels:\n  console: {}\n")
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        with pytest.raises(McpUnavailable) as caught:
            await App(parse_config(config, {}), env={}).run()
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
    assert str(caught.value) == (
        "agent.mcp_servers is configured but the MCP SDK is not installed: pip install 'botd[mcp]'"
    )


async def test_doctor_starts_each_server_once(tmp_path: Path, pidfile: Path) -> None:
    from botd.config import parse_config
    from botd.ops.doctor.mcp import mcp_checks

    servers = ("    gone:\n      command: /nonexistent/mcp-server\n",)
    config = parse_config(config_yaml(tmp_path, _agent(pidfile, *servers)), {})
    checks = await mcp_checks(config, timeout=HANG_GUARD)
    lines = [check.line() for check in checks]
    assert lines[0] == "✓ mcp server t: started, 7 tools"
    assert lines[1].startswith("✗ mcp server gone: did not start: [Errno 2] No such file")
    assert lines[1].endswith(
        ": check its command, args, env and cwd (try running the command yourself)"
    )
    assert not [p for p in (int(x) for x in pidfile.read_text().split()) if _alive(p)]


@pytest.mark.parametrize(
    ("stop", "server_env"),
    [
        # botd stops in order: the server ends on the end of its input, the process it
        # started goes with it.
        (signal.SIGTERM, {}),
        # botd is killed (as the out-of-memory killer does): nothing closes anything, and
        # this server would not end on the end of its input anyway.
        (signal.SIGKILL, {"FAKE_MCP_IGNORE_EOF": "1"}),
    ],
    ids=["sigterm", "sigkill"],
)
async def test_no_server_process_outlives_botd(
    tmp_path: Path, pidfile: Path, stop: signal.Signals, server_env: dict[str, str]
) -> None:
    from tests.support.daemon_process import ended, reap, start_daemon

    children = tmp_path / "children"
    port = free_port()
    async with FakeTelegramAPI(TELEGRAM_TOKEN) as telegram:
        path = tmp_path / "botd.yaml"
        path.write_text(
            config_yaml(
                tmp_path,
                f"health: {{enabled: true, port: {port}}}\n",
                _agent(pidfile, FAKE_MCP_CHILD_PIDFILE=str(children), **server_env),
                telegram_yaml(telegram, "dm_policy: open"),
            ),
            encoding="utf-8",
        )
        process = await start_daemon(path, tmp_path)
        try:
            loop = asyncio.get_running_loop()

            def up() -> bool:
                try:
                    _, body = _healthz(port)
                except OSError:
                    return False
                return bool(body.get("components", {}).get("mcp:t") == {"status": "ok"})

            await until(lambda: loop.run_in_executor(None, up), "the MCP server healthy")
            await until(lambda: len(_pids(children)) == 1, "the server to start its child")
            [server], [child] = _pids(pidfile), _pids(children)
            assert _alive(server) and _alive(child)
            process.send_signal(stop)
            assert await ended(process) == (0 if stop == signal.SIGTERM else -signal.SIGKILL)
        finally:
            await reap(process)
    await until(lambda: not _alive(server) and not _alive(child), "the server and its child gone")


async def test_a_tool_the_sdk_would_refuse_is_left_out_alone(
    tmp_path: Path,
    pidfile: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The start waits for the server however long a loaded machine takes to launch it, so
    # the one warning is the left-out tool's, never "still starting".
    monkeypatch.setattr(botd.app, "MCP_START_WAIT", HANG_GUARD)
    port = free_port()
    async with (
        FakeTelegramAPI(TELEGRAM_TOKEN) as telegram,
        FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model,
    ):
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            f"health: {{enabled: true, port: {port}}}\n",
            _agent(pidfile, FAKE_MCP_BAD_TOOL="1"),
            telegram_yaml(telegram, "dm_policy: open"),
        )
        daemon: App
        with caplog.at_level(logging.WARNING, logger="botd.agent.mcp"):
            async with daemon_running(config) as daemon:
                assert daemon.runtime is not None
                mcp = daemon.runtime.mcp
                await until(lambda: mcp.states()["t"] in ("running", "down"), "t running or down")
                assert mcp.states()["t"] == "running"
                loop = asyncio.get_running_loop()
                _, body = await loop.run_in_executor(None, _healthz, port)
                assert body["components"]["mcp:t"] == {"status": "ok"}

                offered, results = await Chat(telegram, model).run(
                    FRIEND, tool_use("b1", "mcp__t__echo", '{"text": "still here"}')
                )
                assert {"mcp__t__echo", "mcp__t__add", "mcp__t__env"} <= set(offered)
                assert "mcp__t__broken" not in offered
                assert results["b1"] == (False, _marked("echo: still here"))
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith("botd.agent.mcp")
    ]
    assert warnings == [
        "MCP server t: tool 'broken' left out: "
        "its input schema is not an object schema (type 'string')"
    ]


async def test_doctor_names_the_status_an_http_server_refused_with(
    tmp_path: Path, pidfile: Path, http_server: str
) -> None:
    from botd.config import parse_config
    from botd.ops.doctor.mcp import mcp_checks

    servers = (
        f"    web:\n      url: {json.dumps(http_server)}\n"
        "      headers: {Authorization: Bearer wrong-token}\n",
    )
    config = parse_config(config_yaml(tmp_path, _agent(pidfile, *servers)), {})
    checks = await mcp_checks(config, timeout=HANG_GUARD)
    line = checks[1].line()
    assert line.startswith("✗ mcp server web: did not start: ")
    assert "(HTTP 401 Unauthorized)" in line
    assert "wrong-token" not in line
    assert line.endswith(": check its url and headers, and that the server runs")


async def test_a_stdio_servers_stderr_is_logged_under_its_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from contextlib import AsyncExitStack

    from botd.agent.mcp.client import connect, list_tools
    from botd.config.schema import McpServerSection

    section = McpServerSection(
        command=sys.executable,
        args=[FAKE],
        env={"FAKE_MCP_STDERR": "warming up\n\nready on stdio"},
    )
    with caplog.at_level(logging.INFO, logger="botd.agent.mcp"):
        async with AsyncExitStack() as stack:
            client = await connect(stack, section, name="files")
            assert len(await list_tools(client)) == 7
    lines = [r.getMessage() for r in caplog.records if r.name == "botd.agent.mcp.client"]
    assert lines == ["mcp[files]: warming up", "mcp[files]: ready on stdio"]
