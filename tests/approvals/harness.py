"""What the approvals tests share: a model that calls the ``schedule`` tool once and then
answers, the tool results it was sent, the requests kept in the store, and a press of a
request's button as the router hands it to the ``approval:`` handler."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from botd.app import App
from botd.chat import InboundMessage, Press
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, tool_use

CALL_ID = "toolu_gate_1"
RAN = (False, "no scheduled jobs in this conversation")
"""The call's result when the tool ran (the conversation has no jobs)."""


def approvals_yaml(*lines: str) -> str:
    """An ``agent:`` section gating the ``schedule`` tool; ``lines`` are more of its keys."""
    extra = "".join(f"    {line}\n" for line in lines)
    return f"agent:\n  tools: [schedule]\n  approvals:\n    tools: [schedule]\n{extra}"


def model_calls_the_tool(model: FakeAnthropicAPI) -> None:
    """The model lists the scheduled jobs (a call needing approval), then says it is done."""
    model.push(
        stream(
            tool_use(CALL_ID, "schedule", json.dumps({"action": "list"})), stop_reason="tool_use"
        ),
        stream(text("All done.")),
    )


def tool_result(model: FakeAnthropicAPI) -> tuple[bool, str]:
    """(is_error, text) of the tool result the model was sent for the call."""
    for request in model.requests:
        for message in request.body["messages"]:
            content = message["content"]
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_result" and block["tool_use_id"] == CALL_ID:
                    inner = block["content"]
                    said = inner if isinstance(inner, str) else inner[0]["text"]
                    return bool(block.get("is_error")), said
    raise AssertionError("the model was sent no result for the call")


def requests_kept(state_dir: Path) -> list[dict[str, Any]]:
    """The approval requests in the daemon's SQLite file (read beside it, as an operator would)."""
    with sqlite3.connect(state_dir / "botd.sqlite3") as conn:
        conn.row_factory = sqlite3.Row
        return [dict(row) for row in conn.execute("SELECT * FROM approvals ORDER BY created_at")]


def press_message(
    channel: str, chat_id: str, sender_id: str, name: str, value: str, callback: str
) -> InboundMessage:
    return InboundMessage(
        channel=channel,
        chat_id=chat_id,
        sender_id=sender_id,
        sender_name=name,
        text="(pressed)",
        message_id=f"press-{callback}",
        conversation_key=f"{channel}:{chat_id}",
        is_direct=True,
        mentions_bot=True,
        press=Press(callback_id=callback, value=value, message_id="0"),
    )


async def press(daemon: App, message: InboundMessage) -> str | None:
    """The press handed to the handler the router calls for ``approval:`` values."""
    assert daemon.runtime is not None and message.press is not None
    handler = daemon.runtime.router.press_handlers.handler_for(message.press.value)
    assert handler is not None, "no handler takes approval presses"
    return await handler(message)
