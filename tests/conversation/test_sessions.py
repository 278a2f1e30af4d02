"""Sessions: queue modes, commands, ordering, the global cap, restarts and recording."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from botd.agent.providers.scripted import ScriptedProvider, ScriptedTurn
from botd.agent.tools.base import ToolContext, ToolOutput
from botd.agent.types import ToolDefinition
from botd.chat import Attachment, InboundMessage
from botd.cli.replay import read_events
from botd.conversation import Conversations, ResetPolicy, RunHooks
from botd.conversation.queue import ALBUM_WINDOW
from botd.events import ImageContent, TextContent
from botd.ops.logging import LogContext
from botd.store import Store
from botd.store.sqlite import SqliteStore
from botd.subscriber import ChunkingConfig, SubscriberConfig
from tests.conversation.harness import (
    GateTool,
    ListSink,
    ManualTimer,
    RecordingProvider,
    inbound,
    settings,
    settle,
)
from tests.support.waiting import until


async def test_a_message_is_answered(store: Store) -> None:
    sink = ListSink()
    manager = Conversations(store, ScriptedProvider(), sink, settings())
    await manager.submit(inbound("hello"))
    await settle(manager)
    assert sink.texts("c1") == ["You said: hello"]


async def test_followup_answers_each_waiting_message_in_order(store: Store) -> None:
    provider = RecordingProvider(ScriptedProvider(delay=0.005))
    sink = ListSink()
    manager = Conversations(store, provider, sink, settings(queue_mode="followup"))
    for n, text in enumerate(["one", "two", "three"]):
        await manager.submit(inbound(text, n=n))
    await settle(manager)
    assert sink.texts("c1") == ["You said: one", "You said: two", "You said: three"]
    assert len(provider.requests) == 3


async def test_an_albums_parts_are_one_prompt_in_followup_mode_too(store: Store) -> None:
    provider = RecordingProvider(ScriptedProvider(delay=0.005))
    sink = ListSink()
    timer = ManualTimer()
    manager = Conversations(store, provider, sink, settings(queue_mode="followup"), timer=timer)
    parts = [replace(inbound(t, n=n), album="a1") for n, t in enumerate(["look", "", "ok?"])]
    await manager.submit(parts[0])
    await until(lambda: timer.waiting == 1, "the album's first part to wait for the rest")
    timer.advance(0.2)  # the next parts come moments later, as a platform sends them
    for part in parts[1:]:
        await manager.submit(part)
    await manager.submit(inbound("unrelated", n=9))
    timer.advance(ALBUM_WINDOW)
    await settle(manager)
    assert provider.prompts()[0][-1] == "look\n\n\n\nok?"
    assert len(provider.requests) == 2  # the album, then the next message on its own
    assert sink.texts("c1")[-1] == "You said: unrelated"


async def test_an_interrupting_album_part_keeps_its_waiting_siblings(store: Store) -> None:
    provider = RecordingProvider(
        ScriptedProvider([ScriptedTurn(text="x " * 400)], chunk_chars=2, delay=0.01)
    )
    sink = ListSink()
    timer = ManualTimer()
    manager = Conversations(store, provider, sink, settings(queue_mode="interrupt"), timer=timer)
    await manager.submit(inbound("long task", n=0))
    await until(lambda: provider.requests, "the long task's run to start")
    first, second = (replace(inbound(t, n=n), album="a1") for n, t in ((1, "this"), (2, "and")))
    await manager.submit(first)
    await manager.submit(second)
    await until(lambda: timer.waiting == 1, "the album to wait for more parts")
    timer.advance(ALBUM_WINDOW)
    await settle(manager)
    assert provider.prompts()[-1][-1] == "this\n\nand"


async def test_stop_while_an_album_gathers_answers_nothing_of_it(store: Store) -> None:
    provider = RecordingProvider(ScriptedProvider())
    sink = ListSink()
    timer = ManualTimer()
    manager = Conversations(store, provider, sink, settings(), timer=timer)
    await manager.submit(replace(inbound("look", n=0), album="a1"))
    await until(lambda: timer.waiting == 1, "its worker to wait for the rest of the album")
    await manager.submit(inbound("/stop", n=1))
    await settle(manager)
    assert provider.requests == []
    assert sink.texts("c1") == ["Stopped."]


async def test_collect_merges_what_arrived_during_a_run(store: Store) -> None:
    provider = RecordingProvider(ScriptedProvider(delay=0.005))
    sink = ListSink()
    manager = Conversations(store, provider, sink, settings(queue_mode="collect"))
    await manager.submit(inbound("first", n=0))
    await until(lambda: provider.requests, "the first run to start")
    await manager.submit(inbound("second", n=1))
    await manager.submit(inbound("third", n=2))
    await settle(manager)
    # One follow-up run got both waiting messages as one prompt.
    assert len(provider.requests) == 2
    assert provider.prompts()[1][-1] == "second\n\nthird"
    assert sink.texts("c1")[0] == "You said: first"


async def test_steer_reaches_the_running_agent_at_the_next_tool_boundary(
    store: Store,
) -> None:
    gate = GateTool()
    script = [ScriptedTurn(tool_calls=[{"name": "wait", "args": {}}, {"name": "wait", "args": {}}])]
    provider = RecordingProvider(ScriptedProvider(script))
    sink = ListSink()
    manager = Conversations(
        store, provider, sink, settings(queue_mode="steer"), tools=lambda m: [gate]
    )
    await manager.submit(inbound("start", n=0))
    await asyncio.wait_for(gate.started.wait(), 30)
    await manager.submit(inbound("actually, stop that", n=1))
    gate.release.set()
    await settle(manager)
    # The second model call saw the steering message; the second tool call was skipped.
    assert provider.prompts()[1][-1] == "actually, stop that"
    assert len(provider.requests) == 2
    assert sink.texts("c1") == ["You said: actually, stop that"]


async def test_steer_without_a_tool_boundary_runs_as_a_follow_up(store: Store) -> None:
    provider = RecordingProvider(ScriptedProvider(delay=0.005))
    sink = ListSink()
    manager = Conversations(store, provider, sink, settings(queue_mode="steer"))
    await manager.submit(inbound("first", n=0))
    await until(lambda: provider.requests, "the first run to start")
    await manager.submit(inbound("more", n=1))
    await settle(manager)
    assert sink.texts("c1") == ["You said: first", "You said: more"]


async def test_steer_never_answers_a_message_before_one_that_waits_its_turn(
    store: Store,
) -> None:
    """A message with a file waits its turn (it never steers); a text that comes after it
    while the run still works waits behind it rather than steering the run past it, and
    steering the run did not read runs before the file that came after it."""
    gate = GateTool()
    script = [ScriptedTurn(tool_calls=[{"name": "wait", "args": {}}])]
    sink = ListSink()
    manager = Conversations(
        store,
        ScriptedProvider(script),
        sink,
        settings(queue_mode="steer"),
        tools=lambda m: [gate],
    )
    photo = Attachment("image", "file-1", "photo.jpg", "image/jpeg", 10)
    await manager.submit(replace(inbound("start", n=0), inbox_id=1))
    await asyncio.wait_for(gate.started.wait(), 30)
    await manager.submit(replace(inbound("a photo", n=1), inbox_id=2, attachments=(photo,)))
    await manager.submit(replace(inbound("and then this", n=2), inbox_id=3))
    gate.release.set()
    await settle(manager)
    said = sink.texts("c1")
    assert said[0] == "You said: start"
    assert said.index("a photo") < said.index("You said: and then this"), said


async def test_interrupt_cancels_the_run_and_answers_the_new_message(store: Store) -> None:
    provider = RecordingProvider(
        ScriptedProvider([ScriptedTurn(text="x " * 400)], chunk_chars=2, delay=0.01)
    )
    sink = ListSink()
    manager = Conversations(store, provider, sink, settings(queue_mode="interrupt"))
    await manager.submit(inbound("long task", n=0))
    await until(lambda: provider.requests, "the long task's run to start")
    await manager.submit(inbound("never mind", n=1))
    await settle(manager)
    assert sink.texts("c1")[-1] == "You said: never mind"
    assert not any(text.startswith("x x") and len(text) > 700 for text in sink.texts("c1"))


async def test_stop_during_a_tool_call_cancels_it_and_clears_the_queue(store: Store) -> None:
    gate = GateTool()
    script = [ScriptedTurn(tool_calls=[{"name": "wait", "args": {}}])]
    sink = ListSink()
    manager = Conversations(
        store,
        ScriptedProvider(script),
        sink,
        settings(queue_mode="followup"),
        tools=lambda m: [gate],
    )
    await manager.submit(inbound("do the thing", n=0))
    await asyncio.wait_for(gate.started.wait(), 30)
    await manager.submit(inbound("queued", n=1))
    await manager.submit(inbound("/stop", n=2))
    await settle(manager)
    assert gate.cancelled
    assert sink.texts("c1") == ["Stopped."]


async def test_stop_cuts_a_message_waiting_for_a_run_slot_and_waits_for_nothing(
    sqlite_store: SqliteStore,
) -> None:
    gate = GateTool()
    provider = RecordingProvider(
        ScriptedProvider([ScriptedTurn(tool_calls=[{"name": "wait", "args": {}}])])
    )
    sink = ListSink()
    manager = Conversations(
        sqlite_store, provider, sink, settings(max_concurrent_runs=1), tools=lambda m: [gate]
    )
    await manager.submit(inbound("long job", chat="A"))
    await asyncio.wait_for(gate.started.wait(), 30)  # the one run slot is A's
    waiting = await _accepted(sqlite_store, inbound("my turn?", chat="B"))
    await manager.submit(waiting)
    await until(lambda: not manager.conversations["console:B"].pending, "B's turn to begin")
    await manager.submit(inbound("/status", chat="B", n=1))
    status = await sink.last("B", 1)
    assert ": working, 0 waiting" in status and "Preparing: my turn?" in status
    async with asyncio.timeout(30):  # answered now, not once A's run ends
        await manager.submit(inbound("/stop", chat="B", n=2))
        assert await sink.last("B", 2) == "Stopped."
    assert waiting.inbox_id is not None and sqlite_store.inbox_state(waiting.inbox_id) == "skipped"
    gate.release.set()
    await settle(manager)
    assert sink.texts("B") == [status, "Stopped."]
    assert sink.texts("A") == ["You said: long job"]
    assert len(provider.requests) == 2  # A's two model calls; none for B


async def test_two_conversations_run_in_parallel_each_in_order(store: Store) -> None:
    slow = ScriptedProvider(delay=0.002)
    sink = ListSink()
    manager = Conversations(store, slow, sink, settings(queue_mode="followup"))
    for n in range(3):
        await manager.submit(inbound(f"a{n}", chat="A", n=n))
        await manager.submit(inbound(f"b{n}", chat="B", n=n))
    await settle(manager)
    assert sink.texts("A") == ["You said: a0", "You said: a1", "You said: a2"]
    assert sink.texts("B") == ["You said: b0", "You said: b1", "You said: b2"]
    chats = [chat for chat, _ in sink.posts]
    assert chats.index("B") < chats.index("A") + 3  # interleaved, not one after the other


async def test_global_cap_limits_concurrent_runs(store: Store) -> None:
    # The model answers nobody until two runs are under way and every chat has left its
    # queue (three of them waiting for a slot): two ran at once, and never a third.
    hold = asyncio.Event()
    provider = RecordingProvider(ScriptedProvider(), hold=hold)
    manager = Conversations(store, provider, ListSink(), settings(max_concurrent_runs=2))
    for chat in "ABCDE":
        await manager.submit(inbound("hi", chat=chat))
    await until(lambda: provider.active == 2, "two runs under way")
    await until(
        lambda: all(not manager.conversations[f"console:{c}"].pending for c in "ABCDE"),
        "every chat taken from its queue",
    )
    hold.set()
    await settle(manager)
    assert provider.peak == 2
    assert len(provider.requests) == 5


async def test_conversation_continues_after_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = SqliteStore.open(state)
    await_manager = Conversations(first, ScriptedProvider(), ListSink(), settings())
    await await_manager.submit(inbound("remember me"))
    await settle(await_manager)
    first.close()

    second = SqliteStore.open(state)
    provider = RecordingProvider(ScriptedProvider())
    manager = Conversations(second, provider, ListSink(), settings())
    await manager.submit(inbound("still there?"))
    await settle(manager)
    second.close()
    assert provider.prompts()[0] == ["remember me", "still there?"]
    assistant = [m for m in provider.requests[0].messages if m.role == "assistant"]
    assert len(assistant) == 1


async def test_new_starts_a_fresh_conversation(store: Store) -> None:
    provider = RecordingProvider(ScriptedProvider())
    sink = ListSink()
    manager = Conversations(store, provider, sink, settings())
    await manager.submit(inbound("old topic", n=0))
    await settle(manager)
    await manager.submit(inbound("/new", n=1))
    await manager.submit(inbound("new topic", n=2))
    await settle(manager)
    assert "Started a new conversation." in sink.texts("c1")
    assert provider.prompts()[-1] == ["new topic"]


async def test_status_reports_the_session(store: Store) -> None:
    sink = ListSink()
    manager = Conversations(store, ScriptedProvider(), sink, settings())
    await manager.submit(inbound("hi", n=0))
    await settle(manager)
    await manager.submit(inbound("/status", n=1))
    status = await sink.last("c1", 2)
    assert "idle" in status and "1 runs" in status and "queue mode collect" in status


async def test_idle_reset_policy_starts_over(store: Store) -> None:
    now = [1_000_000.0]
    provider = RecordingProvider(ScriptedProvider())
    policy = ResetPolicy(mode="idle", idle_minutes=30)
    manager = Conversations(
        store, provider, ListSink(), settings(reset=policy), clock=lambda: now[0]
    )
    await manager.submit(inbound("morning", n=0))
    await settle(manager)
    now[0] += 10 * 60
    await manager.submit(inbound("still here", n=1))
    await settle(manager)
    now[0] += 31 * 60
    await manager.submit(inbound("much later", n=2))
    await settle(manager)
    assert provider.prompts()[1] == ["morning", "still here"]
    assert provider.prompts()[2] == ["much later"]


def test_daily_reset_policy_boundary() -> None:
    from datetime import datetime

    policy = ResetPolicy(mode="daily", daily_hour=4)
    before = datetime(2026, 11, 21, 23, 0).timestamp()
    assert policy.is_due(before, datetime(2026, 11, 22, 5, 0).timestamp())
    assert not policy.is_due(before, datetime(2026, 11, 22, 3, 0).timestamp())
    assert not ResetPolicy().is_due(0, 10**10)


async def test_recorded_runs_replay(store: Store, tmp_path: Path) -> None:
    record_dir = tmp_path / "runs"
    manager = Conversations(
        store, ScriptedProvider(), ListSink(), settings(record_events_dir=record_dir)
    )
    await manager.submit(inbound("record this"))
    await settle(manager)
    (path,) = record_dir.glob("*.jsonl")
    events = read_events(path.read_text(encoding="utf-8").splitlines())
    assert events[0].type == "agent_start" and events[-1].type == "agent_end"


class EchoTool:
    spec = ToolDefinition("lookup", "Looks something up.", {"type": "object", "properties": {}})
    timeout: float | None = None

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput("found: " + "data " * 40)


async def test_long_transcript_is_compacted_with_tool_pairs_intact_across_restart(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    tool_turn = ScriptedTurn(tool_calls=[{"name": "lookup", "args": {}}])
    answer = ScriptedTurn(text="Here is what I found. " * 10)
    script = [tool_turn, answer] * 6
    small = settings(queue_mode="followup", context_budget_tokens=600, keep_recent_tokens=200)
    store = SqliteStore.open(state)
    manager = Conversations(
        store, ScriptedProvider(script), ListSink(), small, tools=lambda m: [EchoTool()]
    )
    for n in range(6):
        await manager.submit(inbound(f"question {n} " + "words " * 30, n=n))
    await settle(manager)
    store.close()

    reopened = SqliteStore.open(state)
    record = reopened.get_or_create_session("console:c1")
    transcript = reopened.load_transcript(record.session_id)
    reopened.close()
    first_text = "".join(b.text for b in transcript[0].blocks() if isinstance(b, TextContent))
    assert first_text.startswith("[Summary of earlier conversation]")
    calls = {
        b.id
        for m in transcript
        if m.role == "assistant"
        for b in m.blocks()
        if b.type == "tool_call"
    }
    results = {m.tool_call_id for m in transcript if m.role == "tool_result"}
    assert calls == results and calls  # every kept call has its result and vice versa
    assert len(transcript) < 6 * 5  # older turns were folded into the summary


async def test_status_lists_the_running_task_what_waits_and_scheduled_jobs(
    store: Store,
) -> None:
    gate = GateTool()
    script = [ScriptedTurn(tool_calls=[{"name": "wait", "args": {}}])]
    sink = ListSink()
    asked: list[str] = []

    async def jobs(key: str) -> list[str]:
        asked.append(key)
        return (
            ["daily: standup summary (next 2030-01-01T09:00+00:00)"] if key == "console:c1" else []
        )

    manager = Conversations(
        store,
        ScriptedProvider(script),
        sink,
        settings(queue_mode="followup"),
        tools=lambda m: [gate],
        jobs=jobs,
    )
    await manager.submit(inbound("summarize the thread", n=0))
    await asyncio.wait_for(gate.started.wait(), 30)
    await manager.submit(inbound("and then this", n=1))
    await manager.submit(inbound("/status", n=2))
    status = await sink.last("c1", 1)
    assert "working" in status and "1 waiting" in status
    assert "Working on: summarize the thread" in status
    assert "Waiting: and then this" in status
    assert "Scheduled: daily: standup summary" in status
    assert asked == ["console:c1"]
    await manager.submit(inbound("/stop", n=3))
    assert await sink.last("c1", 2) == "Stopped."
    assert gate.cancelled
    await settle(manager)


async def test_status_shows_jobs_before_any_conversation(store: Store) -> None:
    sink = ListSink()

    async def reminder(key: str) -> list[str]:
        return ["r1: reminder: call Bob"]

    manager = Conversations(store, ScriptedProvider(), sink, settings(), jobs=reminder)
    await manager.submit(inbound("/status", n=0))
    await settle(manager)
    assert sink.texts("c1") == [
        "No conversation yet.\nQueue mode: collect (agent's).\nModel: scripted (agent's).\n"
        "System prompt: none.\n"
        "Backend: model (agent's).\nScheduled: r1: reminder: call Bob"
    ]


async def test_a_run_logs_with_channel_conversation_and_run_ids(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[dict[str, str]] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.name == "botd.conversation" and record.getMessage().startswith("run ended:"):
                seen.append(LogContext.current())

    handler = Capture()
    logging.getLogger("botd.conversation").addHandler(handler)
    caplog.set_level(logging.INFO, logger="botd.conversation")
    try:
        sink = ListSink()
        manager = Conversations(store, ScriptedProvider(), sink, settings())
        await manager.submit(inbound("hello", n=0))
        await settle(manager)
        await manager.submit(inbound("again", n=1))
        await settle(manager)
    finally:
        logging.getLogger("botd.conversation").removeHandler(handler)
    session_id = manager.conversations["console:c1"].session_id
    assert seen == [
        {"channel": "console", "conversation": "console:c1", "run": f"{session_id}:1"},
        {"channel": "console", "conversation": "console:c1", "run": f"{session_id}:2"},
    ]
    assert LogContext.current() == {}


async def test_run_hooks_report_start_end_and_first_reply(store: Store) -> None:
    events: list[tuple[str, object]] = []
    hooks = RunHooks(
        on_start=lambda m: events.append(("start", m.text)),
        on_end=lambda m, outcome: events.append(("end", outcome)),
        on_first_reply=lambda m, seconds: events.append(("first", seconds is not None)),
    )
    sink = ListSink()
    manager = Conversations(store, ScriptedProvider(), sink, settings(), hooks=hooks)
    await manager.submit(inbound("hello"))
    await settle(manager)
    assert events[0] == ("start", "hello")  # the reply and the end may come in either order
    assert sorted(events[1:], key=str) == [("end", "end_turn"), ("first", True)]


async def test_a_failing_hook_does_not_break_the_run(store: Store) -> None:
    def boom(message: InboundMessage) -> None:
        raise RuntimeError("hook bug")

    sink = ListSink()
    manager = Conversations(
        store, ScriptedProvider(), sink, settings(), hooks=RunHooks(on_start=boom)
    )
    await manager.submit(inbound("hello"))
    await settle(manager)
    assert sink.texts("c1") == ["You said: hello"]


async def test_coalescing_joins_small_blocks_and_flushes_at_tool_starts(store: Store) -> None:
    from botd.conversation import CoalesceSettings

    class NoopTool:
        spec = ToolDefinition("noop", "Does nothing.", {"type": "object", "properties": {}})
        timeout: float | None = None

        async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
            return ToolOutput("done")

    script = [
        ScriptedTurn(text="One.\n\nTwo.\n\nThree.", tool_calls=[{"name": "noop", "args": {}}]),
        ScriptedTurn(text="Four.\n\nFive."),
    ]
    # Paragraph blocks of a few characters each; the idle window is long, so only the tool
    # start and the end of the run flush what the coalescer holds.
    small_blocks = SubscriberConfig(chunking=ChunkingConfig(1, 8))
    coalesce = CoalesceSettings(min_chars=1, max_chars=1000, idle_ms=60_000)
    sink = ListSink()
    manager = Conversations(
        store,
        ScriptedProvider(script),
        sink,
        settings(subscriber=small_blocks, coalesce=coalesce),
        tools=lambda m: [NoopTool()],
    )
    await manager.submit(inbound("go"))
    await settle(manager)
    assert sink.texts("c1") == ["One.\n\nTwo.\n\nThree.", "Four.\n\nFive."]

    plain = ListSink()
    uncoalesced = Conversations(
        store,
        ScriptedProvider(script),
        plain,
        settings(subscriber=small_blocks),
        tools=lambda m: [NoopTool()],
    )
    await uncoalesced.submit(inbound("go", chat="c2"))
    await settle(uncoalesced)
    assert plain.texts("c2") == ["One.", "Two.", "Three.", "Four.", "Five."]


def test_coalesce_config_reaches_the_sessions() -> None:
    from botd.config import parse_config
    from botd.wiring import session_settings

    text = (
        "agent:\n  block_streaming:\n    break_preference: newline\n"
        "    coalesce: {min_chars: 100, max_chars: 500, idle_ms: 250}\n"
    )
    coalesce = session_settings(parse_config(text, {}, "botd.yaml")).coalesce
    assert coalesce is not None
    assert (coalesce.min_chars, coalesce.max_chars, coalesce.idle_ms, coalesce.joiner) == (
        100,
        500,
        250,
        "\n",
    )


async def test_new_with_text_starts_over_with_that_text(store: Store) -> None:
    provider = RecordingProvider(ScriptedProvider())
    sink = ListSink()
    manager = Conversations(store, provider, sink, settings())
    await manager.submit(inbound("old topic", n=0))
    await settle(manager)
    old = manager.conversations["console:c1"].session_id
    await manager.submit(inbound("/new  what is\nthe new topic?", n=1))
    await settle(manager)
    assert manager.conversations["console:c1"].session_id != old
    assert provider.prompts()[-1] == ["what is\nthe new topic?"]
    # Its answer is the reply: no separate "Started a new conversation."
    # (the scripted echo is posted a line per block)
    assert sink.texts("c1") == ["You said: old topic", "You said: what is", "the new topic?"]


async def test_a_burst_within_the_debounce_is_one_prompt_in_any_mode(store: Store) -> None:
    for mode in ("collect", "followup"):
        provider = RecordingProvider(ScriptedProvider())
        sink = ListSink(channel="console")
        timer = ManualTimer()
        manager = Conversations(
            store, provider, sink, settings(queue_mode=mode, debounce=1.0), timer=timer
        )
        chat = f"burst-{mode}"
        for n, text in enumerate(["hi", "can you", "check the logs"]):
            await manager.submit(inbound(text, chat=chat, n=n))
            timer.advance(0.5)  # each line half a second after the one before
        timer.advance(1.0)
        await settle(manager)
        # Without the debounce the first line ran at once and got an answer of its own.
        assert provider.prompts() == [["hi\n\ncan you\n\ncheck the logs"]], mode
        assert len(sink.texts(chat)) == 3  # one answer (the echo posts a line per block)


async def test_messages_apart_by_more_than_the_debounce_are_answered_apart(
    store: Store,
) -> None:
    provider = RecordingProvider(ScriptedProvider())
    sink = ListSink()
    timer = ManualTimer()
    manager = Conversations(
        store, provider, sink, settings(queue_mode="followup", debounce=1.0), timer=timer
    )
    await manager.submit(inbound("one", n=0))
    await until(lambda: timer.waiting == 1, "the first line to wait for more")
    timer.advance(1.0)
    await settle(manager)
    timer.advance(0.5)  # "two" comes 1.5 s after "one": past the debounce
    await manager.submit(inbound("two", n=1))
    await until(lambda: timer.waiting == 1, "the second line to wait for more")
    timer.advance(1.0)
    await settle(manager)
    assert provider.prompts() == [["one"], ["one", "two"]]


async def test_stop_during_the_debounce_answers_nothing_of_the_burst(store: Store) -> None:
    provider = RecordingProvider(ScriptedProvider())
    sink = ListSink()
    timer = ManualTimer()
    manager = Conversations(store, provider, sink, settings(debounce=120.0), timer=timer)
    await manager.submit(inbound("never mind", n=0))
    await until(lambda: timer.waiting == 1, "its worker to wait for more")
    await manager.submit(inbound("/stop", n=1))
    await settle(manager)  # (its hang guard is 30 s: the worker ends with the queue cleared)
    assert provider.requests == []
    assert sink.texts("c1") == ["Stopped."]


async def test_a_shutdown_does_not_wait_out_the_debounce(sqlite_store: SqliteStore) -> None:
    provider = RecordingProvider(ScriptedProvider())
    timer = ManualTimer()
    manager = Conversations(
        sqlite_store, provider, ListSink(), settings(debounce=120.0), timer=timer
    )
    await manager.submit(await _accepted(sqlite_store, inbound("later", n=0)))
    await until(lambda: timer.waiting == 1, "its worker to wait for more")
    await asyncio.wait_for(manager.close(grace=60.0), 30)
    assert provider.requests == []
    # Not answered: still in the inbox, for the next start.
    assert [entry.message.text for entry in sqlite_store.unfinished_inbox()] == ["later"]


async def _accepted(store: Store, message: InboundMessage) -> InboundMessage:
    inbox_id = await store.accept_inbound(message.channel, (message.message_id,), message)
    assert inbox_id is not None
    return replace(message, inbox_id=inbox_id)


async def test_a_reset_by_policy_is_said_before_the_next_answer(store: Store) -> None:
    now = [1_000_000.0]
    sink = ListSink()
    policy = ResetPolicy(mode="idle", idle_minutes=30)
    manager = Conversations(
        store, ScriptedProvider(), sink, settings(reset=policy), clock=lambda: now[0]
    )
    await manager.submit(inbound("morning", n=0))
    await settle(manager)
    now[0] += 31 * 60
    await manager.submit(inbound("much later", n=1))
    await settle(manager)
    now[0] += 60
    await manager.submit(inbound("and again", n=2))
    await settle(manager)
    # Before, the conversation started over silently: the model's memory just ended.
    assert sink.texts("c1") == [
        "You said: morning",
        "(A new conversation: the last one was idle for 30 minutes or more.)",
        "You said: much later",
        "You said: and again",
    ]


def test_the_daily_reset_names_its_hour() -> None:
    assert ResetPolicy(mode="daily", daily_hour=4).notice() == (
        "(A new conversation: conversations start over every day at 04:00.)"
    )


async def test_whoami_gives_the_ids_the_settings_take(store: Store) -> None:
    sink = ListSink(channel="telegram")
    manager = Conversations(store, ScriptedProvider(), sink, settings())
    message = InboundMessage(
        channel="telegram",
        chat_id="-100123",
        sender_id="4242",
        sender_name="Ann Lee",
        text="/whoami@botd_bot",
        message_id="7",
        conversation_key="telegram:-100123:topic:5",
        thread_id="5",
        bot_name="botd_bot",
    )
    await manager.submit(message)
    await settle(manager)
    assert sink.texts("-100123") == [
        "You: Ann Lee (user id 4242).\n"
        "Here: telegram chat -100123, thread 5 (conversation telegram:-100123:topic:5)."
    ]


class PhotoTool:
    spec = ToolDefinition("photo", "Takes a photo.", {"type": "object", "properties": {}})
    timeout: float | None = None

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput("took one", images=(ImageContent(mime_type="image/png", data=PIXELS),))


PIXELS = "iVBORw0KGgo" + "A" * 4000


async def test_a_recording_keeps_no_image_data_and_still_replays(
    store: Store, tmp_path: Path
) -> None:
    record_dir = tmp_path / "runs"
    script = [ScriptedTurn(tool_calls=[{"name": "photo", "args": {}}]), ScriptedTurn(text="Done.")]
    provider = RecordingProvider(ScriptedProvider(script))
    manager = Conversations(
        store,
        provider,
        ListSink(),
        settings(record_events_dir=record_dir),
        tools=lambda m: [PhotoTool()],
    )
    await manager.submit(inbound("take a photo"))
    await settle(manager)
    # The model got the picture; the recording only its size.
    sent = [b for m in provider.requests[-1].messages for b in m.blocks()]
    assert any(isinstance(b, ImageContent) and b.data == PIXELS for b in sent)
    (path,) = record_dir.glob("*.jsonl")
    recorded = path.read_text(encoding="utf-8")
    assert PIXELS[:40] not in recorded
    assert f'"omitted": "{len(PIXELS)} characters of base64"' in recorded
    events = read_events(recorded.splitlines())
    assert events[-1].type == "agent_end"


async def test_start_greets_instead_of_asking_the_model(store: Store) -> None:
    provider = RecordingProvider(ScriptedProvider())
    sink = ListSink()
    manager = Conversations(store, provider, sink, settings())
    await manager.submit(inbound("/start", n=0))  # Telegram's app sends it on first contact
    await settle(manager)
    [greeting] = sink.texts("c1")
    assert greeting.startswith("Hello! Write to me and I will answer. Commands: /new")
    assert provider.requests == []
