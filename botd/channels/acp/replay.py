"""What a ``session/load`` sends back before it answers: the conversation as the editor saw it.

Pure: the store's reads in (``conversation_said``: the user's messages and botd's sent
pieces; ``conversation_runs``: what each run added to the transcript), the updates out, in
order; ``EditorConnection`` sends them.

* Each message the user sent is a ``user_message_chunk``; each piece botd sent an
  ``agent_message_chunk`` (set apart from the piece before it by a blank line, as a turn's
  blocks are live). A ``session/cancel``'s ``/stop`` and its answer, which the editor never
  showed, are left out.
* Each run's steps, from the transcript: per assistant message its thinking as
  ``agent_thought_chunk``s (only when ``thoughts``: the live rule,
  ``botd.channels.base.thoughts_followed``), then each tool call it made as a ``tool_call``
  followed by its last ``tool_call_update`` (``completed``, or ``failed`` for an error
  result, with the result's text): the live stream's own updates (``updates.py``).

**The order.** The inbox and the outbox keep the chat's order by time (a user's message,
the pieces answering it, the next message). A run's steps have no time comparable with its
pieces (a piece is written when the delivery gets to it, which may be after the tool its
text came before already ran), so each step is placed by its text instead: a piece is cut
from one assistant message's text, and goes after that message's thinking and before its
tool calls. Walking a run's pieces in their order, each is matched to the first message, at
or after the one the piece before matched, whose text holds the piece's (white space aside);
a piece matched to none (a notice, the "run failed" line, text the ``message`` tool posted,
a block the chunker changed) goes with the next piece that matched, or after all the run's
steps when none follows. A run's steps not yet sent go out before the piece they precede;
those after its last piece right after it, or, for a run that sent nothing, right after its
last user message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from acp import update_agent_message_text, update_user_message_text
from acp.schema import AgentMessageChunk, UserMessageChunk

from ...events import Message, TextContent, ThinkingContent
from ...store import RunSteps, SaidLine
from .updates import (
    CANCEL_ID,
    STOP_ANSWERS,
    SessionUpdate,
    thought,
    tool_call_ended,
    tool_call_written,
)

__all__ = ["ReplayUpdate", "replayed"]

ReplayUpdate = UserMessageChunk | AgentMessageChunk | SessionUpdate


@dataclass
class _Step:
    """One assistant message of a run: its updates before its text (thinking) and after it
    (tool calls), and its text as pieces are matched against it."""

    before: list[SessionUpdate] = field(default_factory=list)
    after: list[SessionUpdate] = field(default_factory=list)
    text: str = ""


@dataclass
class _Run:
    """A run being replayed: its steps, which of them went out, where its pieces belong."""

    steps: list[_Step]
    last_user: int | None
    """The place (in the said lines) of its last user message."""
    pieces: list[int]
    """The places of its pieces, in order."""
    step_of: dict[int, int] = field(default_factory=dict)
    """For each piece's place, the step it was cut from (``len(steps)``: after them all)."""
    sent: int = 0
    """How many steps went out whole."""
    opened: bool = False
    """Whether the thinking of step ``sent`` went out."""

    def up_to(self, step: int) -> list[SessionUpdate]:
        """The updates to send before a piece of ``step``: the steps before it whole, and
        its own thinking."""
        updates: list[SessionUpdate] = []
        while self.sent < min(step, len(self.steps)):
            if not self.opened:
                updates += self.steps[self.sent].before
            updates += self.steps[self.sent].after
            self.sent, self.opened = self.sent + 1, False
        if self.sent < len(self.steps) and self.sent == step and not self.opened:
            updates += self.steps[self.sent].before
            self.opened = True
        return updates

    def rest(self) -> list[SessionUpdate]:
        """The updates of the steps not sent yet (after the run's last piece)."""
        return self.up_to(len(self.steps))


def _bare(text: str) -> str:
    return "".join(text.split())


def _steps(messages: Sequence[Message], *, thoughts: bool) -> list[_Step]:
    """A run's assistant messages as steps (see the module docstring)."""
    results = {m.tool_call_id: m for m in messages if m.role == "tool_result" and m.tool_call_id}
    steps: list[_Step] = []
    for message in messages:
        if message.role != "assistant":
            continue
        step = _Step()
        for block in message.blocks():
            if isinstance(block, ThinkingContent) and thoughts and block.thinking:
                step.before.append(thought(block.thinking))
            elif isinstance(block, TextContent):
                step.text += _bare(block.text)
        for call in message.tool_calls():
            step.after.append(tool_call_written(call))
            result = results.get(call.id)
            if result is not None:
                content = [block.model_dump(mode="json") for block in result.blocks()]
                step.after.append(
                    tool_call_ended(call.id, {"content": content}, is_error=bool(result.is_error))
                )
        steps.append(step)
    return steps


def _match(run: _Run, said: Sequence[SaidLine]) -> None:
    """Which step each of ``run``'s pieces was cut from (see the module docstring)."""
    at = 0
    unmatched: list[int] = []
    for place in run.pieces:
        piece = _bare(said[place].text)
        found = next(
            (j for j in range(at, len(run.steps)) if piece and piece in run.steps[j].text), None
        )
        if found is None:
            unmatched.append(place)
            continue
        at = found
        for waiting in [*unmatched, place]:
            run.step_of[waiting] = found
        unmatched = []
    for waiting in unmatched:
        run.step_of[waiting] = len(run.steps)


def replayed(
    said: Sequence[SaidLine], runs: Sequence[RunSteps], *, thoughts: bool
) -> list[ReplayUpdate]:
    """The updates replaying a conversation that said ``said`` and ran ``runs`` (see the
    module docstring); ``thoughts``: whether the model's thinking is shown."""
    run_of: dict[int, _Run] = {}
    for steps in runs:
        made = _Run(_steps(steps.messages, thoughts=thoughts), None, [])
        for inbox_id in steps.inbox_ids:
            run_of[inbox_id] = made
    for place, line in enumerate(said):
        owner = run_of.get(line.turn) if line.turn is not None else None
        if owner is None:
            continue
        if line.by == "user":
            owner.last_user = place
        else:
            owner.pieces.append(place)
    for each in {id(run): run for run in run_of.values()}.values():
        _match(each, said)

    updates: list[ReplayUpdate] = []
    after: str | None = None
    for place, line in enumerate(said):
        run = run_of.get(line.turn) if line.turn is not None else None
        if line.by == "user":
            if (line.message_id or "").startswith(CANCEL_ID):
                after = "cancel"
                continue
            updates.append(update_user_message_text(line.text))
            if run is not None and not run.pieces and place == run.last_user:
                updates += run.rest()
        elif after == "cancel" and line.text.strip() in STOP_ANSWERS:
            continue
        else:
            if run is not None:
                updates += run.up_to(run.step_of[place])
            text = f"\n\n{line.text}" if after == "bot" else line.text
            updates.append(update_agent_message_text(text))
            if run is not None and place == run.pieces[-1]:
                updates += run.rest()
        after = line.by
    return updates
