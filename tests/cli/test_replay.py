"""``botd replay`` as a user runs it: the installed command, a JSONL file, JSON lines out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BOTD = [sys.executable, "-m", "botd"]


def _assistant_update(kind: str, **fields: Any) -> dict[str, Any]:
    return {
        "type": "message_update",
        "message": {"role": "assistant", "content": []},
        "assistant_event": {"type": kind, **fields},
    }


def _end(text: str) -> dict[str, Any]:
    return {
        "type": "message_end",
        "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
    }


START = {"type": "message_start", "message": {"role": "assistant", "content": []}}


def run_replay(
    tmp_path: Path, events: list[dict[str, Any]] | str, *flags: str
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "run.jsonl"
    if isinstance(events, str):
        path.write_text(events, encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return subprocess.run(
        [*BOTD, "replay", str(path), *flags], capture_output=True, text=True, timeout=60
    )


def outputs(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_streamed_run_prints_blocks_flush_final_and_summary(tmp_path: Path) -> None:
    events = [
        {"type": "agent_start"},
        START,
        _assistant_update("text_delta", delta="Let me look."),
        _assistant_update("text_end"),
        _end("Let me look."),
        {
            "type": "tool_execution_start",
            "tool_call_id": "t1",
            "tool_name": "exec",
            "args": {"command": "ls"},
        },
        {
            "type": "tool_execution_end",
            "tool_call_id": "t1",
            "tool_name": "exec",
            "result": "a.txt",
            "is_error": False,
        },
        START,
        _assistant_update("text_delta", delta="Found a.txt."),
        _assistant_update("text_end"),
        _end("Found a.txt."),
        {"type": "agent_end"},
    ]
    out = outputs(run_replay(tmp_path, events))
    assert [o["kind"] for o in out] == ["block_reply", "block_flush", "block_reply", "summary"]
    assert out[0] == {
        "kind": "block_reply",
        "text": "Let me look.",
        "media_urls": [],
        "audio_as_voice": False,
        "reply_to_id": None,
        "reply_to_current": False,
        "reply_to_tag": False,
    }
    assert out[-1] == {
        "kind": "summary",
        "assistant_texts": ["Let me look.", "Found a.txt."],
        "messaging_tool_sent_texts": [],
        "messaging_tool_sent_targets": [],
        "did_send_via_messaging_tool": False,
    }


def test_without_block_replies_the_final_reply_carries_the_answer(tmp_path: Path) -> None:
    events = [
        START,
        _assistant_update("text_delta", delta="Answer."),
        _end("Answer."),
        {"type": "agent_end"},
    ]
    out = outputs(run_replay(tmp_path, events, "--no-block-replies"))
    assert [(o["kind"], o.get("text")) for o in out] == [
        ("final_reply", "Answer."),
        ("summary", None),
    ]


def test_messaging_tool_send_is_not_repeated_by_the_final_reply(tmp_path: Path) -> None:
    args = {"action": "send", "to": "+1555", "message": "This is the answer."}
    events = [
        {
            "type": "tool_execution_start",
            "tool_call_id": "t1",
            "tool_name": "message",
            "args": args,
        },
        {
            "type": "tool_execution_end",
            "tool_call_id": "t1",
            "tool_name": "message",
            "result": "ok",
            "is_error": False,
        },
        START,
        _assistant_update("text_delta", delta="This is the answer."),
        _assistant_update("text_end"),
        _end("This is the answer."),
        {"type": "agent_end"},
    ]
    out = outputs(run_replay(tmp_path, events))
    kinds = [o["kind"] for o in out]
    assert "block_reply" not in kinds and "final_reply" not in kinds
    assert out[-1]["did_send_via_messaging_tool"] is True
    assert out[-1]["messaging_tool_sent_targets"] == [
        {"tool": "message", "provider": "message", "account_id": None, "to": "+1555"}
    ]


def test_reply_to_current_uses_the_current_message_id(tmp_path: Path) -> None:
    events = [
        START,
        _assistant_update("text_delta", delta="[[reply_to_current]] Hi"),
        _end("[[reply_to_current]] Hi"),
        {"type": "agent_end"},
    ]
    out = outputs(
        run_replay(tmp_path, events, "--no-block-replies", "--current-message-id", "m-42")
    )
    assert out[0]["kind"] == "final_reply"
    assert (out[0]["text"], out[0]["reply_to_id"], out[0]["reply_to_current"]) == (
        "Hi",
        "m-42",
        True,
    )


def test_partial_replies_and_reasoning_stream(tmp_path: Path) -> None:
    events = [
        START,
        _assistant_update("text_delta", delta="<think>because"),
        _assistant_update("text_delta", delta="</think>Hel"),
        _assistant_update("text_delta", delta="lo"),
        _assistant_update("text_end"),
    ]
    out = outputs(run_replay(tmp_path, events, "--partial-replies", "--reasoning", "stream"))
    partials = [o for o in out if o["kind"] == "partial_reply"]
    assert [(p["text"], p["delta"]) for p in partials] == [("Hel", "Hel"), ("Hello", "lo")]
    assert {"kind": "reasoning", "text": "Reasoning:\n_because_"} in out


def test_chunking_flags_shape_the_blocks(tmp_path: Path) -> None:
    text = "First paragraph is here.\n\nSecond paragraph is here."
    events = [START, _assistant_update("text_delta", delta=text), _assistant_update("text_end")]
    chunked = outputs(run_replay(tmp_path, events, "--chunk-min", "5", "--chunk-max", "30"))
    assert [o["text"] for o in chunked if o["kind"] == "block_reply"] == [
        "First paragraph is here.",
        "Second paragraph is here.",
    ]
    whole = outputs(run_replay(tmp_path, events, "--no-chunking"))
    assert [o["text"] for o in whole if o["kind"] == "block_reply"] == [text]


def test_message_end_break_waits_for_message_end(tmp_path: Path) -> None:
    events = [START, _assistant_update("text_delta", delta="One."), _assistant_update("text_end")]
    out = outputs(run_replay(tmp_path, events, "--block-break", "message_end"))
    assert [o["kind"] for o in out] == ["summary"]  # end of input flushes nothing


def test_config_file_sets_block_streaming(tmp_path: Path) -> None:
    config = tmp_path / "botd.yaml"
    config.write_text(
        "agent:\n  block_streaming:\n    break: message_end\n    min_chars: 5\n    max_chars: 30\n"
    )
    text = "First paragraph is here.\n\nSecond paragraph is here."
    events = [START, _assistant_update("text_delta", delta=text), _end(text)]
    out = outputs(run_replay(tmp_path, events, "--config", str(config)))
    assert [o["text"] for o in out if o["kind"] == "block_reply"] == [
        "First paragraph is here.",
        "Second paragraph is here.",
    ]


def test_config_file_with_unknown_key_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "botd.yaml"
    config.write_text("agent:\n  block_streaming:\n    max_char: 30\n")
    result = run_replay(tmp_path, [START], "--config", str(config))
    assert result.returncode == 2
    assert "agent.block_streaming.max_char" in result.stderr


def test_unknown_event_types_are_skipped(tmp_path: Path) -> None:
    events = [
        {"type": "future_event", "x": 1},
        START,
        _assistant_update("text_delta", delta="ok"),
        _assistant_update("text_end"),
    ]
    out = outputs(run_replay(tmp_path, events))
    assert [o["kind"] for o in out] == ["block_reply", "summary"]


def test_stdin_is_read_with_a_dash(tmp_path: Path) -> None:
    lines = (
        json.dumps(START) + "\n" + json.dumps(_assistant_update("text_delta", delta="piped")) + "\n"
    )
    lines += json.dumps(_assistant_update("text_end")) + "\n"
    result = subprocess.run(
        [*BOTD, "replay", "-"], input=lines, capture_output=True, text=True, timeout=60
    )
    assert outputs(result)[0]["text"] == "piped"


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("not json", "line 3: not valid JSON"),
        ("[1, 2]", "line 3: expected a JSON object"),
        ('{"type": "message_end"}', "line 3: message_end: message: missing required key"),
        ('{"no_type": 1}', "line 3: missing required key 'type'"),
        (
            '{"type": "tool_execution_end", "tool_call_id": "t", "tool_name": "x", "result": 1}',
            "line 3: tool_execution_end: is_error: missing required key",
        ),
    ],
)
def test_malformed_line_prints_its_number_emits_nothing_and_exits_2(
    tmp_path: Path, bad_line: str, message: str
) -> None:
    good = json.dumps(START) + "\n" + json.dumps(_assistant_update("text_delta", delta="hi")) + "\n"
    result = run_replay(
        tmp_path, good + bad_line + "\n" + json.dumps(_assistant_update("text_end")) + "\n"
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(message), result.stderr


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [*BOTD, "replay", str(tmp_path / "nope.jsonl")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "nope.jsonl" in result.stderr and "No such file" in result.stderr


def test_bad_chunk_sizes_are_refused(tmp_path: Path) -> None:
    result = run_replay(tmp_path, [START], "--chunk-min", "50", "--chunk-max", "10")
    assert result.returncode == 2
    assert "min 50, max 10" in result.stderr


def test_version_prints_the_version() -> None:
    result = subprocess.run([*BOTD, "version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert result.stdout.startswith("botd ")


def test_agent_end_messages_supply_the_answer_of_a_run_without_message_events(
    tmp_path: Path,
) -> None:
    answer = {"role": "assistant", "content": [{"type": "text", "text": "Only here."}]}
    events = [{"type": "agent_end", "messages": [{"role": "user", "content": "hi"}, answer]}]
    out = outputs(run_replay(tmp_path, events, "--no-block-replies"))
    assert [(o["kind"], o.get("text")) for o in out] == [
        ("final_reply", "Only here."),
        ("summary", None),
    ]


def test_a_failed_run_reports_its_error_after_streamed_blocks(tmp_path: Path) -> None:
    failed = {
        "role": "assistant",
        "content": [{"type": "text", "text": "Partial"}],
        "stop_reason": "error",
        "error_message": "overloaded_error",
    }
    events = [
        START,
        _assistant_update("text_delta", delta="Partial"),
        _assistant_update("text_end"),
        {"type": "message_end", "message": failed},
        {"type": "agent_end"},
    ]
    out = outputs(run_replay(tmp_path, events))
    assert [o["kind"] for o in out] == ["block_reply", "final_reply", "summary"]
    assert out[1]["text"] == "⚠️ The agent stopped with an error: overloaded_error"
