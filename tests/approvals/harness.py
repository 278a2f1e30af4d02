"""What the approvals tests share: a model that calls the ``schedule`` tool once and then
answers, the tool results it was sent, and the requests kept in the store; and for the gate
on its own, where it posts (``Poster``) and a press (``press``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from botd.chat import Button, InboundMessage, MessageRef, Press, Target
from botd.cluster.fencing import RunScope
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


def states(state_dir: Path) -> list[str]:
    """The state of each request kept, oldest first."""
    return [row["state"] for row in requests_kept(state_dir)]


def request_posted(state_dir: Path) -> str | None:
    """The platform's id of the message carrying the (one) request's buttons, once posted."""
    rows = requests_kept(state_dir)
    refs = json.loads(rows[-1]["messages"]) if rows else []
    return str(refs[-1]["message_id"]) if refs else None


class Poster:
    """Where the gate posts: each message numbered in its chat, its buttons kept."""

    def __init__(self) -> None:
        self.posted: list[tuple[MessageRef, str, Sequence[Sequence[Button]]]] = []

    async def send_buttons(
        self,
        target: Target,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: RunScope | None = None,
    ) -> Sequence[MessageRef]:
        ref = MessageRef(target, str(100 + len(self.posted)))
        self.posted.append((ref, markdown, rows))
        return [ref]

    async def clear_buttons(
        self, ref: MessageRef, markdown: str, *, scope: RunScope | None = None
    ) -> None:
        self.posted.append((ref, markdown, ()))


def press(target: Target, message_id: str, value: str, sender: str = "5555") -> InboundMessage:
    return InboundMessage(
        channel=target.channel,
        chat_id=target.chat_id,
        sender_id=sender,
        sender_name="Eve",
        text="",
        message_id=f"press:{value}",
        conversation_key=f"telegram:{target.chat_id}",
        press=Press(f"q-{message_id}", value, message_id),
    )
