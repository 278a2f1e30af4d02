"""The tool registry: botd's own tools found by their packages, another distribution's by the
``botd.tools`` entry points; ``agent.tools`` checked against the names, and a running botd
offering a plugin's tool to the model, built through its spec."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from botd.agent.tools import registry
from botd.agent.tools.registry import tool_specs
from botd.config import ConfigError, parse_config
from botd.config import tools as config_tools
from botd.wiring import approval_rules
from tests.agent.plugin_tool import GATED, NOW
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, tool_use
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)
from tests.support.waiting import until

Register = Callable[..., None]


def _forget() -> None:
    config_tools.tool_registrations.cache_clear()
    config_tools.registered_tools.cache_clear()
    registry.tool_specs.cache_clear()


@pytest.fixture
def register(monkeypatch: pytest.MonkeyPatch) -> Iterator[Register]:
    """``register(name=value, ...)``: entry points of the group ``botd.tools`` botd sees."""

    def entries(**points: str) -> None:
        found = [EntryPoint(n, v, config_tools.TOOLS_ENTRY_POINT_GROUP) for n, v in points.items()]

        def entry_points(*, group: str) -> list[EntryPoint]:
            return found if group == config_tools.TOOLS_ENTRY_POINT_GROUP else []

        monkeypatch.setattr(config_tools, "entry_points", entry_points)
        _forget()

    try:
        yield entries
    finally:
        monkeypatch.undo()
        _forget()


BUILTINS = [
    "edit_file",
    "exec",
    "forget",
    "list_files",
    "message",
    "read_file",
    "recall",
    "remember",
    "schedule",
    "search_files",
    "skill",
    "web_fetch",
    "web_search",
    "write_file",
]
"""botd's own tools, in name order."""


def test_botd_s_own_tools_are_found_by_their_packages() -> None:
    specs = tool_specs()
    assert list(specs) == BUILTINS
    assert all(name == spec.name for name, spec in specs.items())
    assert not any(spec.needs_approval for spec in specs.values())
    config = parse_config("{}", {})
    assert specs["web_fetch"].section == "agent.web_fetch"
    assert specs["web_fetch"].settings(config) is config.agent.web_fetch
    assert specs["message"].settings(config) is None
    assert specs["remember"].settings(config) is config.agent.memory
    assert specs["search_files"].settings(config) is config.agent.workspace
    assert specs["web_search"].section == "agent.web_search"
    assert [r.builtin for r in config_tools.tool_registrations()] == [True] * len(BUILTINS)


def test_a_plugin_s_tool_is_a_name_agent_tools_may_list(register: Register) -> None:
    register(clock="tests.agent.plugin_tool:SPEC")
    assert parse_config("agent:\n  tools: [message, clock]\n", {}).agent.tools == [
        "message",
        "clock",
    ]
    with pytest.raises(ConfigError) as refused:
        parse_config("agent:\n  tools: [clok]\n", {})
    assert str(refused.value) == (
        "<config>:2: agent.tools[0]: expected 'clock', "
        + ", ".join(f"'{name}'" for name in BUILTINS[:-1])
        + f" or '{BUILTINS[-1]}', got 'clok'"
    )
    # agent.approvals.tools may name it too.
    parse_config("agent:\n  approvals: {tools: [clock]}\n", {})


def test_a_plugin_that_cannot_be_loaded_is_said_to_be_so(
    register: Register, caplog: pytest.LogCaptureFixture
) -> None:
    register(broken="tests.agent.no_such_module:SPEC", odd="tests.agent.plugin_tool:NOT_A_SPEC")
    with pytest.raises(ConfigError) as refused:
        parse_config("agent:\n  tools: [message, broken, odd]\n", {})
    lines = str(refused.value).splitlines()
    assert lines[0].startswith(
        "<config>:2: agent.tools[1]: the broken tool's plugin cannot be loaded: ModuleNotFoundError"
    )
    assert lines[1] == (
        "<config>:2: agent.tools[2]: the odd tool's plugin cannot be loaded: "
        "tests.agent.plugin_tool:NOT_A_SPEC is not a tool spec"
    )
    with caplog.at_level(logging.ERROR, logger="botd.agent.tools.registry"):
        assert list(tool_specs()) == BUILTINS
    assert "tool plugin broken" in caplog.text and "tool plugin odd" in caplog.text


def test_a_plugin_does_not_replace_a_builtin(
    register: Register, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="botd.config.tools"):
        register(message="tests.agent.plugin_tool:SPEC")
        assert tool_specs()["message"].name == "message"
        assert [r.builtin for r in config_tools.tool_registrations()] == [True] * len(BUILTINS)
    assert "is not loaded: message is one of botd's own tools" in caplog.text


def test_a_tool_that_needs_approval_is_gated_unlisted() -> None:
    config = parse_config("agent:\n  approvals: {tools: [web_fetch]}\n", {})
    rules = approval_rules(config, {**tool_specs(), "gated": GATED})
    assert rules.tools == ("web_fetch", "gated")
    assert rules.gates("gated") and rules.gates("web_fetch") and not rules.gates("message")
    assert approval_rules(parse_config("{}", {})).tools == ()


def _tool_result(body: dict[str, Any]) -> str:
    for message in body["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_result":
                inner = block.get("content", "")
                return inner if isinstance(inner, str) else "".join(p["text"] for p in inner)
    raise AssertionError("no tool result in the request")


async def test_a_running_botd_offers_the_plugin_s_tool_built_through_its_spec(
    register: Register, tmp_path: Path
) -> None:
    register(clock="tests.agent.plugin_tool:SPEC")
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            "agent:\n  tools: [clock, message]\n",
            telegram_yaml(telegram, "dm_policy: open"),
        )
        call = tool_use("c1", "clock", json.dumps({}))
        model.push(stream(call, stop_reason="tool_use"), stream(text("noon")))
        async with daemon_running(config):
            telegram.push_text(42, "what time is it?")
            await until(
                lambda: any(
                    c.params["text"] == "noon"
                    for c in telegram.calls_to("sendMessage", ok_only=True)
                ),
                '"noon" sent',
            )
    # The registry's order (botd's own first), whatever the list's.
    assert [tool["name"] for tool in model.requests[0].body["tools"]] == ["message", "clock"]
    assert _tool_result(model.requests[1].body) == f"{NOW} (channels: telegram)"
