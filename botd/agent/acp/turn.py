"""One turn of an ACP agent in a conversation, told as botd's agent events.

``AcpTurn`` stands where botd's own loop (``AgentRun``) stands for a run: the conversation
holds it as its ``AgentTurn``, and its events go to the same listeners (the subscriber and
its block, reply-directive and messaging-dedupe rules, the transcript writer, tool progress).
The turn sends the run's prompt as one ``session/prompt`` and turns what the agent streams
back (``session/update``) into events:

==========================  =====================================================================
ACP update                  botd events
==========================  =====================================================================
``agent_message_chunk``     an assistant message (``message_start`` once), its text block
                            (``text_start``, ``text_delta``…; ``text_end`` when it ends)
``agent_thought_chunk``     a thinking block of that message (shown per ``agent.reasoning``)
``plan``                    the step under way, to ``on_plan`` (the tool-progress status line)
``tool_call``               the assistant message so far ends (``tool_use``), then
                            ``tool_execution_start`` (once per call id)
``tool_call_update``        ``tool_execution_end`` once the call is ``completed`` or ``failed``
the prompt's response       the last assistant message ends with the stop reason (``end_turn``,
                            ``max_tokens``, ``max_turn_requests``, ``refusal``, ``cancelled``)
==========================  =====================================================================

A tool is named to the chat by the first word of the agent's title for it (``Write``,
``Read``…) or its kind, never by its arguments (tool progress shows only names). What the
turn adds to the transcript is its prompt and one assistant message holding the answer's
text: the agent keeps its own tool calls in its own session, and botd's transcript stays one
that any backend can be given.

A resumed turn (botd restarted mid-answer: no prompt) sends the user messages that end the
history again. A turn in a session the agent did not have (a new one: the first, one after
``/new``, one the agent could not load) sends first what the conversation said before, as
text (``transcript_text``): the agent starts from it instead of from nothing.

``session/request_permission`` becomes a request with one button per kind of option the agent
offers (allow once, allow always, reject), asked through botd's approvals (``ask``); a
decision picks the agent's option of that kind; a denial or no decision in time picks its
reject option. ``cancel()`` (``/stop``) sends ``session/cancel``, answers a pending
permission request ``cancelled`` and waits, at most ``cancel_wait`` seconds, for the prompt's
response: the turn ends ``cancelled`` whatever the agent answered. The agent process ending
mid-turn ends the turn with an error, one line in the chat.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    DeniedOutcome,
    ImageContentBlock,
    PermissionOption,
    RequestPermissionResponse,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

from ...acp_mapping import shared_stop_reason, tool_name
from ...approvals import Choice, Verb
from ...delivery import PlanStep
from ...events import (
    AgentEnd,
    AgentEvent,
    AgentStart,
    AssistantStreamEvent,
    ContentBlock,
    ImageContent,
    Message,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    TextContent,
    ThinkingContent,
    ToolExecutionEnd,
    ToolExecutionStart,
    TurnEnd,
    TurnStart,
)
from ...store import ApprovalState
from ..loop import RunResult
from ..types import StopReason

__all__ = ["PREFACE", "AcpTurn", "Ask", "Opened", "Sessions", "transcript_text"]

log = logging.getLogger(__name__)

Ask = Callable[[str, str, Sequence[Choice]], Awaitable[ApprovalState]]
"""Asks a person about a call (its id, its title, the buttons); returns the decision."""

PromptBlock = TextContentBlock | ImageContentBlock

_VERBS: dict[str, Verb] = {
    "allow_once": "approve",
    "allow_always": "always",
    "reject_once": "deny",
    "reject_always": "deny",
}
_CHOSEN: dict[ApprovalState, Verb] = {"approved": "approve", "always": "always"}
PREFACE = "(What was said in this conversation before this session:)"
"""The first line of the transcript a new agent session is given."""
STEP_CHARS = 80
"""The most of a plan step's text the status line shows."""
TRANSCRIPT_CHARS = 20_000
"""The most of an earlier transcript a new agent session is given (its end)."""


@dataclass(frozen=True)
class Opened:
    """A session of the agent, open for one turn."""

    session_id: str
    fresh: bool
    """A new session: the agent knows nothing of the conversation yet."""
    images: bool
    """The agent takes images in a prompt."""
    prompt: Callable[[list[PromptBlock]], Awaitable[str]]
    """Sends ``session/prompt``; returns the stop reason (raises when the agent is gone)."""
    cancel: Callable[[], Awaitable[None]]
    """Sends ``session/cancel``."""
    close: Callable[[], None]
    """The turn is over: its session's updates go nowhere any more."""


class Sessions(Protocol):
    """The agent's side of a turn (``botd.agent.acp.agent.AcpAgent``)."""

    name: str
    """The agent's name, for the transcript and the chat."""

    async def open(self, conversation_key: str, session_id: str, turn: AcpTurn) -> Opened:
        """The agent's session for botd's session ``session_id``, with ``turn`` hearing its
        updates and permission requests until ``Opened.close``."""
        ...


def transcript_text(history: Sequence[Message], limit: int = TRANSCRIPT_CHARS) -> str:
    """The text of a conversation so far, for an agent session that starts without it: each
    message's text after who said it, the newest ``limit`` characters."""
    lines: list[str] = []
    for message in history:
        if message.role not in ("user", "assistant"):
            continue
        said = "\n".join(b.text for b in message.blocks() if isinstance(b, TextContent)).strip()
        if said:
            lines.append(f"{'User' if message.role == 'user' else 'Assistant'}: {said}")
    text = "\n\n".join(lines)
    if len(text) > limit:
        text = "…" + text[-limit:]
    return text


def _now_ms() -> int:
    return int(time.time() * 1000)


class _Answer:
    """The assistant message being streamed: its blocks so far, and the one open."""

    def __init__(self) -> None:
        self.blocks: list[tuple[str, list[str]]] = []
        self.open_kind: str | None = None

    @property
    def index(self) -> int:
        return len(self.blocks) - 1

    def content(self) -> list[ContentBlock]:
        content: list[ContentBlock] = []
        for kind, pieces in self.blocks:
            joined = "".join(pieces)
            if not joined:
                continue
            content.append(
                TextContent(text=joined) if kind == "text" else ThinkingContent(thinking=joined)
            )
        return content


class AcpTurn:
    """One turn of an ACP agent (see the module docstring); an ``AgentTurn``."""

    def __init__(
        self,
        sessions: Sessions,
        conversation_key: str,
        session_id: str,
        emit: Callable[[AgentEvent], None],
        *,
        on_cancel: Callable[[], None] | None = None,
        ask: Ask | None = None,
        on_plan: Callable[[PlanStep | None], None] | None = None,
        cancel_wait: float = 30.0,
    ) -> None:
        self._sessions = sessions
        self._on_plan = on_plan
        self._conversation_key = conversation_key
        self._session_id = session_id
        self._emit = emit
        self._on_cancel = on_cancel
        self._ask = ask
        self._cancel_wait = cancel_wait
        self._messages: list[Message] = []
        self._texts: list[str] = []
        """The answer's text blocks, for the transcript's assistant message."""
        self._answer: _Answer | None = None
        self._tools: dict[str, str] = {}
        """Calls started and not ended: their names, by call id."""
        self._ended_tools: set[str] = set()
        self._asking: set[asyncio.Task[ApprovalState]] = set()
        self._opened: Opened | None = None
        self._prompting: asyncio.Task[str] | None = None
        self._telling: asyncio.Future[None] | None = None
        """The ``session/cancel`` on its way."""
        self._started = False
        self._running = False
        self._cancel_requested = False

    # -- AgentTurn ---------------------------------------------------------------------------

    @property
    def messages(self) -> list[Message]:
        return list(self._messages)

    @property
    def running(self) -> bool:
        return self._running

    def steer(self, message: Message) -> None:
        """An ACP turn takes no message once sent: it is answered by the next turn."""
        log.debug("steering is not offered by an ACP agent: the message waits for its turn")

    def cancel(self) -> None:
        on_cancel, self._on_cancel = self._on_cancel, None
        if self._cancel_requested:
            return
        self._cancel_requested = True
        if on_cancel is not None:
            try:
                on_cancel()
            except Exception:
                log.exception("on_cancel failed")
        for asking in self._asking:
            asking.cancel()
        prompting = self._prompting
        if prompting is None or prompting.done():
            return
        opened = self._opened
        if opened is not None:
            self._telling = asyncio.ensure_future(_quietly(opened.cancel()))
        # The agent ends its turn as ``cancelled``; one that does not is let go.
        asyncio.get_running_loop().call_later(self._cancel_wait, prompting.cancel)

    async def run(self, history: list[Message], prompt: list[Message]) -> RunResult:
        if self._started:
            raise RuntimeError("an AcpTurn runs only once; create a new one")
        self._started = True
        self._running = True
        try:
            return await self._run(history, prompt)
        finally:
            self._running = False
            if self._opened is not None:
                self._opened.close()

    async def _run(self, history: list[Message], prompt: list[Message]) -> RunResult:
        self._emit(AgentStart())
        self._emit(TurnStart())
        for message in prompt:
            self._messages.append(message)
            self._emit(MessageStart(message=message))
            self._emit(MessageEnd(message=message))
        asked = prompt or _trailing_user_turn(history)
        earlier = history if prompt else history[: len(history) - len(asked)]
        try:
            opened = self._opened = await self._sessions.open(
                self._conversation_key, self._session_id, self
            )
        except asyncio.CancelledError:
            self._close("cancelled", None)
            raise
        except Exception as exc:
            log.warning("the ACP agent %s could not open a session: %s", self._sessions.name, exc)
            return self._finish("error", f"the agent {self._sessions.name} is not available: {exc}")
        if self._cancel_requested:
            return self._finish("cancelled", None)
        blocks = _prompt_blocks(asked, opened.images)
        if opened.fresh and (before := transcript_text(earlier)):
            blocks.insert(0, TextContentBlock(type="text", text=f"{PREFACE}\n\n{before}"))
        prompting = self._prompting = asyncio.ensure_future(opened.prompt(blocks))
        try:
            await asyncio.wait({prompting})
        except asyncio.CancelledError:  # botd shuts down: the agent is told, the turn ends
            prompting.cancel()
            await _quietly(opened.cancel())
            self._close("cancelled", None)
            raise
        if self._cancel_requested:
            return self._finish("cancelled", None)
        if prompting.cancelled():
            return self._finish("cancelled", None)
        failure = prompting.exception()
        if failure is not None:
            log.warning("the ACP agent %s failed the turn: %r", self._sessions.name, failure)
            return self._finish("error", _failure_text(self._sessions.name, failure))
        reason = prompting.result()
        stop = shared_stop_reason(reason)
        if stop is None:
            log.warning(
                "the ACP agent %s gave an unknown stop reason %r", self._sessions.name, reason
            )
            return self._finish("error", f"the agent stopped for an unknown reason: {reason}")
        return self._finish(stop, None)

    # -- what the agent sends ----------------------------------------------------------------

    def update(self, update: Any) -> None:
        """One ``session/update`` of the turn's session."""
        if self._cancel_requested or not self._running:
            return  # a stopped run shows nothing more
        if isinstance(update, AgentMessageChunk):
            if isinstance(update.content, TextContentBlock) and update.content.text:
                self._stream("text", update.content.text)
        elif isinstance(update, AgentThoughtChunk):
            if isinstance(update.content, TextContentBlock) and update.content.text:
                self._stream("thinking", update.content.text)
        elif isinstance(update, AgentPlanUpdate):
            if self._on_plan is not None:
                self._on_plan(_step_of(update))
        elif isinstance(update, ToolCallStart):
            self._tool_started(update.tool_call_id, tool_name(update.title, update.kind))
        elif isinstance(update, ToolCallProgress):
            if update.tool_call_id not in self._tools and update.title:
                self._tool_started(update.tool_call_id, tool_name(update.title, update.kind))
            if update.status in ("completed", "failed"):
                self._tool_ended(update.tool_call_id, update.status == "failed", update)

    async def permission(
        self, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        """A ``session/request_permission`` of the turn's session, asked of a person."""
        offered: dict[Verb, str] = {}
        choices: list[Choice] = []
        for option in options:
            verb = _VERBS.get(option.kind)
            if verb is not None and verb not in offered:
                offered[verb] = option.option_id
                choices.append(Choice(option.name, verb))
        cancelled = RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        if self._cancel_requested or not self._running:
            return cancelled
        state: ApprovalState = "denied"
        if self._ask is not None and choices:
            title = tool_call.title or self._tools.get(tool_call.tool_call_id) or "a tool call"
            asking = asyncio.ensure_future(self._ask(tool_call.tool_call_id, title, choices))
            self._asking.add(asking)
            try:
                state = await asking
            except asyncio.CancelledError:
                if self._cancel_requested:
                    return cancelled
                raise
            except Exception:
                log.exception("asking about %s of the ACP agent failed", title)
            finally:
                self._asking.discard(asking)
        option_id = offered.get(_CHOSEN.get(state, "deny"))
        if option_id is None:
            return cancelled
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=option_id)
        )

    # -- events ------------------------------------------------------------------------------

    def _stream(self, kind: str, delta: str) -> None:
        answer = self._answer
        if answer is None:
            answer = self._answer = _Answer()
            self._emit(MessageStart(message=Message(role="assistant")))
        if answer.open_kind != kind:
            self._end_block(answer)
            answer.blocks.append((kind, []))
            answer.open_kind = kind
            self._update(f"{kind}_start", answer.index)
        answer.blocks[-1][1].append(delta)
        self._update(f"{kind}_delta", answer.index, delta=delta)

    def _end_block(self, answer: _Answer) -> None:
        if answer.open_kind is None:
            return
        kind, pieces = answer.blocks[-1]
        text = "".join(pieces)
        self._update(f"{kind}_end", answer.index, content=text)
        if kind == "text" and text:
            self._texts.append(text)
        answer.open_kind = None

    def _update(self, kind: str, index: int, **fields: str) -> None:
        event = AssistantStreamEvent.model_validate(
            {"type": kind, "content_index": index, **fields}
        )
        self._emit(MessageUpdate(message=Message(role="assistant"), assistant_event=event))

    def _end_answer(self, stop_reason: str, error_message: str | None) -> Message:
        answer, self._answer = self._answer, None
        if answer is not None:
            self._end_block(answer)
        message = Message(
            role="assistant",
            content=answer.content() if answer is not None else [],
            stop_reason=stop_reason,
            error_message=error_message,
            model=self._sessions.name,
            provider="acp",
            timestamp=_now_ms(),
        )
        self._emit(MessageEnd(message=message))
        return message

    def _tool_started(self, call_id: str, name: str) -> None:
        if call_id in self._tools or call_id in self._ended_tools:
            return  # the agent tells a call again as it learns more of it
        if self._answer is not None:
            self._end_answer("tool_use", None)
        self._tools[call_id] = name
        self._emit(ToolExecutionStart(tool_call_id=call_id, tool_name=name, args={}))

    def _tool_ended(self, call_id: str, failed: bool, update: ToolCallProgress) -> None:
        name = self._tools.pop(call_id, None)
        if name is None:
            return
        self._ended_tools.add(call_id)
        result = _tool_text(update) or ("failed" if failed else "done")
        self._emit(
            ToolExecutionEnd(tool_call_id=call_id, tool_name=name, result=result, is_error=failed)
        )

    def _finish(self, stop_reason: StopReason, error_message: str | None) -> RunResult:
        self._close(stop_reason, error_message)
        return RunResult(
            stop_reason=stop_reason, messages=list(self._messages), error_message=error_message
        )

    def _close(self, stop_reason: StopReason, error_message: str | None) -> None:
        """The closing events: calls still open end, the last message ends with the stop
        reason, and the transcript gets the answer's text as one assistant message."""
        for call_id, name in list(self._tools.items()):
            self._emit(
                ToolExecutionEnd(
                    tool_call_id=call_id, tool_name=name, result="not finished", is_error=True
                )
            )
        self._tools.clear()
        last = self._end_answer(stop_reason, error_message)
        if self._texts:  # every text of the answer, in one message
            last = last.model_copy(update={"content": [TextContent(text="\n\n".join(self._texts))]})
        self._messages.append(last)
        self._emit(TurnEnd(message=last, tool_results=[]))
        self._emit(AgentEnd(messages=list(self._messages)))


def _trailing_user_turn(history: Sequence[Message]) -> list[Message]:
    """The user messages that end ``history`` (a resumed run's prompt)."""
    turn: list[Message] = []
    for message in reversed(history):
        if message.role != "user":
            break
        turn.insert(0, message)
    return turn


def _prompt_blocks(messages: Sequence[Message], images: bool) -> list[PromptBlock]:
    blocks: list[PromptBlock] = []
    for message in messages:
        for block in message.blocks():
            if isinstance(block, TextContent) and block.text:
                blocks.append(TextContentBlock(type="text", text=block.text))
            elif isinstance(block, ImageContent) and images:
                blocks.append(
                    ImageContentBlock(type="image", mime_type=block.mime_type, data=block.data)
                )
    return blocks or [TextContentBlock(type="text", text="(an empty message)")]


def _step_of(plan: AgentPlanUpdate) -> PlanStep | None:
    """The step under way of ``plan``: the first in progress, else the first pending
    (None: every step done)."""
    entries = plan.entries
    for wanted in ("in_progress", "pending"):
        for number, entry in enumerate(entries, 1):
            if entry.status == wanted:
                text = " ".join(entry.content.split())
                return PlanStep(number, len(entries), text[:STEP_CHARS])
    return None


def _tool_text(update: ToolCallProgress) -> str:
    texts: list[str] = []
    for item in update.content or []:
        inner = getattr(item, "content", None)
        if isinstance(inner, TextContentBlock):
            texts.append(inner.text)
    return "\n".join(texts)


def _failure_text(name: str, failure: BaseException) -> str:
    if isinstance(failure, ConnectionError):
        return f"the agent {name} stopped; it is started again for the next message"
    return f"the agent {name} failed: {failure}"


async def _quietly(sending: Awaitable[None]) -> None:
    try:
        await sending
    except Exception as exc:
        log.debug("session/cancel not sent: %s", exc)
