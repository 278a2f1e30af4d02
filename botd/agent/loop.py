"""The agent loop: one run of model calls and tool calls, emitted as agent events.

A run starts from a conversation's history and a prompt (the new user messages). Each turn
calls the provider with everything so far; when the model stops to use tools, the tool calls
run in order, their results are appended, and the next turn begins. The run ends when the
model stops for any other reason, when the turn budget is spent, on an error, or when it is
cancelled. Every step is reported through ``emit`` as an agent event (``botd.events``):
``agent_start``, then per turn ``turn_start``, each message's ``message_start`` /
``message_update`` / ``message_end``, each tool's ``tool_execution_start`` / ``_update`` /
``_end``, ``turn_end``; ``agent_end`` is always the last event.

Messages can reach a running run through ``steer()`` (the conversation's steer queue
mode): they are checked after each tool call. The remaining tool calls of the turn are skipped
with an error result, and the steering messages go in before the next model call. Steering
that arrives while the model writes a plain answer is injected once it finishes, and the run
goes on.

A run offered a tool that reads from outside (``tools.untrusted``) sends the system prompt
with a note after it saying what the untrusted marker around such results means.

Prompt and steering messages are added as the very objects given (callers may match them by
identity).

A model call refused because of images in the request (``AssistantResult.refused_images``)
does not end the run the first time: those images are left out of everything the run sends
(the history, the prompt, tool results: ``media.history.without_images``), ``on_images_left_out``
is told (so the caller can leave them out of what it keeps too), and the call is made once
more, in the same turn. The refused attempt is reported by its ``message_end`` but not added
to the run's messages. A second refusal ends the run with its error like any failed call;
the images it names are left out all the same, so the next run does not meet them.

A model call refused because the request is longer than the model's context window
(``is_context_overflow``: Anthropic's "prompt is too long", OpenAI's
``context_length_exceeded``) is compacted and asked again, once per run, when the run was
given a ``compact`` callback: the refused attempt's ``message_end`` is reported (it is not
kept), then ``auto_compaction_start``; ``compact`` folds the history the run started from
into a shorter one (the run's own messages are kept as they are); ``auto_compaction_end``
says whether the call is made again (``will_retry``). A consumer that gathered the run's
output so far starts over at a retry (the subscriber does), and the call is made once more
in the same turn. When nothing could be compacted, or the retry is refused too, the run
ends with the error like any failed call.

A tool call can be held for a decision before it runs (``gate``: ``botd.approvals`` asks a
person): the gate's answer is the call's result instead of the tool's, or None to run it. The
wait runs as an inner task like the tool, so ``cancel()`` ends it with the run; a gate that
fails leaves the tool not run, with an error result.

A resumed run (no prompt) whose history ends with an assistant message whose calls lack
results (kept by the store only for a call held by the gate, ``resumable_prefix``) goes on
with those calls first, in order, as the interrupted attempt would have: the gate finds its
decision by the same call id.

Cancellation: ``cancel()`` stops the provider stream or the running tool (both run as inner
tasks, so cancelling them never touches the task that runs ``run()``), and the run ends with
``stop_reason="cancelled"``. When the task running ``run()`` is itself cancelled (shutdown),
the same closing events are emitted and ``CancelledError`` propagates. Either way the
transcript stays well formed: every tool call of the last assistant message gets a result.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

import jsonschema

from ..chat import Target, storable
from ..cluster.fencing import RunScope
from ..events import (
    AgentEnd,
    AgentEvent,
    AgentStart,
    AssistantStreamEvent,
    AutoCompactionEnd,
    AutoCompactionStart,
    ContentBlock,
    Message,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    TurnEnd,
    TurnStart,
    storable_event,
    storable_message,
)
from ..media.history import without_image, without_images
from ..ops.logging import mask_secrets
from .tools.base import Tool, ToolContext, ToolOutput, schema_validator
from .tools.untrusted import reads_untrusted, system_with_note
from .types import STOP_REASONS, AssistantResult, ModelRequest, Provider, StopReason, ToolDefinition

log = logging.getLogger(__name__)

_T = TypeVar("_T")

SKIPPED_TEXT = "Skipped: a new user message arrived"
CANCELLED_TEXT = "Cancelled: the run was stopped"

ToolGate = Callable[[ToolCallContent, ToolContext], Coroutine[Any, Any, ToolOutput | None]]
"""Asked before a tool call runs: None lets it run; a ``ToolOutput`` is the call's result
instead, and the tool does not run."""

Compact = Callable[[list[Message], list[Message]], Coroutine[Any, Any, list[Message] | None]]
"""Given the history a run started from and the run's messages so far, the history folded
into a shorter one (a summary and the recent turns), or None when it cannot be shortened."""

_CONTEXT_OVERFLOW = (
    "prompt is too long",  # Anthropic: "prompt is too long: 215000 tokens > 200000 maximum"
    "exceed context limit",  # Anthropic: "input length and `max_tokens` exceed context limit"
    "context_length_exceeded",  # OpenAI's error code
    "maximum context length",  # OpenAI, vLLM: "This model's maximum context length is …"
    "exceeds the context window",  # OpenAI Responses-style wording
    "exceeds the available context size",  # llama.cpp server
)
_NOT_OVERFLOW = ("rate limit", "per min")
"""A rate limit on tokens per minute mentions tokens and limits too; it is not an overflow."""


def is_context_overflow(error_message: str | None) -> bool:
    """Whether a failed call's error says the request was too long for the model's window."""
    text = (error_message or "").lower()
    if not text or any(words in text for words in _NOT_OVERFLOW):
        return False
    return any(words in text for words in _CONTEXT_OVERFLOW)


@dataclass(frozen=True)
class LoopConfig:
    """How a run calls its model and tools."""

    model: str
    system: str = ""
    max_tokens: int = 4096
    thinking_budget: int | None = None
    max_turn_requests: int = 25
    """Model calls allowed in one run; the run stops with ``max_turn_requests`` after that."""
    tool_timeout: float = 120.0
    """Seconds a tool call may take when the tool sets no ``timeout`` of its own."""


@dataclass
class RunResult:
    """How a run ended and what it added to the conversation."""

    stop_reason: StopReason
    messages: list[Message]
    """Every message the run added, in order: prompt, assistant, tool results, injected."""
    usage: dict[str, int] = field(default_factory=dict)
    """Token counts summed over the run's model calls (keys as the provider reports them)."""
    error_message: str | None = None


class AgentTurn(Protocol):
    """What a conversation holds of a run under way, whatever answers it: botd's own loop
    (``AgentRun``) or an external agent's turn (``botd.agent.acp``). Each runs once: its
    events go to the ``emit`` it was made with, ``agent_end`` last."""

    @property
    def messages(self) -> list[Message]:
        """What the run has added so far (also after a crash, for persistence)."""
        ...

    @property
    def running(self) -> bool: ...

    def steer(self, message: Message) -> None:
        """A message for the run while it runs (the ``steer`` queue mode)."""
        ...

    def cancel(self) -> None:
        """Stop the run; ``run()`` then returns with ``stop_reason="cancelled"``."""
        ...

    async def run(self, history: list[Message], prompt: list[Message]) -> RunResult:
        """Run to the end from ``history`` with ``prompt`` (empty: a resumed run, whose
        user turn ends ``history``)."""
        ...


class _Cancelled(Exception):
    """Internal: the run was cancelled through ``AgentRun.cancel``."""


class _PartialAssistant:
    """The assistant message as it streams, so a cancelled or failed call keeps its text."""

    def __init__(self) -> None:
        # content_index -> (kind, pieces); kinds are "text" and "thinking".
        self._blocks: dict[int, tuple[str, list[str]]] = {}
        self._next_index = 0

    def feed(self, event: AssistantStreamEvent) -> None:
        kind = event.type
        if kind.startswith("text_"):
            self._feed(event, "text")
        elif kind.startswith("thinking_"):
            self._feed(event, "thinking")

    def _feed(self, event: AssistantStreamEvent, block_kind: str) -> None:
        index = event.content_index
        if index is None:
            index = self._next_index if event.type.endswith("_start") else self._next_index - 1
            index = max(index, 0)
        self._next_index = max(self._next_index, index + 1)
        _, pieces = self._blocks.setdefault(index, (block_kind, []))
        if event.type.endswith("_delta"):
            if event.delta:
                pieces.append(event.delta)
        elif event.content:
            # text_start/text_end may carry the whole text: it replaces what streamed.
            pieces[:] = [event.content]

    def message(self) -> list[ContentBlock]:
        content: list[ContentBlock] = []
        for index in sorted(self._blocks):
            kind, pieces = self._blocks[index]
            joined = "".join(pieces)
            if not joined:
                continue
            if kind == "text":
                content.append(TextContent(text=joined))
            else:
                content.append(ThinkingContent(thinking=joined))
        return content


def _format_seconds(seconds: float) -> str:
    return f"{seconds:g}"


def _describe_schema_errors(errors: list[jsonschema.ValidationError]) -> str:
    lines = []
    for error in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path]):
        where = "/".join(str(p) for p in error.absolute_path)
        lines.append(f"- {where}: {error.message}" if where else f"- {error.message}")
    return "\n".join(lines)


class AgentRun:
    """One run of the agent loop (see the module docstring). Each instance runs once."""

    def __init__(
        self,
        provider: Provider,
        tools: Sequence[Tool],
        config: LoopConfig,
        emit: Callable[[AgentEvent], None],
        *,
        conversation_key: str = "",
        origin: Target | None = None,
        scope: RunScope | None = None,
        on_cancel: Callable[[], None] | None = None,
        on_images_left_out: Callable[[frozenset[str], list[Message]], Awaitable[None]]
        | None = None,
        compact: Compact | None = None,
        gate: ToolGate | None = None,
    ) -> None:
        self._provider = provider
        self._gate = gate
        self._compact = compact
        """Shortens the history when the model refuses a request for its length."""
        self._compacted = False
        self._on_cancel = on_cancel
        self._on_images_left_out = on_images_left_out
        """Called with the base64 data of images the model refused and the messages that
        held them, before the run leaves them out (see the module docstring)."""
        self._asked_again = False
        self._config = config
        self._emit_callback = emit
        self._scope = scope if scope is not None else RunScope(conversation_key)
        """What the run's tools are told they run under (``ToolContext.scope``)."""
        self._origin = origin

        self._tools: dict[str, Tool] = {}
        self._validators: dict[str, jsonschema.Draft202012Validator] = {}
        for tool in tools:
            name = tool.spec.name
            if name in self._tools:
                raise ValueError(f"two tools are named {name!r}")
            try:
                self._validators[name] = schema_validator(tool.spec.input_schema)
            except jsonschema.SchemaError as exc:
                raise ValueError(
                    f"tool {name!r} has an invalid input schema: {exc.message}"
                ) from exc
            self._tools[name] = tool
        self._tool_specs: list[ToolDefinition] = [tool.spec for tool in self._tools.values()]
        offers_untrusted = any(reads_untrusted(tool) for tool in self._tools.values())
        self._system = system_with_note(config.system, offers_untrusted)
        """The system prompt sent: the configured one, and what the untrusted marker means
        when a tool reads from outside (``tools.untrusted``)."""

        self._history: list[Message] = []
        self._messages: list[Message] = []
        self._steering: list[Message] = []
        self._usage: dict[str, int] = {}
        self._requests_made = 0

        self._started = False
        self._running = False
        self._cancel_requested = False
        self._inner: asyncio.Task[Any] | None = None

        # What is in flight, so that closing events can be emitted from any point.
        self._turn_open = False
        self._turn_message: Message | None = None
        self._turn_results: list[Message] = []
        self._partial: _PartialAssistant | None = None
        self._pending_calls: list[ToolCallContent] = []
        self._running_call: ToolCallContent | None = None

    # -- public control ----------------------------------------------------------------------

    @property
    def messages(self) -> list[Message]:
        """What the run has added so far (also after a crash, for persistence)."""
        return list(self._messages)

    @property
    def running(self) -> bool:
        return self._running

    def steer(self, message: Message) -> None:
        """Inject ``message`` at the next tool boundary, skipping the turn's remaining calls."""
        self._steering.append(message)

    def cancel(self) -> None:
        """Stop the run promptly; ``run()`` then returns with ``stop_reason="cancelled"``.
        ``on_cancel`` is called once, now: before the run's closing events."""
        on_cancel, self._on_cancel = self._on_cancel, None
        self._cancel_requested = True
        try:
            if on_cancel is not None:
                on_cancel()
        except Exception:
            log.exception("on_cancel failed")
        if self._inner is not None and not self._inner.done():
            self._inner.cancel()

    # -- the run -----------------------------------------------------------------------------

    async def run(self, history: list[Message], prompt: list[Message]) -> RunResult:
        """Run the loop to its end; see the module docstring for how it ends."""
        if self._started:
            raise RuntimeError("an AgentRun runs only once; create a new one")
        self._started = True
        self._running = True
        self._history = list(history)
        try:
            return await self._run(prompt)
        except asyncio.CancelledError:
            self._close("cancelled", None)
            raise
        except _Cancelled:
            return self._finish("cancelled")
        finally:
            self._running = False

    async def _run(self, prompt: list[Message]) -> RunResult:
        self._emit(AgentStart())
        self._start_turn()
        for message in prompt:
            self._add_message(message)
        # Steering queued before the run started goes in with the prompt.
        self._inject(self._take_steering())
        unanswered = [] if prompt else _unanswered_calls(self._history)
        if unanswered:  # a resumed run goes on with the calls its attempt had not answered
            log.info("resuming %d unanswered tool call(s)", len(unanswered))
            await self._run_tool_calls(unanswered)
            self._end_turn()

        while True:
            self._check_cancelled()
            if self._requests_made >= self._config.max_turn_requests:
                return self._finish("max_turn_requests")
            if not self._turn_open:
                self._start_turn()
                self._inject(self._take_steering())

            assistant = await self._call_model()
            if assistant is None:
                continue  # images the model refused are left out: ask again
            stop_reason = self._stop_reason_of(assistant)
            if stop_reason == "error":
                return self._finish("error", assistant.error_message or "the model call failed")
            if stop_reason == "cancelled":
                raise _Cancelled
            if stop_reason == "tool_use":
                calls = assistant.tool_calls()
                await self._run_tool_calls(calls)
            self._end_turn()

            # Steering left in the queue goes in at the next turn's start.
            if stop_reason == "tool_use" or self._steering:
                continue
            return self._finish(stop_reason)

    # -- turns and messages ------------------------------------------------------------------

    def _emit(self, event: AgentEvent) -> None:
        try:
            self._emit_callback(event)
        except Exception:  # a consumer's bug must not break the run or its transcript
            log.exception("event consumer failed on %s", event.type)

    def _start_turn(self) -> None:
        self._turn_open = True
        self._turn_message = None
        self._turn_results = []
        self._emit(TurnStart())

    def _end_turn(self) -> None:
        if not self._turn_open:
            return
        self._turn_open = False
        self._emit(TurnEnd(message=self._turn_message, tool_results=list(self._turn_results)))

    def _add_message(self, message: Message) -> None:
        self._messages.append(message)
        self._emit(MessageStart(message=message))
        self._emit(MessageEnd(message=message))

    def _take_steering(self) -> list[Message]:
        taken = self._steering
        self._steering = []
        return taken

    def _inject(self, messages: list[Message]) -> None:
        for message in messages:
            self._add_message(message)

    def _check_cancelled(self) -> None:
        if self._cancel_requested:
            raise _Cancelled

    def _finish(self, stop_reason: StopReason, error_message: str | None = None) -> RunResult:
        self._close(stop_reason, error_message)
        return RunResult(
            stop_reason=stop_reason,
            messages=list(self._messages),
            usage=dict(self._usage),
            error_message=error_message,
        )

    def _close(self, stop_reason: StopReason, error_message: str | None) -> None:
        """The closing events from wherever the run stopped: partial message, tools, turn."""
        if self._partial is not None:
            partial = Message(
                role="assistant",
                content=self._partial.message(),
                stop_reason=stop_reason,
                error_message=error_message,
                model=self._config.model,
                provider=self._provider.name,
                timestamp=_now_ms(),
            )
            self._partial = None
            self._messages.append(partial)
            self._turn_message = partial
            self._emit(MessageEnd(message=partial))
        # Every tool call of the last assistant message gets a result, so the transcript
        # can be sent to a model again.
        if self._running_call is not None:
            call, self._running_call = self._running_call, None
            self._record_result(call, ToolOutput(CANCELLED_TEXT, True, {"status": "cancelled"}))
        while self._pending_calls:
            call = self._pending_calls.pop(0)
            self._emit_tool_start(call)
            self._record_result(call, ToolOutput(CANCELLED_TEXT, True, {"status": "cancelled"}))
        self._end_turn()
        self._emit(AgentEnd(messages=list(self._messages)))

    # -- model calls -------------------------------------------------------------------------

    async def _call_model(self) -> Message | None:
        """One model call, its message added to the run; None when the call is to be made
        again: the model refused images of the request for the first time (they are left
        out), or refused it for its length and the history was compacted."""
        request = ModelRequest(
            model=self._config.model,
            messages=self._history + self._messages,
            system=self._system,
            tools=list(self._tool_specs),
            max_tokens=self._config.max_tokens,
            thinking_budget=self._config.thinking_budget,
        )
        self._requests_made += 1
        self._partial = _PartialAssistant()
        self._emit(MessageStart(message=Message(role="assistant")))
        refused = frozenset[str]()
        try:
            result = await self._in_inner_task(self._consume_stream(request))
            message, refused = result.message, result.refused_images
        except (asyncio.CancelledError, _Cancelled):
            raise
        except Exception as exc:  # providers report failures as results; a buggy one may raise
            log.warning("provider %s raised: %s", self._provider.name, exc, exc_info=True)
            error = str(exc) or type(exc).__name__
            assert self._partial is not None
            message = Message(
                role="assistant",
                content=self._partial.message(),
                stop_reason="error",
                error_message=error,
            )
        self._partial = None
        message = self._complete(message)
        self._add_usage(message.usage)
        if refused and message.stop_reason == "error" and await self._leave_out(refused):
            self._emit(MessageEnd(message=message))  # the refused attempt, not kept
            return None
        overflow = message.stop_reason == "error" and is_context_overflow(message.error_message)
        if overflow and self._compact is not None and not self._compacted:
            self._emit(MessageEnd(message=message))  # the refused attempt, not kept yet
            if await self._compact_history():
                return None
            self._messages.append(message)  # the run ends with the refusal
            self._turn_message = message
            return message
        self._messages.append(message)
        self._turn_message = message
        self._emit(MessageEnd(message=message))
        return message

    async def _compact_history(self) -> bool:
        """Compact the history between the compaction events; whether to ask again."""
        assert self._compact is not None
        self._compacted = True
        log.warning("the model refused the request for its length; compacting the history")
        self._emit(AutoCompactionStart())
        shorter: list[Message] | None = None
        try:
            shorter = await self._in_inner_task(self._compact(self._history, self.messages))
        except (asyncio.CancelledError, _Cancelled):
            self._emit(AutoCompactionEnd(will_retry=False))
            raise
        except Exception:  # the run ends with the refusal, as without compaction
            log.exception("compacting the history failed")
        if shorter is None:
            log.warning("the history could not be compacted; the run ends with the refusal")
        else:
            log.info(
                "history compacted (%d messages, now %d), asking again",
                len(self._history),
                len(shorter),
            )
            self._history = list(shorter)
        self._emit(AutoCompactionEnd(will_retry=shorter is not None))
        return shorter is not None

    async def _leave_out(self, refused: frozenset[str]) -> bool:
        """Leave the images ``refused`` out of the run; whether to ask the model again (only
        the first time: a second refusal ends the run)."""
        held = [m for m in (*self._history, *self._messages) if without_image(m, refused)]
        log.warning(
            "the model refused %d image(s) of the request; left out%s",
            len(refused),
            "" if self._asked_again else ", asking again",
        )
        if self._on_images_left_out is not None:
            try:
                await self._on_images_left_out(refused, held)
            except Exception:  # the run still goes on without them
                log.exception("on_images_left_out failed")
        self._history = without_images(self._history, refused)
        self._messages = without_images(self._messages, refused)
        ask_again, self._asked_again = not self._asked_again, True
        return ask_again

    async def _consume_stream(self, request: ModelRequest) -> AssistantResult:
        update_message = Message(role="assistant")  # shared by every update: no copies
        partial = self._partial
        assert partial is not None
        stream = self._provider.stream(request)
        try:
            # What the model wrote is made storable here, whichever provider streamed it.
            async for item in stream:
                if isinstance(item, AssistantResult):
                    return replace(item, message=storable_message(item.message))
                item = storable_event(item)
                partial.feed(item)
                self._emit(MessageUpdate(message=update_message, assistant_event=item))
                # A stream that never waits (cached, scripted) would not see the task's
                # cancellation until it ends: stop here instead.
                if self._cancel_requested:
                    raise _Cancelled
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()
        raise RuntimeError("the provider's stream ended without a result")

    def _complete(self, message: Message) -> Message:
        """The provider's message with what the transcript needs filled in."""
        missing: dict[str, Any] = {}
        if message.error_message:  # may quote a secret (so may a tool's error): masked
            missing["error_message"] = mask_secrets(message.error_message)
        if message.model is None:
            missing["model"] = self._config.model
        if message.provider is None:
            missing["provider"] = self._provider.name
        if message.timestamp is None:
            missing["timestamp"] = _now_ms()
        return message.model_copy(update=missing) if missing else message

    def _stop_reason_of(self, message: Message) -> StopReason:
        reason = message.stop_reason
        has_calls = bool(message.tool_calls())
        if reason is None:
            return "tool_use" if has_calls else "end_turn"
        if reason not in STOP_REASONS:
            log.warning("provider %s gave an unknown stop reason %r", self._provider.name, reason)
            return "error"
        if reason == "tool_use" and not has_calls:
            return "end_turn"  # nothing to run: the answer is complete as it is
        return reason  # type: ignore[return-value]

    def _add_usage(self, usage: dict[str, Any] | None) -> None:
        for key, value in (usage or {}).items():
            if isinstance(value, int) and not isinstance(value, bool):
                self._usage[key] = self._usage.get(key, 0) + value

    # -- tool calls --------------------------------------------------------------------------

    async def _run_tool_calls(self, calls: list[ToolCallContent]) -> None:
        """Run the calls in order; steering queued after a call skips the rest."""
        self._pending_calls = list(calls)
        skip_rest = False
        while self._pending_calls:
            self._check_cancelled()
            call = self._pending_calls.pop(0)
            self._emit_tool_start(call)
            if skip_rest:
                self._record_result(call, ToolOutput(SKIPPED_TEXT, True, {"status": "skipped"}))
                continue
            self._running_call = call
            output = await self._execute(call)
            self._running_call = None
            self._record_result(call, output)
            skip_rest = bool(self._steering)

    def _emit_tool_start(self, call: ToolCallContent) -> None:
        self._emit(
            ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.arguments)
        )

    def _record_result(self, call: ToolCallContent, output: ToolOutput) -> None:
        output = replace(output, text=mask_secrets(output.text)) if output.is_error else output
        if (text := storable(output.text)) is not output.text:
            # Whatever the tool read (a page, a file, a server's answer): the model and the
            # transcript get the same text, a NUL or half a surrogate pair as U+FFFD.
            output = replace(output, text=text)
        self._emit(
            ToolExecutionEnd(
                tool_call_id=call.id,
                tool_name=call.name,
                result=output.payload(),
                is_error=output.is_error,
            )
        )
        message = Message(
            role="tool_result",
            content=output.content(),
            tool_call_id=call.id,
            tool_name=call.name,
            is_error=output.is_error,
            timestamp=_now_ms(),
        )
        self._turn_results.append(message)
        self._add_message(message)

    async def _execute(self, call: ToolCallContent) -> ToolOutput:
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            return _error(f"Unknown tool {call.name!r}. Available tools: {known}.")
        errors = list(self._validators[call.name].iter_errors(call.arguments))
        if errors:
            return _error(
                f"Invalid arguments for tool {call.name!r}:\n{_describe_schema_errors(errors)}\n"
                "Fix the arguments and call the tool again."
            )

        def report_progress(partial_result: object) -> None:
            self._emit(
                ToolExecutionUpdate(
                    tool_call_id=call.id,
                    tool_name=call.name,
                    args=call.arguments,
                    partial_result=partial_result,
                )
            )

        context = ToolContext(
            scope=self._scope,
            origin=self._origin,
            call_id=call.id,
            report_progress=report_progress,
        )
        if self._gate is not None:
            try:
                verdict = await self._in_inner_task(self._gate(call, context))
            except (asyncio.CancelledError, _Cancelled):
                raise
            except Exception as exc:  # not asked is not approved: the tool does not run
                log.warning("asking to run tool %s failed: %s", call.name, exc, exc_info=True)
                reason = str(exc) or type(exc).__name__
                return _error(
                    f"Tool {call.name!r} was not run: its approval could not be asked ({reason})",
                    status="not_approved",
                )
            if verdict is not None:
                return verdict
        timeout = tool.timeout if tool.timeout is not None else self._config.tool_timeout
        try:
            output = await self._in_inner_task(_run_tool(tool, call, context, timeout))
        except (asyncio.CancelledError, _Cancelled):
            raise
        except _ToolTimedOut:
            return _error(
                f"Tool {call.name!r} timed out after {_format_seconds(timeout)} s",
                status="timeout",
            )
        except Exception as exc:
            log.warning("tool %s failed: %s", call.name, exc, exc_info=True)
            return _error(f"Tool {call.name!r} failed: {str(exc) or type(exc).__name__}")
        if not isinstance(output, ToolOutput):  # a tool that ignores its protocol
            return _error(f"Tool {call.name!r} returned {type(output).__name__}, not a result")
        return output

    # -- inner tasks -------------------------------------------------------------------------

    async def _in_inner_task(self, work: Coroutine[Any, Any, _T]) -> _T:
        """Await ``work`` in its own task, so ``cancel()`` can stop it without cancelling us.

        Raises ``_Cancelled`` when it was stopped by ``cancel()``; when our own task is
        cancelled, the inner task is cancelled and awaited before ``CancelledError`` goes on.
        """
        task = asyncio.create_task(work)
        self._inner = task
        if self._cancel_requested:
            task.cancel()
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.wait({task})
            raise
        finally:
            self._inner = None
        if task.cancelled():
            if self._cancel_requested:
                raise _Cancelled
            # Cancelled by nobody we know (a tool cancelling itself): report it as a failure.
            raise RuntimeError("cancelled")
        return task.result()


def _unanswered_calls(history: Sequence[Message]) -> list[ToolCallContent]:
    """The calls of the history's last assistant message that have no result yet, when
    nothing but their results follows it (see the module docstring); else none."""
    answered: set[str] = set()
    for message in reversed(history):
        if message.role == "tool_result":
            answered.add(message.tool_call_id or "")
            continue
        if message.role != "assistant" or message.stop_reason not in (None, "tool_use"):
            return []
        return [call for call in message.tool_calls() if call.id not in answered]
    return []


class _ToolTimedOut(Exception):
    """Internal: a tool call ran past its timeout."""


async def _run_tool(
    tool: Tool, call: ToolCallContent, context: ToolContext, timeout: float
) -> ToolOutput:
    # Only our own deadline counts as a timeout; a TimeoutError the tool raises for its own
    # reasons is an ordinary failure.
    deadline = asyncio.timeout(timeout)
    try:
        async with deadline:
            return await tool.run(call.arguments, context)
    except TimeoutError:
        if deadline.expired():
            raise _ToolTimedOut from None
        raise


def _error(text: str, *, status: str = "error") -> ToolOutput:
    return ToolOutput(text=text, is_error=True, details={"status": status})


def _now_ms() -> int:
    return int(time.time() * 1000)
