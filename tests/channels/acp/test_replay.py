"""What a ``session/load`` replays (``botd.channels.acp.replay``), from what the store reads
back: the user's messages and botd's pieces in the chat's order, each run's thoughts (only
when shown) and tool calls with their outcome placed by the text of the pieces, a piece
matched to no message kept beside the next one or after the run, a cancel's ``/stop`` and
its answer left out."""

from __future__ import annotations

from typing import Any

from botd.channels.acp.replay import ReplayUpdate, replayed
from botd.channels.acp.updates import CANCEL_ID
from botd.events import ContentBlock, Message, TextContent, ThinkingContent, ToolCallContent
from botd.store import RunSteps, SaidLine


def user(text: str, turn: int, at: float, message_id: str = "m") -> SaidLine:
    return SaidLine("user", text, at, message_id, turn)


def bot(text: str, turn: int, at: float) -> SaidLine:
    return SaidLine("bot", text, at, turn=turn)


def assistant(*blocks: ContentBlock) -> Message:
    return Message(role="assistant", content=list(blocks))


def call(call_id: str, name: str = "web_fetch") -> ToolCallContent:
    return ToolCallContent(id=call_id, name=name, arguments={"url": f"http://{call_id}"})


def result(call_id: str, text: str, *, error: bool = False) -> Message:
    return Message(
        role="tool_result",
        content=[TextContent(text=text)],
        tool_call_id=call_id,
        tool_name="web_fetch",
        is_error=error,
    )


def shown(updates: list[ReplayUpdate]) -> list[tuple[str, Any]]:
    """Each update as (kind, what it says): a chunk's text, a call's id and status."""
    out: list[tuple[str, Any]] = []
    for update in updates:
        data = update.model_dump(by_alias=True, exclude_none=True)
        kind = data["sessionUpdate"]
        if kind in ("tool_call", "tool_call_update"):
            out.append((kind, (data["toolCallId"], data.get("status"))))
        else:
            out.append((kind, data["content"]["text"]))
    return out


TWO_STEPS = RunSteps(
    (1,),
    (
        assistant(
            ThinkingContent(thinking="Which page?"),
            TextContent(text="Let me look it up."),
            call("c1"),
        ),
        result("c1", "the page"),
        assistant(ThinkingContent(thinking="Got it."), TextContent(text="It says hello.\n\nBye.")),
    ),
)


def test_a_runs_thoughts_and_tool_calls_go_between_the_pieces_they_came_between() -> None:
    # The first piece was written after the tool ran (the delivery's own pace): its text
    # still puts it before the call.
    said = [
        user("read it", 1, 1.0),
        bot("Let me look it up.", 1, 5.0),
        bot("It says hello.", 1, 6.0),
        bot("Bye.", 1, 7.0),
    ]
    assert shown(replayed(said, [TWO_STEPS], thoughts=True)) == [
        ("user_message_chunk", "read it"),
        ("agent_thought_chunk", "Which page?"),
        ("agent_message_chunk", "Let me look it up."),
        ("tool_call", ("c1", "pending")),
        ("tool_call_update", ("c1", "completed")),
        ("agent_thought_chunk", "Got it."),
        ("agent_message_chunk", "\n\nIt says hello."),
        ("agent_message_chunk", "\n\nBye."),
    ]
    # Reasoning off: no thought, the rest as it was.
    assert [kind for kind, _ in shown(replayed(said, [TWO_STEPS], thoughts=False))] == [
        "user_message_chunk",
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
        "agent_message_chunk",
    ]


def test_a_tool_call_is_replayed_with_its_title_kind_input_and_its_result() -> None:
    run = RunSteps(
        (1,),
        (
            assistant(call("c1"), call("c2")),
            result("c1", "the page"),
            result("c2", "refused", error=True),
        ),
    )
    updates = replayed([user("go", 1, 1.0)], [run], thoughts=True)
    data = [u.model_dump(by_alias=True, exclude_none=True) for u in updates[1:]]
    assert [(d["sessionUpdate"], d["toolCallId"], d["status"]) for d in data] == [
        ("tool_call", "c1", "pending"),
        ("tool_call_update", "c1", "completed"),
        ("tool_call", "c2", "pending"),
        ("tool_call_update", "c2", "failed"),
    ]
    started = data[0]
    assert (started["title"], started["kind"], started["rawInput"]) == (
        "web_fetch",
        "fetch",
        {"url": "http://c1"},
    )
    assert data[1]["content"][0]["content"]["text"] == "the page"
    assert data[3]["content"][0]["content"]["text"] == "refused"


def test_a_piece_no_message_said_goes_with_the_next_one_or_after_the_run() -> None:
    said = [
        user("read it", 1, 1.0),
        bot("⚠️ The answer was interrupted.", 1, 2.0),
        bot("It says hello.", 1, 3.0),
        bot("⚠️ The run failed.", 1, 4.0),
    ]
    run = RunSteps(
        (1,),
        (
            assistant(call("c1")),
            result("c1", "the page"),
            assistant(TextContent(text="It says hello.")),
            assistant(call("c2")),
            result("c2", "the page"),
        ),
    )
    assert [what for _, what in shown(replayed(said, [run], thoughts=True))] == [
        "read it",
        ("c1", "pending"),
        ("c1", "completed"),
        "⚠️ The answer was interrupted.",
        "\n\nIt says hello.",
        ("c2", "pending"),
        ("c2", "completed"),
        "\n\n⚠️ The run failed.",
    ]


def test_each_run_follows_its_own_messages_and_a_silent_run_its_last_one() -> None:
    said = [
        user("first", 1, 1.0),
        user("and this", 2, 1.5),  # answered by the same run
        user("second", 3, 3.0),
        bot("Done.", 3, 4.0),
    ]
    silent = RunSteps((1, 2), (assistant(call("c1")), result("c1", "ok")))
    answered = RunSteps(
        (3,), (assistant(call("c2")), result("c2", "ok"), assistant(TextContent(text="Done.")))
    )
    assert [what for _, what in shown(replayed(said, [silent, answered], thoughts=True))] == [
        "first",
        "and this",
        ("c1", "pending"),
        ("c1", "completed"),
        "second",
        ("c2", "pending"),
        ("c2", "completed"),
        "Done.",
    ]


def test_a_cancels_stop_and_its_answer_are_left_out() -> None:
    said = [
        user("take your time", 1, 1.0),
        user("/stop", 2, 2.0, message_id=CANCEL_ID + "x"),
        bot("Stopped.", 2, 3.0),
        user("again", 3, 4.0),
    ]
    assert shown(replayed(said, [], thoughts=True)) == [
        ("user_message_chunk", "take your time"),
        ("user_message_chunk", "again"),
    ]
