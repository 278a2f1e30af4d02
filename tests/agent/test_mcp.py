"""MCP servers as tools, piece by piece: the names the model sees, the group lists, the
config's rules, results turned into what the model reads, and the manager keeping real
servers (tests/fakes/mcp_server.py on the MCP SDK) up over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp.types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
)

from botd.agent.mcp import McpManager, McpUnavailable, allowed, narrow, tool_name
from botd.agent.mcp.client import MAX_RESULT_CHARS, to_output
from botd.agent.providers.openai.request import build_messages
from botd.agent.tools.base import ToolContext, ToolOutput
from botd.cluster.fencing import RunScope
from botd.config import ConfigError, parse_config, secret_values
from botd.config.schema import McpServerSection
from botd.events import ImageContent as BotdImage
from botd.events import Message, ToolCallContent
from botd.events import TextContent as BotdText
from botd.retry import Backoff
from tests.fakes.mcp_http import serving_mcp_http
from tests.support.waiting import HANG_GUARD, until

FAKE = str(Path(__file__).resolve().parent.parent / "fakes" / "mcp_server.py")
NAME_RULE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
CONTEXT = ToolContext(RunScope("test"), None, "call-1")


# --------------------------------------------------------------------------- names


def test_tool_names_are_prefixed_and_fit_the_model_apis_rule() -> None:
    assert tool_name("docs", "search") == "mcp__docs__search"
    assert tool_name("docs", "read.file v2") == "mcp__docs__read_file_v2"
    long = tool_name("a-server", "x" * 80)
    assert NAME_RULE.match(long) and len(long) == 64
    assert long == tool_name("a-server", "x" * 80)  # the same every time
    assert long != tool_name("a-server", "x" * 79 + "y")  # a shared start stays apart
    assert long.startswith("mcp__a-server__xxx")
    for tool in ["é", "a/b", "日本", "x" * 200, "ok"]:
        assert NAME_RULE.match(tool_name("s", tool))


def test_a_name_taken_by_a_sibling_gets_the_hashed_ending() -> None:
    first = tool_name("s", "a.b")
    second = tool_name("s", "a_b", taken=[first])
    assert first == "mcp__s__a_b" and second != first and NAME_RULE.match(second)


def test_group_lists_match_names_and_server_prefixes() -> None:
    assert allowed("mcp__docs__search", ["mcp__docs__*"])
    assert allowed("message", ["message"])
    assert not allowed("mcp__docs__search", ["mcp__doc__*", "message"])
    assert not allowed("schedule", [])

    class Named:
        def __init__(self, name: str) -> None:
            self.spec = type("Spec", (), {"name": name})()

    tools: list[Any] = [Named("message"), Named("mcp__a__x"), Named("mcp__b__y")]
    assert [t.spec.name for t in narrow(tools, ["mcp__a__*", "message"])] == [
        "message",
        "mcp__a__x",
    ]


# --------------------------------------------------------------------------- config


def _problems(text: str) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        parse_config(textwrap.dedent(text).lstrip("\n"), {})
    return [(p.path, p.message) for p in caught.value.problems]


CONSOLE = "channels:\n  console: {enabled: true}\n"


def test_a_server_is_either_a_command_or_a_url() -> None:
    found = _problems(
        """
        agent:
          mcp_servers:
            both: {command: x, url: "http://127.0.0.1:1/mcp"}
            neither: {args: [a]}
            mixed: {url: "http://127.0.0.1:1/mcp", env: {A: b}}
            mixed2: {command: x, headers: {A: b}}
            notaurl: {url: "ftp://x"}
            "bad name": {command: x}
        channels:
          console: {enabled: true}
        """
    )
    paths = dict(found)
    assert "not both" in paths["agent.mcp_servers.both"]
    assert "either command" in paths["agent.mcp_servers.neither"]
    assert "env" in paths["agent.mcp_servers.mixed"]
    assert "headers" in paths["agent.mcp_servers.mixed2"]
    assert "http://" in paths["agent.mcp_servers.notaurl.url"]
    assert "letters, digits" in paths["agent.mcp_servers.bad name.[key]"]


def test_env_and_header_values_are_secrets() -> None:
    config = parse_config(
        textwrap.dedent(
            """
            agent:
              mcp_servers:
                local: {command: x, env: {API_TOKEN: env-secret-1}}
                remote: {url: "https://mcp.example/mcp", headers: {Authorization: Bearer hdr-2}}
            """
        ).lstrip("\n")
        + CONSOLE,
        {},
    )
    assert {"env-secret-1", "Bearer hdr-2"} <= secret_values(config)
    assert config.agent.mcp_servers["local"].command == "x"


def test_a_group_may_list_its_tools() -> None:
    config = parse_config(
        "channels:\n  telegram:\n    token: 1:x\n    groups:\n"
        '      "-100": {tools: [message, "mcp__docs__*"]}\n',
        {},
    )
    section: Any = config.channels.section("telegram")
    assert section.groups["-100"].tools == ["message", "mcp__docs__*"]


def test_without_the_sdk_configured_servers_are_one_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "mcp" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(McpUnavailable, match=re.escape("pip install 'botd[mcp]'")):
        McpManager({"x": McpServerSection(command="x")})
    McpManager({})  # nothing configured: nothing needed


# --------------------------------------------------------------------------- results


def test_results_become_text_images_and_errors() -> None:
    output = to_output(
        CallToolResult(
            content=[
                TextContent(type="text", text="one"),
                ImageContent(type="image", data="AAAA", mime_type="image/png"),
                ImageContent(type="image", data="AAAA", mime_type="image/tiff"),
                EmbeddedResource(
                    type="resource",
                    resource=TextResourceContents(uri="file:///a.txt", text="inside"),
                ),
            ]
        )
    )
    assert output.text == "one\n[image of type image/tiff left out]\ninside"
    assert output.images == (BotdImage(mime_type="image/png", data="AAAA"),)
    assert not output.is_error
    assert output.content() == [BotdText(text=output.text), *output.images]

    failed = to_output(CallToolResult(content=[TextContent(type="text", text="no")], is_error=True))
    assert failed.is_error and failed.text == "no"
    assert to_output(CallToolResult(content=[])).text == "(the tool returned nothing)"
    huge = to_output(CallToolResult(content=[TextContent(type="text", text="x" * 200_000)]))
    assert len(huge.text) < MAX_RESULT_CHARS + 100 and huge.text.endswith("more characters cut]")


def test_openai_requests_show_tool_images_in_a_user_message_after_the_results() -> None:
    image = BotdImage(mime_type="image/png", data="AAAA")
    messages = [
        Message(role="user", content="draw"),
        Message(
            role="assistant",
            content=[
                ToolCallContent(id="c1", name="mcp__t__image", arguments={}),
                ToolCallContent(id="c2", name="mcp__t__echo", arguments={"text": "x"}),
            ],
        ),
        Message(
            role="tool_result",
            tool_call_id="c1",
            tool_name="mcp__t__image",
            content=ToolOutput("a picture", images=(image,)).content(),
        ),
        Message(role="tool_result", tool_call_id="c2", content=[BotdText(text="echo: x")]),
    ]
    entries = build_messages("", messages)
    assert [e["role"] for e in entries] == ["user", "assistant", "tool", "tool", "user"]
    assert "shown in the next message" in entries[2]["content"]
    parts = entries[4]["content"]
    assert parts[0] == {"type": "text", "text": "Image(s) returned by mcp__t__image:"}
    assert parts[1]["image_url"]["url"] == "data:image/png;base64,AAAA"


# --------------------------------------------------------------------------- servers


def _fast() -> Backoff:
    return Backoff(0.05, factor=2.0, cap=0.2, jitter=0.0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by a parent that is gone) counts as ended.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


@pytest.fixture
def pidfile(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pids"
    yield path
    # Whatever a test did, no server process outlives it.
    if path.exists():
        for line in path.read_text().split():
            if _alive(int(line)):
                os.kill(int(line), 9)


def _stdio(pidfile: Path, **more: Any) -> McpServerSection:
    return McpServerSection(
        command=sys.executable, args=[FAKE], env={"FAKE_MCP_PIDFILE": str(pidfile)}, **more
    )


@pytest.fixture
async def manager(pidfile: Path) -> AsyncIterator[McpManager]:
    manager = McpManager(
        {
            "t": _stdio(pidfile, timeout=5.0),
            "only": _stdio(pidfile, tools=["echo", "nope"]),
            "gone": McpServerSection(command="/nonexistent/mcp-server"),
        },
        backoff=_fast,
        probe_interval=0.5,
    )
    manager.start()
    try:
        await until(lambda: manager.states()["t"] == "running", "t running")
        await until(lambda: manager.states()["only"] == "running", "only running")
        yield manager
    finally:
        await manager.close()


async def test_a_stdio_server_runs_and_its_tools_answer(manager: McpManager) -> None:
    tools = {tool.spec.name: tool for tool in manager.tools()}
    assert {"mcp__t__echo", "mcp__t__add", "mcp__t__image", "mcp__only__echo"} <= set(tools)
    assert not [n for n in tools if n.startswith("mcp__only__") and n != "mcp__only__echo"]
    assert tools["mcp__t__echo"].timeout == 5.0
    assert tools["mcp__t__add"].spec.input_schema["required"] == ["a", "b"]

    assert await tools["mcp__t__echo"].run({"text": "hi"}, CONTEXT) == ToolOutput(
        "echo: hi", details={"status": "ok"}, untrusted_from="MCP server t, tool echo"
    )
    assert (await tools["mcp__t__add"].run({"a": 2, "b": 3}, CONTEXT)).text == "5"
    picture = await tools["mcp__t__image"].run({}, CONTEXT)
    assert picture.text == "a 1x1 picture:" and picture.images[0].mime_type == "image/png"
    failed = await tools["mcp__t__fail"].run({"why": "no"}, CONTEXT)
    assert failed.is_error and "fail" in failed.text
    env = await tools["mcp__t__env"].run({"name": "FAKE_MCP_PIDFILE"}, CONTEXT)
    assert env.text.endswith("pids")

    health = manager.health()
    assert health["mcp:t"] is None
    assert health["mcp:gone"] is not None
    assert health["mcp:gone"].startswith("down: ")
    assert "No such file" in health["mcp:gone"]


async def test_a_call_cut_short_leaves_the_server_usable(manager: McpManager) -> None:
    tools = {tool.spec.name: tool for tool in manager.tools()}
    with pytest.raises(TimeoutError):  # the loop's own deadline does this
        await asyncio.wait_for(tools["mcp__t__sleep"].run({"seconds": 30}, CONTEXT), 0.5)
    assert (await tools["mcp__t__echo"].run({"text": "still"}, CONTEXT)).text == "echo: still"
    assert manager.states()["t"] == "running"


def test_sdk_errors_are_one_line() -> None:
    from mcp import MCPError

    from botd.agent.mcp.client import describe_error

    assert describe_error(MCPError(-32000, "Connection\nclosed")) == "Connection closed"
    group = ExceptionGroup("unhandled errors in a TaskGroup", [OSError("refused")])
    assert describe_error(group) == "refused"
    assert describe_error(RuntimeError()) == "RuntimeError"


async def test_a_server_that_dies_is_restarted(manager: McpManager, pidfile: Path) -> None:
    before = pidfile.read_text().split()
    tools = {tool.spec.name: tool for tool in manager.tools()}
    crashed = await tools["mcp__t__crash"].run({}, CONTEXT)
    assert crashed.is_error and crashed.text.startswith("MCP server 't' failed the call: ")
    # Its tools are left out until it is back; then they answer again.
    await until(lambda: manager.states()["t"] != "running", "t noticed down")
    assert not [t for t in manager.tools() if t.spec.name.startswith("mcp__t__")]
    await until(lambda: manager.states()["t"] == "running", "t running again")
    assert len(pidfile.read_text().split()) > len(before)
    again = {tool.spec.name: tool for tool in manager.tools()}
    assert (await again["mcp__t__echo"].run({"text": "back"}, CONTEXT)).text == "echo: back"
    # A tool object of the old connection reaches the new one too.
    assert (await tools["mcp__t__echo"].run({"text": "old"}, CONTEXT)).text == "echo: old"


async def test_a_server_that_dies_at_once_keeps_backing_off(
    pidfile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server up for less than STABLE_AFTER did not prove itself: its failures add up.
    monkeypatch.setattr("botd.agent.mcp.manager.STABLE_AFTER", 3600.0)
    backoffs: list[Backoff] = []

    def recorded() -> Backoff:
        backoffs.append(_fast())
        return backoffs[-1]

    manager = McpManager({"t": _stdio(pidfile)}, backoff=recorded)
    manager.start()
    try:
        for round_ in range(1, 3):
            await until(lambda: manager.states()["t"] == "running", "t running")
            crash = next(t for t in manager.tools() if t.spec.name == "mcp__t__crash")
            await crash.run({}, CONTEXT)
            await until(lambda r=round_: backoffs[0].failures >= r, "t counted down")
        assert backoffs[0].failures == 2
    finally:
        await manager.close()


async def test_closing_leaves_no_server_process(pidfile: Path) -> None:
    sleeping = pidfile.with_name("sleeping")
    busy_server = McpServerSection(
        command=sys.executable,
        args=[FAKE],
        env={"FAKE_MCP_PIDFILE": str(pidfile), "FAKE_MCP_SLEEPING": str(sleeping)},
    )
    manager = McpManager({"a": busy_server, "b": _stdio(pidfile)}, backoff=_fast)
    manager.start()
    await until(lambda: set(manager.states().values()) == {"running"}, "both running")
    # One busy in a long call while botd stops.
    busy = next(t for t in manager.tools() if t.spec.name == "mcp__a__sleep")
    call = asyncio.create_task(busy.run({"seconds": 60}, CONTEXT))
    await until(sleeping.exists, "the long call to reach the server")
    await manager.close()
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 2 and not [p for p in pids if _alive(p)]
    assert set(manager.states().values()) == {"stopped"}
    assert (await call).is_error


async def test_a_server_that_dies_takes_what_it_started_with_it(tmp_path: Path) -> None:
    children = tmp_path / "children"
    section = McpServerSection(
        command=sys.executable,
        args=[FAKE],
        env={"FAKE_MCP_PIDFILE": str(tmp_path / "pids"), "FAKE_MCP_CHILD_PIDFILE": str(children)},
    )
    manager = McpManager({"t": section}, backoff=_fast)
    manager.start()
    try:
        await until(lambda: manager.states()["t"] == "running", "t running")
        [child] = [int(p) for p in children.read_text().split()]
        assert _alive(child)
        crash = next(t for t in manager.tools() if t.spec.name == "mcp__t__crash")
        await crash.run({}, CONTEXT)
        await until(lambda: not _alive(child), "the child of the crashed server gone")
        await until(lambda: len(children.read_text().split()) == 2, "t started again")
    finally:
        await manager.close()
        for pid in [int(p) for p in children.read_text().split()]:
            if _alive(pid):
                os.kill(pid, 9)
    assert not [int(p) for p in children.read_text().split() if _alive(int(p))]


async def test_a_listing_is_checked_tool_by_tool(caplog: pytest.LogCaptureFixture) -> None:
    import anyio
    from mcp.shared.message import SessionMessage
    from mcp.types.jsonrpc import JSONRPCRequest, JSONRPCResponse

    from botd.agent.mcp.listing import checked_listings

    # A transport as the SDK sees one: what the server sends, what botd sends.
    from_server, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](9)
    write_stream, to_server = anyio.create_memory_object_stream[SessionMessage](9)

    @asynccontextmanager
    async def transport() -> AsyncIterator[Any]:
        yield read_stream, write_stream

    good = {"name": "echo", "inputSchema": {"type": "object", "properties": {}}}
    listing = {
        "tools": [
            good,
            {"name": "text", "inputSchema": {"type": "string"}},
            {"name": "loud", "inputSchema": {"type": "object"}, "annotations": "very"},
            {"inputSchema": {"type": "object"}},
            "nonsense",
        ],
        "nextCursor": "page-2",
    }

    def answer(id_: int) -> SessionMessage:
        return SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=id_, result=listing))

    with caplog.at_level(logging.WARNING, logger="botd.agent.mcp"):
        async with checked_listings(transport(), "t", lambda: "2025-11-25") as (read, write):
            for id_ in (1, 2):  # the periodic check lists again: no second warning
                request = JSONRPCRequest(jsonrpc="2.0", id=id_, method="tools/list")
                await write.send(SessionMessage(request))
                assert (await to_server.receive()).message == request
                await from_server.send(answer(id_))
                checked = await read.receive()
                assert isinstance(checked, SessionMessage)
                assert isinstance(checked.message, JSONRPCResponse)
                assert checked.message.result == {"tools": [good], "nextCursor": "page-2"}
            # An answer to anything else passes as it came.
            await from_server.send(answer(7))
            passed = await read.receive()
            assert isinstance(passed, SessionMessage)
            assert passed.message == answer(7).message
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 4
    assert warnings[0] == (
        "MCP server t: tool 'text' left out: its input schema is not an object schema"
        " (type 'string')"
    )
    assert warnings[1].startswith(
        "MCP server t: tool 'loud' left out: the MCP SDK refuses it: annotations: "
    )
    assert warnings[2].startswith("MCP server t: tool \"{'inputSchema'")
    assert "the MCP SDK refuses it: name: " in warnings[2]
    assert warnings[3] == "MCP server t: tool \"'nonsense'\" left out: it is not an object"


@pytest.fixture
def http_server() -> Iterator[str]:
    """The fake on streamable HTTP (a token required); yields its URL."""
    with serving_mcp_http("tok-123") as url:
        yield url


async def test_a_streamable_http_server_with_headers(http_server: str) -> None:
    manager = McpManager(
        {
            "web": McpServerSection(url=http_server, headers={"Authorization": "Bearer tok-123"}),
            "refused": McpServerSection(url=http_server, headers={"Authorization": "Bearer no"}),
        },
        backoff=lambda: Backoff(5.0, jitter=0.0),
        start_timeout=20.0,
    )
    manager.start()
    try:
        await manager.wait_started(HANG_GUARD)
        await until(lambda: manager.states()["web"] == "running", "web running")
        tools = {tool.spec.name: tool for tool in manager.tools()}
        assert (await tools["mcp__web__add"].run({"a": 1, "b": 2}, CONTEXT)).text == "3"
        assert manager.states()["refused"] == "down"
        assert (manager.health()["mcp:refused"] or "").startswith("down: ")
    finally:
        await manager.close()


def test_a_reload_leaves_servers_to_a_restart_and_applies_group_lists() -> None:
    from botd.config.reload import plan_reload

    def config(servers: str, tools: str) -> Any:
        return parse_config(
            f"agent:\n  mcp_servers: {servers}\n"
            "channels:\n  telegram:\n    token: 1:x\n    groups:\n"
            f'      "-100": {{tools: {tools}}}\n',
            {},
        )

    before = config("{a: {command: x}}", "[message]")
    servers = plan_reload(before, config("{a: {command: y}}", "[message]"))
    assert servers.restart_only == ("agent",) and not servers.restart
    lists = plan_reload(before, config("{a: {command: x}}", '["mcp__a__*"]'))
    assert lists.restart == {"telegram"} and not lists.restart_only


def test_listed_tools_with_bad_schemas_or_clashing_names_are_left_out() -> None:
    from types import SimpleNamespace

    manager = McpManager(
        {"a": McpServerSection(command="x"), "a__b": McpServerSection(command="x")}
    )
    keepers = manager._keepers
    listed = [
        SimpleNamespace(name="b__c", description="d", input_schema={"type": "object"}),
        SimpleNamespace(name="bad", description=None, input_schema={"type": 12}),
        SimpleNamespace(name="plain", description=None, input_schema=None),
    ]
    keepers["a"].tools = keepers["a"]._tools_of(listed)
    assert [t.spec.name for t in keepers["a"].tools] == ["mcp__a__b__c", "mcp__a__plain"]
    assert keepers["a"].tools[1].spec.input_schema == {"type": "object"}
    keepers["a__b"].tools = keepers["a__b"]._tools_of(
        [SimpleNamespace(name="c", description="", input_schema={"type": "object"})]
    )
    for keeper in keepers.values():
        keeper.state = "running"
    tools = manager.tools()
    assert [(t.spec.name, getattr(t, "server", None)) for t in tools] == [
        ("mcp__a__b__c", "a"),
        ("mcp__a__plain", "a"),
    ]
