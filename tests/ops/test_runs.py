"""The runs the status lists (``botd.ops.runs.RunLog``): a run in flight with its
conversation, time so far and tokens; once ended, the latest first with its stop reason and
duration, the last ``RECENT_RUNS`` only."""

from __future__ import annotations

from botd.chat import InboundMessage
from botd.ops.runs import RECENT_RUNS, RunLog
from botd.store import ModelUsage


def message(chat: str) -> InboundMessage:
    return InboundMessage(
        channel="telegram",
        chat_id=chat,
        sender_id="1",
        text="hi",
        message_id="m",
        conversation_key=f"telegram:{chat}",
    )


def test_a_run_is_in_flight_then_recent_with_its_stop_reason() -> None:
    now = [100.0]
    runs = RunLog(clock=lambda: now[0])
    runs.started(message("7"))
    runs.used(message("7"), ModelUsage("claude", input=10, output=3))
    runs.used(message("7"), ModelUsage("claude", input=5))
    now[0] = 102.5
    [running] = runs.view()["in_flight"]
    assert running == {
        "conversation": "telegram:7",
        "channel": "telegram",
        "started_at": 100.0,
        "seconds": 2.5,
        "tokens": {"input": 15, "output": 3, "cache_read": 0, "cache_write": 0},
    }
    runs.ended(message("7"), "max_tokens")
    now[0] = 200.0
    view = runs.view()
    assert view["in_flight"] == []
    [ended] = view["recent"]
    assert ended["stop_reason"] == "max_tokens" and ended["seconds"] == 2.5

    for number in range(RECENT_RUNS + 5):
        runs.started(message(str(number)))
        runs.ended(message(str(number)), "end_turn")
    recent = runs.view()["recent"]
    assert len(recent) == RECENT_RUNS
    assert recent[0]["conversation"] == f"telegram:{RECENT_RUNS + 4}"
    runs.ended(message("never started"), "end_turn")  # nothing to end: ignored
    assert len(runs.view()["recent"]) == RECENT_RUNS


def test_usage_counted_just_after_the_run_ended_is_that_runs() -> None:
    """The run's usage comes with its last transcript write, which may follow its end."""
    runs = RunLog(clock=lambda: 100.0)
    runs.started(message("7"))
    runs.ended(message("7"), "end_turn")
    runs.used(message("7"), ModelUsage("claude", input=10, output=3))
    runs.used(message("8"), ModelUsage("claude", input=99))  # no run of its own: not counted
    [ended] = runs.view()["recent"]
    assert ended["tokens"] == {"input": 10, "output": 3, "cache_read": 0, "cache_write": 0}
