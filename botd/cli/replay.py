"""``botd replay``: feed a recorded run's events to the subscriber and print what it emits.

Output is one JSON object per line (UTF-8), each with a ``kind`` (``block_reply``,
``block_flush``, ``partial_reply``, ``reasoning``, ``final_reply``, and a closing ``summary``)
and that emission's fields; exit status 0.

Any input either gives that or ``line N: what is wrong`` (one line) on stderr, no output and
exit status 2: a line that is not UTF-8 or not JSON, nested too deeply, not an event object, a
field of the wrong type, and an event the subscriber fails on (the daemon logs such a failure
and goes on; a replay, which exists to show what the subscriber does, stops at it). Unknown
event types and blank lines are skipped. A lone UTF-16 surrogate in the input's text (JSON
``"\\ud800"``) is read as U+FFFD, as botd stores and sends such text, so the output is always
valid UTF-8 JSON. A reader that goes away (``botd replay run.jsonl | head -1``) ends the
replay quietly with status 0.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from ..channels.registry import target_forms
from ..chat import storable
from ..events import AgentEnd, AgentEvent, EventError, parse_event, storable_data
from ..subscriber import (
    BlockBreak,
    BlockReply,
    ChunkingConfig,
    PartialReply,
    StreamSubscriber,
    SubscriberConfig,
)


class ReplayInputError(Exception):
    """Input that cannot be replayed; the message names the line or key."""


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    config: SubscriberConfig
    block_replies: bool = True
    partial_replies: bool = False
    current_message_id: str | None = None


class _Subscriber(StreamSubscriber):
    """The subscriber with its failures let through: ``handle`` raises what failed it."""

    def handle(self, event: AgentEvent) -> None:
        self._dispatch(event)


_LINE_BREAKS_ESCAPED = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}
"""Characters Unicode (and Python's ``str.splitlines``) takes for line ends, escaped inside
the JSON strings of an output line, so that one record stays one line for every reader."""


def read_events(lines: Iterable[str | bytes]) -> list[AgentEvent]:
    """Every event of a JSONL stream; blank lines and unknown event types are skipped."""
    return [event for _number, event in read_numbered_events(lines)]


def read_numbered_events(lines: Iterable[str | bytes]) -> list[tuple[int, AgentEvent]]:
    """Every event of a JSONL stream with its line number (see ``read_events``).

    Raises ``ReplayInputError`` naming the first line that cannot be read.
    """
    events: list[tuple[int, AgentEvent]] = []
    for number, line in enumerate(lines, start=1):
        try:
            event = _read_line(line)
        except ReplayInputError as exc:
            raise ReplayInputError(f"line {number}: {exc}") from None
        if event is not None:
            events.append((number, event))
    return events


def _read_line(line: str | bytes) -> AgentEvent | None:
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ReplayInputError(
                f"not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at byte {exc.start + 1})"
            ) from None
    if not line.strip():
        return None
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ReplayInputError(f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise ReplayInputError("not readable: JSON nested too deeply") from None
    try:
        return parse_event(storable_data(data))
    except EventError as exc:
        raise ReplayInputError(str(exc)) from None
    except RecursionError:
        raise ReplayInputError("not readable: JSON nested too deeply") from None


_BLOCK_STREAMING_KEYS = {"break", "min_chars", "max_chars", "break_preference", "enabled"}


def block_streaming_from_yaml(path: Path) -> dict[str, Any]:
    """The ``agent.block_streaming`` section of a botd config file (empty when absent)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ReplayInputError(f"{path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ReplayInputError(f"{path}: not valid YAML: {exc}") from None
    agent = data.get("agent") if isinstance(data, dict) else None
    section = agent.get("block_streaming") if isinstance(agent, dict) else None
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ReplayInputError(f"{path}: agent.block_streaming must be a mapping")
    for key in section:
        if key not in _BLOCK_STREAMING_KEYS:
            known = ", ".join(sorted(_BLOCK_STREAMING_KEYS))
            raise ReplayInputError(f"{path}: unknown key agent.block_streaming.{key} ({known})")
    return section


def replay(
    events: Sequence[AgentEvent | tuple[int, AgentEvent]],
    options: ReplayOptions,
    write: Callable[[str], None],
) -> None:
    """Feed ``events`` (each alone or with its line number) to a subscriber configured by
    ``options``; write each emission.

    Raises ``ReplayInputError`` (``line N: ...``) for an event the subscriber fails on, or
    whose emission cannot be written as JSON; what was written before it stays written.
    """

    def emit(kind: str, payload: dict[str, Any] | None = None) -> None:
        line = json.dumps({"kind": kind, **(payload or {})}, ensure_ascii=False)
        write(storable(line.translate(_LINE_BREAKS_ESCAPED)))

    def on_block(reply: BlockReply) -> None:
        emit("block_reply", reply.to_dict())

    def on_partial(partial: PartialReply) -> None:
        emit("partial_reply", partial.to_dict())

    sub = _Subscriber(
        options.config,
        on_block_reply=on_block if options.block_replies else None,
        on_block_flush=lambda: emit("block_flush"),
        on_partial_reply=on_partial if options.partial_replies else None,
        on_reasoning=lambda text: emit("reasoning", {"text": text}),
    )
    number = 0
    for item in events:
        number, event = item if isinstance(item, tuple) else (number + 1, item)
        with _failure_at(number, f"the subscriber failed on this {event.type} event"):
            sub.handle(event)
            if isinstance(event, AgentEnd):
                finals = sub.final_replies(
                    block_streaming=options.block_replies,
                    current_message_id=options.current_message_id,
                )
                for reply in finals:
                    emit("final_reply", reply.to_dict())
    with _failure_at(number, "the run's summary failed"):
        emit("summary", sub.summary().to_dict())


@contextmanager
def _failure_at(number: int, what: str) -> Iterator[None]:
    """Turn an exception (a bug, nesting too deep for JSON) into ``line N: what: why``."""
    try:
        yield
    except OSError:
        raise  # writing failed (a closed pipe): not the input's fault
    except Exception as exc:
        why = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise ReplayInputError(f"line {number}: {what}: {why}") from exc


def options_from_args(args: Any) -> ReplayOptions:
    """Replay options from parsed command-line arguments (flags win over ``--config``)."""
    section: dict[str, Any] = {}
    if args.config:
        section = block_streaming_from_yaml(Path(args.config))
    block_break: BlockBreak
    chosen = args.block_break or section.get("break") or "text_end"
    if chosen == "text_end":
        block_break = "text_end"
    elif chosen == "message_end":
        block_break = "message_end"
    else:
        raise ReplayInputError(f"block break must be text_end or message_end, not {chosen!r}")
    chunking: ChunkingConfig | None = None
    if not args.no_chunking and section.get("enabled", True) is not False:
        defaults = ChunkingConfig()
        minimum = args.chunk_min if args.chunk_min is not None else section.get("min_chars")
        maximum = args.chunk_max if args.chunk_max is not None else section.get("max_chars")
        preference = args.break_preference or section.get("break_preference")
        chunking = ChunkingConfig(
            min_chars=int(minimum if minimum is not None else defaults.min_chars),
            max_chars=int(maximum if maximum is not None else defaults.max_chars),
            break_preference=preference or defaults.break_preference,
        )
        if chunking.min_chars < 1 or chunking.max_chars < chunking.min_chars:
            raise ReplayInputError(
                f"chunk sizes must satisfy 1 <= min <= max "
                f"(min {chunking.min_chars}, max {chunking.max_chars})"
            )
    config = SubscriberConfig(
        block_break=block_break,
        chunking=chunking,
        reasoning=args.reasoning,
        enforce_final_tag=args.enforce_final_tag,
        target_forms=target_forms(),
    )
    return ReplayOptions(
        config=config,
        block_replies=not args.no_block_replies,
        partial_replies=args.partial_replies,
        current_message_id=args.current_message_id,
    )


def run_replay(args: Any, stdin: IO[str], stdout: IO[str], stderr: IO[str]) -> int:
    """The ``botd replay`` command; returns the exit status.

    Nothing is written to ``stdout`` unless the whole input replays. A ``BrokenPipeError``
    from writing it is left to the caller (``main_stdio`` ends quietly on it).
    """
    lines: list[str] = []
    try:
        options = options_from_args(args)
        if args.events == "-":
            # Bytes where there are any, so a line that is not UTF-8 is named, not fatal.
            events = read_numbered_events(getattr(stdin, "buffer", stdin))
        else:
            try:
                with open(args.events, "rb") as handle:
                    events = read_numbered_events(handle)
            except OSError as exc:
                raise ReplayInputError(f"{args.events}: {exc.strerror}") from None
        replay(events, options, lines.append)
    except ReplayInputError as exc:
        print(" ".join(storable(str(exc)).split()), file=stderr)
        return 2
    for line in lines:
        stdout.write(line + "\n")
    stdout.flush()
    return 0


def main_stdio(args: Any) -> int:
    """``run_replay`` on the process's standard streams; output is UTF-8 whatever the locale."""
    stdout = sys.stdout
    if isinstance(stdout, io.TextIOWrapper) and stdout.encoding.lower() not in ("utf-8", "utf8"):
        stdout.reconfigure(encoding="utf-8")
    try:
        return run_replay(args, sys.stdin, stdout, sys.stderr)
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly. Python flushes stdout once more at
        # exit; pointed at /dev/null that flush cannot fail with "Exception ignored ...".
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stdout.fileno())
        os.close(devnull)
        return 0
