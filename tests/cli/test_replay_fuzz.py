"""``botd replay`` on any input: JSON lines and exit 0, or one ``line N: why`` and exit 2.

Hypothesis builds event streams from the event model (every event type, odd field values,
text with lone surrogates), mixed with lines that are not events at all: random bytes, JSON
that is not an object, nesting deeper than any parser takes, fields of the wrong type. The
command runs in-process (``botd.cli.main``), so an exception escaping it fails the test.
A reader that closes the pipe early is tried with the installed command.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from botd.cli import main
from botd.events import AssistantEventType
from botd.subscriber import StreamSubscriber

# Text as a model or a platform might send it: any code point, lone surrogates included.
TEXT = st.text(
    st.characters(categories=["L", "N", "P", "S", "Z", "Cc", "Cs"]),
    max_size=40,
)
SMALL_TEXT = st.sampled_from(
    ["", "a", "Hello.", "\n\n", "<final>", "</think>", "[[reply_to_current]]"]
)
ANY_TEXT = st.one_of(TEXT, SMALL_TEXT, st.text(max_size=300))
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), ANY_TEXT)
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(ANY_TEXT, inner, max_size=3)
    ),
    max_leaves=8,
)
ASSISTANT_EVENT_TYPES = list(get_args(AssistantEventType))


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


BLOCK = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": ANY_TEXT}),
    st.fixed_dictionaries(
        {"type": st.just("thinking"), "thinking": ANY_TEXT}, optional={"signature": ANY_TEXT}
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_call"),
            "id": ANY_TEXT,
            "name": st.sampled_from(["message", "exec", "schedule"]),
            "arguments": st.dictionaries(
                st.sampled_from(["text", "to", "target", "x"]), JSON_VALUE
            ),
        }
    ),
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool_result"])},
    optional={
        "content": st.one_of(ANY_TEXT, st.lists(BLOCK, max_size=3)),
        "stop_reason": st.sampled_from(["end_turn", "error", "tool_use", "cancelled"]),
        "error_message": ANY_TEXT,
        "tool_name": st.sampled_from(["message", "exec"]),
        "is_error": st.booleans(),
    },
)
ASSISTANT_EVENT = st.fixed_dictionaries(
    {"type": st.sampled_from(ASSISTANT_EVENT_TYPES)},
    optional={"delta": ANY_TEXT, "content": ANY_TEXT, "content_index": st.integers(0, 3)},
)
TOOL_ARGS = st.dictionaries(
    st.sampled_from(["text", "message", "to", "target", "channel", "media", "x"]),
    JSON_VALUE,
    max_size=4,
)
TOOL = {
    "tool_call_id": st.sampled_from(["t1", "t2"]),
    "tool_name": st.sampled_from(["message", "exec", "schedule"]),
}
EVENT = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["agent_start", "turn_start"])}),
    st.fixed_dictionaries(
        {"type": st.just("agent_end")}, optional={"messages": st.lists(MESSAGE, max_size=2)}
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["message_start", "message_end"]), "message": MESSAGE}
    ),
    st.fixed_dictionaries(
        {"type": st.just("message_update"), "message": MESSAGE, "assistant_event": ASSISTANT_EVENT}
    ),
    st.fixed_dictionaries({"type": st.just("tool_execution_start"), **TOOL, "args": TOOL_ARGS}),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_execution_end"),
            **TOOL,
            "result": JSON_VALUE,
            "is_error": st.booleans(),
        }
    ),
    st.fixed_dictionaries(
        {"type": st.just("turn_end")},
        optional={"message": MESSAGE, "tool_results": st.lists(MESSAGE, max_size=2)},
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_execution_update"),
            **TOOL,
            "args": TOOL_ARGS,
            "partial_result": JSON_VALUE,
        }
    ),
    st.fixed_dictionaries({"type": st.just("auto_compaction_start")}),
    st.fixed_dictionaries({"type": st.just("auto_compaction_end"), "will_retry": st.booleans()}),
    st.fixed_dictionaries({"type": st.sampled_from(["future_event", "", "x"])}),
)


@st.composite
def wrong_type(draw: st.DrawFn) -> dict[str, Any]:
    """A valid event with one field replaced by any JSON value."""
    event = dict(draw(EVENT))
    key = draw(st.sampled_from(sorted(event)))
    event[key] = draw(JSON_VALUE)
    return event


def _deep(depth: int, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "]" * depth
    if kind == "object":
        return '{"a":' * depth + "1" + "}" * depth
    inner = "[" * depth + "]" * depth
    return (
        json.dumps({"type": "tool_execution_start", "tool_call_id": "t", "tool_name": "x"})[:-1]
        + f', "args": {{"a": {inner}}}}}'
    )


def _encode(event: Any, ascii_only: bool) -> bytes:
    text = json.dumps(event, ensure_ascii=ascii_only)
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate as raw (invalid) UTF-8


LINE = st.one_of(
    st.builds(_encode, EVENT, st.booleans()),
    st.builds(_encode, EVENT, st.just(True)),
    st.builds(_encode, wrong_type(), st.just(True)),
    st.builds(_encode, JSON_VALUE, st.just(True)),
    st.binary(max_size=30),
    st.sampled_from([b"", b"   ", b"not json", b"{", b'{"type": 1}', b"\xff\xfe", b"[1, 2]"]),
    st.builds(
        lambda depth, kind: _deep(depth, kind).encode(),
        st.integers(1, 3000),
        st.sampled_from(["list", "object", "event"]),
    ),
)
VALID_LINE = st.builds(_encode, EVENT, st.booleans())
# Half the streams are events only (the subscriber sees all of them), half mix in bad lines.
STREAM = st.one_of(st.lists(VALID_LINE, max_size=30), st.lists(LINE, max_size=25))
FLAGS = st.lists(
    st.sampled_from(
        [
            "--partial-replies",
            "--no-block-replies",
            "--reasoning=on",
            "--reasoning=stream",
            "--enforce-final-tag",
            "--block-break=message_end",
            "--no-chunking",
            "--chunk-min=1",
            "--current-message-id=m1",
        ]
    ),
    unique=True,
    max_size=4,
)
LINE_ERROR = re.compile(r"line [1-9][0-9]*: \S")


def replay_in_process(data: bytes, flags: list[str]) -> tuple[int, str, str]:
    stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    stdout, stderr = io.StringIO(), io.StringIO()
    saved = sys.stdin
    sys.stdin = stdin
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            status = main(["replay", "-", *flags])
    finally:
        sys.stdin = saved
    return status, stdout.getvalue(), stderr.getvalue()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=STREAM, flags=FLAGS, trailing_newline=st.booleans())
def test_any_input_gives_json_lines_or_one_numbered_error(
    lines: list[bytes], flags: list[str], trailing_newline: bool
) -> None:
    data = b"\n".join(lines) + (b"\n" if trailing_newline else b"")
    status, out, err = replay_in_process(data, flags)
    assert "Traceback" not in out + err
    if status == 0:
        assert err == ""
        printed = out.splitlines()
        assert printed, "a replay always ends with its summary"
        parsed = [json.loads(line) for line in printed]
        out.encode("utf-8")  # no lone surrogate made it out
        assert all(isinstance(p, dict) and "kind" in p for p in parsed)
        assert parsed[-1]["kind"] == "summary"
    else:
        assert status == 2
        assert out == ""
        assert len(err.splitlines()) == 1 and LINE_ERROR.match(err), err


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"type": "agent_start"}\n\xff\xfe\n', "line 2: not valid UTF-8"),
        (b"\n" + b"[" * 100_000 + b"]" * 100_000 + b"\n", "line 2: not readable: JSON nested"),
        (
            b'{"type": "auto_compaction_end", "will_retry": "often"}\n',
            "line 1: auto_compaction_end",
        ),
        (
            b'{"type": "message_start", "message": {"role": 7}}\n',
            "line 1: message_start: message.role",
        ),
    ],
)
def test_unreadable_lines_are_named(data: bytes, expected: str) -> None:
    status, out, err = replay_in_process(data, [])
    assert (status, out) == (2, "")
    assert err.startswith(expected) and len(err.splitlines()) == 1, err


def test_a_lone_surrogate_comes_out_as_the_replacement_character() -> None:
    events = [
        {"type": "message_start", "message": {"role": "assistant", "content": []}},
        {
            "type": "message_update",
            "message": {"role": "assistant"},
            "assistant_event": {"type": "text_delta", "delta": "half \ud83d here"},
        },
        {
            "type": "message_update",
            "message": {"role": "assistant"},
            "assistant_event": {"type": "text_end"},
        },
    ]
    data = "".join(json.dumps(e) + "\n" for e in events).encode()
    status, out, err = replay_in_process(data, [])
    assert (status, err) == (0, "")
    assert json.loads(out.splitlines()[0])["text"] == "half \ufffd here"


def test_unicode_line_breaks_in_a_text_stay_inside_its_output_line() -> None:
    # U+0085, U+2028 and U+2029 end a line for str.splitlines and other Unicode readers.
    text = "a\x85b\u2028c\u2029d"
    event = {"type": "message_end", "message": {"role": "assistant", "content": text}}
    status, out, err = replay_in_process((json.dumps(event) + "\n").encode(), [])
    assert (status, err) == (0, "")
    [line] = out.splitlines()
    assert json.loads(line)["assistant_texts"] == [text]


def test_a_subscriber_failure_is_an_error_of_its_line_not_a_silent_skip(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: StreamSubscriber, event: Any) -> None:
        raise RuntimeError("the chunker lost its place")

    monkeypatch.setattr(StreamSubscriber, "_on_message_update", broken)
    update = {
        "type": "message_update",
        "message": {"role": "assistant"},
        "assistant_event": {"type": "text_delta", "delta": "hi"},
    }
    start = {"type": "message_start", "message": {"role": "assistant", "content": []}}
    data = (json.dumps(start) + "\n\n" + json.dumps(update) + "\n").encode()
    status, out, err = replay_in_process(data, [])
    assert (status, out) == (2, "")
    assert err == (
        "line 3: the subscriber failed on this message_update event: "
        "RuntimeError: the chunker lost its place\n"
    )

    # The daemon's subscriber goes on with the run, and says so at error, with the traceback.
    from botd.events import parse_event

    subscriber = StreamSubscriber()
    with caplog.at_level(logging.ERROR, logger="botd.subscriber"):
        subscriber.handle(parse_event(start))  # type: ignore[arg-type]
        subscriber.handle(parse_event(update))  # type: ignore[arg-type]
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "message_update" in record.getMessage()
    assert record.exc_info is not None


def test_a_reader_that_closes_the_pipe_ends_the_replay_quietly(tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for n in range(3000):
            for event in (
                {"type": "message_start", "message": {"role": "assistant", "content": []}},
                {
                    "type": "message_update",
                    "message": {"role": "assistant"},
                    "assistant_event": {"type": "text_delta", "delta": f"answer {n} " * 20},
                },
                {
                    "type": "message_update",
                    "message": {"role": "assistant"},
                    "assistant_event": {"type": "text_end"},
                },
            ):
                handle.write(json.dumps(event) + "\n")
    replay = subprocess.Popen(
        [sys.executable, "-m", "botd", "replay", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert replay.stdout is not None and replay.stderr is not None
    first = replay.stdout.readline()
    replay.stdout.close()  # the reader goes away, as `| head -1` does
    err = replay.stderr.read()
    assert replay.wait(timeout=60) == 0
    assert json.loads(first)["kind"] == "block_reply"
    assert err == b""
