"""What the ACP backend's chat tests share: botd's config driving Claude Code's ACP adapter
(``@zed-industries/claude-code-acp``, the ``claude_code_acp`` fixture) against the loopback
Anthropic fake, and the fake's answers to what Claude Code asks.

Claude Code asks the Messages API for more than the conversation's turns (a short request
of its own as a session starts); ``AgentModel`` answers those with a word and the
conversation's turns, recognized by the tools offered with them, by its script: each call
gets the next of ``turns`` (the last is given again when they run out).

The tests of what Claude Code does not exercise (terminals, several agents) drive the tiny
``shell_agent.py`` instead: ``shell_agent_yaml`` and ``shell_agent_entry`` configure it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_api import (
    FakeAnthropicAPI,
    Reply,
    ServedStream,
    stream,
    text,
    tool_use,
)
from tests.support.daemon_inprocess import ANTHROPIC_KEY

AGENT_KEY = ANTHROPIC_KEY
"""The key Claude Code asks the fake with (botd's own model's, where both ask one fake)."""
PARAGRAPHS = [f"Paragraph {n} of what the agent found." for n in range(1, 5)]
WRITE_ID = "toolu_acp_write_1"


def agent_yaml(
    entry: Path, model: FakeAnthropicAPI, home: Path, *lines: str, terminals: bool = False
) -> str:
    """An ``agent:`` section answering with Claude Code over ACP (its HOME, where it keeps
    its sessions, at ``home``); ``lines`` are more of the section's keys; ``terminals``: the
    agent may run commands through botd's terminals."""
    extra = "".join(f"  {line}\n" for line in lines)
    env = {
        "ANTHROPIC_BASE_URL": model.base_url,
        "ANTHROPIC_API_KEY": AGENT_KEY,
        "HOME": str(home),
        # Nothing but the Messages API: no telemetry, no update checks (no internet here).
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    return (
        "agent:\n"
        "  backend: acp\n"
        "  tool_progress: status\n"
        "  block_streaming: {min_chars: 10, max_chars: 200}\n"
        f"{extra}"
        "  acp:\n"
        "    command: node\n"
        f"    args: [{json.dumps(str(entry))}]\n"
        f"    env: {json.dumps(env)}\n"
        # Past the tests' hang guard: a /stop the agent did not end as cancelled fails.
        "    cancel_wait: 10m\n"
        f"    terminals: {json.dumps(terminals)}\n"
    )


def paragraphs(delay: float = 0.0) -> Reply:
    return stream(text(*(p + "\n\n" for p in PARAGRAPHS)), delay=delay)


def write_file(path: Path, content: str) -> Reply:
    """The model asks Claude Code to write ``content`` to ``path`` (its ACP file tool)."""
    arguments = json.dumps({"file_path": str(path), "content": content})
    return stream(tool_use(WRITE_ID, "mcp__acp__Write", arguments), stop_reason="tool_use")


def plan(*steps: tuple[str, str]) -> Reply:
    """The model writes its to-do list (Claude Code's ``TodoWrite``): (text, status) each;
    the ACP adapter tells it as a ``plan``."""
    todos = [{"content": c, "status": s, "activeForm": c} for c, s in steps]
    arguments = json.dumps({"todos": todos})
    return stream(tool_use("toolu_acp_plan_1", "TodoWrite", arguments), stop_reason="tool_use")


def is_turn(body: dict[str, Any]) -> bool:
    """Whether a request is a turn of the conversation (not one of Claude Code's own)."""
    # A turn offers Claude Code's shell: its own Bash, or with botd's terminals on, the one
    # run through them beside its own tools (its token count offers the ACP tools alone).
    names = {tool.get("name") for tool in body.get("tools") or []}
    return "Bash" in names or {"mcp__acp__Bash", "Glob"} <= names


class AgentModel:
    """The fake's responder for Claude Code (see the module docstring)."""

    def __init__(self, model: FakeAnthropicAPI, *turns: Reply | Callable[[], Reply]) -> None:
        self.turns = list(turns)
        self.asked: list[dict[str, Any]] = []
        """The bodies of the conversation's turns, in order."""
        model.responder = self

    def __call__(self, body: dict[str, Any]) -> Reply:
        if not is_turn(body):
            return stream(text("ok"))
        self.asked.append(body)
        turn = self.turns[min(len(self.asked), len(self.turns)) - 1]
        return turn() if callable(turn) else turn


def turn_streams(model: FakeAnthropicAPI) -> list[ServedStream]:
    """The streams the fake served for the conversation's turns, in order."""
    return [s for s in model.streams if is_turn(model.requests[s.request_index].body)]


def said(body: dict[str, Any]) -> str:
    """Everything a turn's request holds of the conversation, as one string."""
    return json.dumps(body["messages"])


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool results a turn's request sends back."""
    found = []
    for message in body["messages"]:
        content = message["content"]
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result":
                found.append(block)
    return found


SHELL_AGENT = Path(__file__).with_name("shell_agent.py")


def shell_agent_yaml(*lines: str, name: str = "agent-one") -> str:
    """An ``agent`` section answering with ``shell_agent.py`` as ``agent.acp`` (``lines``:
    more of its keys)."""
    extra = "".join(f"    {line}\n" for line in lines)
    return (
        "agent:\n"
        "  backend: acp\n"
        "  acp:\n"
        f"    command: {json.dumps(sys.executable)}\n"
        f"    args: [{json.dumps(str(SHELL_AGENT))}]\n"
        f"    env: {{AGENT_NAME: {name}}}\n"
        f"{extra}"
    )


def shell_agent_entry(name: str) -> str:
    """``shell_agent.py`` as one agent's section in flow style, answering ``who`` with ``name``."""
    return (
        f"{{command: {json.dumps(sys.executable)}, args: [{json.dumps(str(SHELL_AGENT))}], "
        f"env: {{AGENT_NAME: {name}}}}}"
    )
