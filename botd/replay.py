"""``botd replay``: feed a recorded run's events to the subscriber and print what it emits.

Every line of the input is read and checked before anything is fed, so a malformed line
produces ``line N: what is wrong`` on stderr, no output, and exit status 2. Output is one
JSON object per line, each with a ``kind`` (``block_reply``, ``block_flush``,
``partial_reply``, ``reasoning``, ``final_reply``, and a closing ``summary``) and that
emission's fields.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from .events import AgentEnd, AgentEvent, EventError, parse_event_line
from .subscriber import (
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


def read_events(lines: Iterable[str]) -> list[AgentEvent]:
    """Every event of a JSONL stream; blank lines and unknown event types are skipped."""
    events: list[AgentEvent] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = parse_event_line(line)
        except EventError as exc:
            raise ReplayInputError(f"line {number}: {exc}") from None
        if event is not None:
            events.append(event)
    return events


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


def replay(events: list[AgentEvent], options: ReplayOptions, write: Callable[[str], None]) -> None:
    """Feed ``events`` to a subscriber configured by ``options``; write each emission."""

    def emit(kind: str, payload: dict[str, Any] | None = None) -> None:
        write(json.dumps({"kind": kind, **(payload or {})}, ensure_ascii=False))

    def on_block(reply: BlockReply) -> None:
        emit("block_reply", reply.to_dict())

    def on_partial(partial: PartialReply) -> None:
        emit("partial_reply", partial.to_dict())

    sub = StreamSubscriber(
        options.config,
        on_block_reply=on_block if options.block_replies else None,
        on_block_flush=lambda: emit("block_flush"),
        on_partial_reply=on_partial if options.partial_replies else None,
        on_reasoning=lambda text: emit("reasoning", {"text": text}),
    )
    for event in events:
        sub.handle(event)
        if isinstance(event, AgentEnd):
            finals = sub.final_replies(
                block_streaming=options.block_replies,
                current_message_id=options.current_message_id,
            )
            for reply in finals:
                emit("final_reply", reply.to_dict())
    emit("summary", sub.summary().to_dict())


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
    )
    return ReplayOptions(
        config=config,
        block_replies=not args.no_block_replies,
        partial_replies=args.partial_replies,
        current_message_id=args.current_message_id,
    )


def run_replay(args: Any, stdin: IO[str], stdout: IO[str], stderr: IO[str]) -> int:
    """The ``botd replay`` command; returns the exit status."""
    try:
        options = options_from_args(args)
        if args.events == "-":
            events = read_events(stdin)
        else:
            try:
                with open(args.events, encoding="utf-8") as handle:
                    events = read_events(handle)
            except OSError as exc:
                raise ReplayInputError(f"{args.events}: {exc.strerror}") from None
    except ReplayInputError as exc:
        print(exc, file=stderr)
        return 2
    replay(events, options, lambda line: print(line, file=stdout))
    stdout.flush()
    return 0


def main_stdio(args: Any) -> int:
    return run_replay(args, sys.stdin, sys.stdout, sys.stderr)
