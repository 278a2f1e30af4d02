"""What the agent loop's tests share: messages, an event log, an echo tool, and the check
that a run's events are well formed."""

from __future__ import annotations

from typing import Any

from botd.agent.tools.base import ToolContext, ToolOutput
from botd.agent.types import ToolDefinition
from botd.events import AgentEvent, Message, TextContent, event_to_json, parse_event_line


def user(text: str) -> Message:
    return Message(role="user", content=[TextContent(text=text)])


def text_of(message: Message) -> str:
    return "".join(b.text for b in message.blocks() if isinstance(b, TextContent))


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args}


class Events(list[AgentEvent]):
    """The events of one run, as emitted."""

    def types(self) -> list[str]:
        return [event.type for event in self]

    def of(self, kind: type[Any]) -> list[Any]:
        return [event for event in self if isinstance(event, kind)]


class EchoTool:
    """Returns its ``text`` argument; remembers its calls."""

    def __init__(self, name: str = "echo", timeout: float | None = None) -> None:
        self.spec = ToolDefinition(
            name=name,
            description="Echo the text back.",
            input_schema={
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
                "additionalProperties": False,
            },
        )
        self.timeout = timeout
        self.calls: list[tuple[dict[str, Any], ToolContext]] = []

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        self.calls.append((args, context))
        return ToolOutput(text=f"echo: {args['text']}", details={"length": len(args["text"])})


def assert_well_formed(events: Events) -> None:
    """agent_start first, agent_end last and once; turns and messages balanced."""
    types = events.types()
    assert types[0] == "agent_start"
    assert types[-1] == "agent_end"
    assert types.count("agent_end") == 1
    assert types.count("turn_start") == types.count("turn_end")
    assert types.count("message_start") == types.count("message_end")
    assert types.count("tool_execution_start") == types.count("tool_execution_end")
    # Every event survives the JSON round trip of the contract.
    for event in events:
        parsed = parse_event_line(event_to_json(event))
        assert parsed is not None and parsed.type == event.type
