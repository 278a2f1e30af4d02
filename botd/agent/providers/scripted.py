"""A provider that plays a script: offline runs, demos and tests of the core.

Each model call takes the script's next turn: optional thinking, optional text, optional tool
calls, streamed like a real model (``*_start``, deltas of ``chunk_chars`` characters,
``*_end``), then the finished message. Without a script, or once it runs out, it echoes the
last user message: ``You said: <text>``. ``delay`` seconds pass between stream events, so a
test can cancel a run mid-stream (0: the stream never sleeps).

A script can live in YAML::

    turns:
      - thinking: The user wants the time.
        text: Let me look.
        tool_calls:
          - name: clock
            args: {zone: UTC}
      - text: It is noon.

Usage figures are estimates (about four characters a token) so that runs have numbers to sum.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...events import (
    AssistantStreamEvent,
    ContentBlock,
    Message,
    TextContent,
    ThinkingContent,
    ToolCallContent,
)
from ..types import STOP_REASONS, AssistantResult, ModelRequest, ProviderError, ProviderItem


@dataclass(frozen=True)
class ScriptedTurn:
    """One model answer. ``tool_calls`` items are ``{"name": ..., "args": {...}}`` (an
    ``"id"`` is optional); ``stop_reason`` defaults to ``tool_use`` when there are tool calls,
    else ``end_turn``."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    thinking: str = ""
    stop_reason: str | None = None

    def __post_init__(self) -> None:
        if self.stop_reason is not None and self.stop_reason not in STOP_REASONS:
            known = ", ".join(sorted(STOP_REASONS))
            raise ProviderError(f"unknown stop_reason {self.stop_reason!r} (known: {known})")
        for index, call in enumerate(self.tool_calls):
            if not isinstance(call.get("name"), str) or not call["name"]:
                raise ProviderError(f"tool_calls[{index}] has no name")
            if not isinstance(call.get("args", {}), dict):
                raise ProviderError(f"tool_calls[{index}].args must be a mapping")


# --- YAML form --------------------------------------------------------------------------


class _YamlToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class _YamlTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = ""
    tool_calls: list[_YamlToolCall] = Field(default_factory=list)
    thinking: str = ""
    stop_reason: str | None = None


class _YamlScript(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turns: list[_YamlTurn]


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ""
        for part in item["loc"]:
            where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else part)
        what = "missing" if item["type"] == "missing" else item["msg"]
        parts.append(f"{where}: {what}" if where else what)
    return "; ".join(parts)


def load_script(path: str | Path) -> list[ScriptedTurn]:
    """The turns of a YAML script; ``ProviderError`` says what is wrong with a bad file."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProviderError(f"{path}: cannot read the script: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ProviderError(f"{path}: not valid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise ProviderError(f"{path}: expected a mapping with a 'turns' list")
    try:
        script = _YamlScript.model_validate(data)
    except ValidationError as exc:
        raise ProviderError(f"{path}: {_describe(exc)}") from None
    turns = []
    for index, turn in enumerate(script.turns):
        try:
            turns.append(
                ScriptedTurn(
                    text=turn.text,
                    tool_calls=[call.model_dump(exclude_none=True) for call in turn.tool_calls],
                    thinking=turn.thinking,
                    stop_reason=turn.stop_reason,
                )
            )
        except ProviderError as exc:
            raise ProviderError(f"{path}: turns[{index}]: {exc}") from None
    return turns


# --- the provider -----------------------------------------------------------------------


def _last_user_text(messages: list[Message]) -> str:
    for message in reversed(messages):
        if message.role == "user":
            return "".join(b.text for b in message.blocks() if isinstance(b, TextContent))
    return ""


def _text_of(message: Message) -> str:
    parts: list[str] = []
    for block in message.blocks():
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ThinkingContent):
            parts.append(block.thinking)
    return "".join(parts)


def _estimate_tokens(text: str) -> int:
    return (len(text) + 3) // 4


class ScriptedProvider:
    """Plays ``script`` one turn per model call, then echoes (see the module docstring)."""

    def __init__(
        self,
        script: list[ScriptedTurn] | None = None,
        *,
        chunk_chars: int = 8,
        delay: float = 0.0,
        name: str = "scripted",
    ) -> None:
        if chunk_chars < 1:
            raise ProviderError("chunk_chars must be at least 1")
        if delay < 0:
            raise ProviderError("delay must not be negative")
        self.name = name
        self._script = list(script or [])
        self._chunk_chars = chunk_chars
        self._delay = delay
        self._calls = 0
        self._tool_call_count = 0

    @classmethod
    def from_yaml(
        cls, path: str | Path, *, chunk_chars: int = 8, delay: float = 0.0, name: str = "scripted"
    ) -> ScriptedProvider:
        return cls(load_script(path), chunk_chars=chunk_chars, delay=delay, name=name)

    @property
    def calls(self) -> int:
        """How many model calls this provider has answered."""
        return self._calls

    async def aclose(self) -> None:
        return None

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderItem]:
        # The turn is taken now, not when iteration starts, so calls get turns in call order.
        turn = self._next_turn(request)
        return self._play(turn, request)

    def _next_turn(self, request: ModelRequest) -> ScriptedTurn:
        index = self._calls
        self._calls += 1
        if index < len(self._script):
            return self._script[index]
        return ScriptedTurn(text=f"You said: {_last_user_text(request.messages)}")

    async def _play(self, turn: ScriptedTurn, request: ModelRequest) -> AsyncIterator[ProviderItem]:
        content: list[ContentBlock] = []
        first = True

        async def pause() -> None:
            if self._delay > 0:
                await asyncio.sleep(self._delay)

        def event(kind: str, **fields: Any) -> AssistantStreamEvent:
            return AssistantStreamEvent.model_validate(
                {"type": kind, "content_index": len(content), **fields}
            )

        for kind, text in (("thinking", turn.thinking), ("text", turn.text)):
            if not text:
                continue
            if not first:
                await pause()
            first = False
            yield event(f"{kind}_start")
            for start in range(0, len(text), self._chunk_chars):
                await pause()
                yield event(f"{kind}_delta", delta=text[start : start + self._chunk_chars])
            await pause()
            yield event(f"{kind}_end", content=text)
            content.append(
                ThinkingContent(thinking=text) if kind == "thinking" else TextContent(text=text)
            )

        for call in turn.tool_calls:
            if not first:
                await pause()
            first = False
            self._tool_call_count += 1
            block = ToolCallContent(
                id=str(call.get("id") or f"call_{self._tool_call_count}"),
                name=call["name"],
                arguments=dict(call.get("args", {})),
            )
            yield event("toolcall_start")
            await pause()
            yield event("toolcall_end", content=json.dumps(block.arguments))
            content.append(block)

        stop_reason = turn.stop_reason or ("tool_use" if turn.tool_calls else "end_turn")
        usage = {
            "input_tokens": _estimate_tokens(request.system)
            + sum(_estimate_tokens(_text_of(m)) for m in request.messages),
            "output_tokens": _estimate_tokens(turn.text) + _estimate_tokens(turn.thinking),
        }
        await pause()
        yield AssistantResult(
            Message(
                role="assistant",
                content=content,
                stop_reason=stop_reason,
                error_message="scripted error" if stop_reason == "error" else None,
                usage=usage,
                model=request.model,
                provider=self.name,
            )
        )
