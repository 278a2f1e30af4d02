"""Drive a StreamSubscriber from the cases file's event notation and record what it emits."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from botd.channels.registry import target_forms
from botd.events import (
    AgentEnd,
    AgentEvent,
    AssistantStreamEvent,
    AutoCompactionEnd,
    AutoCompactionStart,
    Message,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    TextContent,
    ToolExecutionEnd,
    ToolExecutionStart,
)
from botd.subscriber import (
    BlockReply,
    ChunkingConfig,
    PartialReply,
    StreamSubscriber,
    SubscriberConfig,
)


def assistant(text: str | None = None, content: list[dict[str, Any]] | None = None) -> Message:
    if content is not None:
        return Message.model_validate({"role": "assistant", "content": content})
    return Message(role="assistant", content=[TextContent(text=text)] if text is not None else [])


def update(kind: str, *, delta: str | None = None, content: str | None = None) -> MessageUpdate:
    return MessageUpdate(
        message=Message(role="assistant"),
        assistant_event=AssistantStreamEvent(type=kind, delta=delta, content=content),  # type: ignore[arg-type]
    )


def delta(text: str) -> MessageUpdate:
    return update("text_delta", delta=text)


def text_end(content: str | None = None) -> MessageUpdate:
    return update("text_end", content=content)


def message_start() -> MessageStart:
    return MessageStart(message=Message(role="assistant"))


def message_end(text: str | None = None, content: list[dict[str, Any]] | None = None) -> MessageEnd:
    return MessageEnd(message=assistant(text, content))


def tool_start(call_id: str, name: str, args: dict[str, Any]) -> ToolExecutionStart:
    return ToolExecutionStart(tool_call_id=call_id, tool_name=name, args=args)


def tool_end(
    call_id: str, name: str, result: Any = "ok", is_error: bool = False
) -> ToolExecutionEnd:
    return ToolExecutionEnd(tool_call_id=call_id, tool_name=name, result=result, is_error=is_error)


def case_event(spec: dict[str, Any]) -> AgentEvent:
    """One event of the cases file's notation (spec subscriber.md, section 15)."""
    kind = spec["type"]
    if kind == "message_start":
        return message_start()
    if kind == "text_delta":
        return delta(spec["delta"])
    if kind in ("text_end", "text_start"):
        return update(kind, content=spec.get("content"), delta=spec.get("delta"))
    if kind == "message_end":
        return message_end(spec.get("text"), spec.get("content"))
    if kind == "tool_execution_start":
        return tool_start(spec["toolCallId"], spec["toolName"], spec.get("args", {}))
    if kind == "tool_execution_end":
        return tool_end(
            spec["toolCallId"], spec["toolName"], spec.get("result"), spec.get("isError", False)
        )
    if kind == "auto_compaction_start":
        return AutoCompactionStart()
    if kind == "auto_compaction_end":
        return AutoCompactionEnd(will_retry=spec.get("willRetry", False))
    if kind == "agent_end":
        return AgentEnd()
    raise ValueError(f"unknown case event {kind}")


@dataclass
class Recorder:
    """A subscriber with every callback wired to a log of what it emitted, in order."""

    config: SubscriberConfig = field(default_factory=SubscriberConfig)
    block_replies_on: bool = True
    partial_replies_on: bool = True
    reasoning_on: bool = True
    blocks: list[BlockReply] = field(default_factory=list)
    partials: list[PartialReply] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    flushes: int = 0
    order: list[str] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.config.target_forms:  # as the daemon builds it: the channels' target forms
            self.config = replace(self.config, target_forms=target_forms())
        self.sub = StreamSubscriber(
            self.config,
            on_block_reply=self._on_block if self.block_replies_on else None,
            on_block_flush=self._on_flush,
            on_partial_reply=self._on_partial if self.partial_replies_on else None,
            on_reasoning=self._on_reasoning if self.reasoning_on else None,
        )

    def _on_block(self, reply: BlockReply) -> None:
        self.blocks.append(reply)
        self.order.append("block")

    def _on_flush(self) -> None:
        self.flushes += 1
        self.order.append("flush")

    def _on_partial(self, partial: PartialReply) -> None:
        self.partials.append(partial)

    def _on_reasoning(self, text: str) -> None:
        self.reasoning.append(text)

    def feed(self, *events: AgentEvent) -> Recorder:
        for event in events:
            if isinstance(event, MessageEnd):
                self.messages.append(event.message)
            self.sub.handle(event)
        return self

    @property
    def texts(self) -> list[str]:
        return [b.text for b in self.blocks]


def config_from_case(case_config: dict[str, Any]) -> SubscriberConfig:
    chunking = case_config.get("chunking")
    return SubscriberConfig(
        block_break=case_config.get("blockReplyBreak", "text_end"),
        chunking=(
            ChunkingConfig(
                chunking["minChars"],
                chunking["maxChars"],
                chunking.get("breakPreference", "paragraph"),
            )
            if chunking
            else None
        ),
        reasoning=case_config.get("reasoningMode", "off"),
        enforce_final_tag=case_config.get("enforceFinalTag", False),
        target_forms=target_forms(),
    )


def chunking(min_chars: int, max_chars: int, preference: str = "paragraph") -> SubscriberConfig:
    return SubscriberConfig(chunking=ChunkingConfig(min_chars, max_chars, preference))  # type: ignore[arg-type]


def no_chunking(**kwargs: Any) -> SubscriberConfig:
    return SubscriberConfig(chunking=None, **kwargs)


# Cases that assert what botd's contract does not expose (the issue allows skipping these).
NOT_EXPOSED = {
    "tool-summary-verbose-on": "tool-summary formatting is not part of the contract",
    "tool-summary-callback-overrides-verbose": "tool-summary formatting is not in the contract",
    "compaction-events-emitted": "the agent event bus is not part of the contract",
}


def case_callbacks(case: dict[str, Any]) -> dict[str, bool]:
    """Which of the subscriber's callbacks ``case`` turns on."""
    config = case["config"]
    mentions_blocks = any(
        k.startswith("blockRepl") for step in [case["expect"]] for k in step
    ) or any(
        k.startswith("blockRepl")
        for e in case["events"]
        if e["type"] == "checkpoint"
        for k in e["expect"]
    )
    return {
        "block_replies_on": config.get("onBlockReply", mentions_blocks),
        "partial_replies_on": bool(config.get("onPartialReply") or config.get("onAgentEvent")),
        "reasoning_on": bool(config.get("onReasoningStream")),
    }
