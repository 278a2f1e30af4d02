"""The durable inbox: accepted in one transaction, states as runs go, resumed after a restart
(by the dispatcher's first poll, which claims every conversation left unfinished)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from botd.agent.providers.scripted import ScriptedProvider, ScriptedTurn
from botd.chat import InboundMessage, Target
from botd.cluster.leases import LeaseKeeper
from botd.conversation import Conversations
from botd.conversation.dispatcher import Dispatcher
from botd.events import Message, TextContent, ToolCallContent
from botd.inbound.access import AccessPolicy
from botd.inbound.router import Router
from botd.store.sqlite import DB_FILENAME, SqliteStore
from tests.conversation.harness import (
    GateTool,
    ListSink,
    RecordingProvider,
    dispatching,
    inbound,
    settings,
)
from tests.support.waiting import until

GUARD = 30.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    opened = SqliteStore.open(tmp_path / "state")
    yield opened
    opened.close()


async def _accept(store: SqliteStore, message: InboundMessage) -> InboundMessage:
    inbox_id = await store.accept_inbound(message.channel, (message.message_id,), message)
    assert inbox_id is not None
    return replace(message, inbox_id=inbox_id)


def _states(store: SqliteStore) -> list[str]:
    rows = store._connection().execute("SELECT state FROM inbox ORDER BY id").fetchall()
    return [str(row[0]) for row in rows]


def _user(text: str) -> Message:
    return Message(role="user", content=[TextContent(text=text)])


# --- the store ------------------------------------------------------------------------------


async def test_a_message_and_its_keys_are_accepted_once(store: SqliteStore) -> None:
    message = replace(inbound("hello"), target=Target("console", "c1", thread_id="t"))
    first = await store.accept_inbound("console", ("a", "b"), message)
    assert first is not None
    assert await store.accept_inbound("console", ("b", "c"), message) is None
    assert await store.seen_inbound("console", "c")  # the repeat's other key was recorded
    [entry] = store.unfinished_inbox()
    assert entry.id == first and entry.state == "accepted"
    assert entry.message == replace(message, inbox_id=first)  # round-trips, target included


async def test_a_run_writes_its_user_turn_with_the_running_state(store: SqliteStore) -> None:
    session = store.get_or_create_session("console:c1")
    ids = [(await _accept(store, inbound(t, n=n))).inbox_id for n, t in enumerate(["a", "b"])]
    known = [i for i in ids if i is not None]
    store.start_inbox_run(known, session_id=session.session_id, run_id="r1", user_turn=[_user("a")])
    assert store.load_transcript(session.session_id) == [_user("a")]
    entries = store.unfinished_inbox()
    assert [e.state for e in entries] == ["running", "running"]
    assert entries[0].user_turn_id is not None
    assert entries[0].user_turn_id == entries[1].user_turn_id
    store.finish_inbox(known, "answered")
    assert store.unfinished_inbox() == []
    with pytest.raises(ValueError):
        store.finish_inbox(known, "running")


async def test_trimming_keeps_finished_steps_and_drops_what_was_cut(store: SqliteStore) -> None:
    session = store.get_or_create_session("console:c1")
    [message] = [await _accept(store, inbound("go"))]
    assert message.inbox_id is not None
    store.start_inbox_run(
        [message.inbox_id], session_id=session.session_id, run_id="r", user_turn=[_user("go")]
    )
    call = Message(
        role="assistant",
        content=[ToolCallContent(id="t1", name="wait"), ToolCallContent(id="t2", name="wait")],
        stop_reason="tool_use",
    )
    result = Message(role="tool_result", tool_call_id="t1", content=[TextContent(text="ok")])
    result2 = Message(role="tool_result", tool_call_id="t2", content=[TextContent(text="ok")])
    cut = Message(role="assistant", content=[TextContent(text="half an ans")], stop_reason="end")
    store.append_messages(session.session_id, [call, result, result2, cut])
    [entry] = store.unfinished_inbox()
    assert entry.user_turn_id is not None
    assert await store.trim_interrupted(session.session_id, entry.user_turn_id)
    assert store.load_transcript(session.session_id) == [_user("go"), call, result, result2]
    # A step whose tool calls are not all answered is dropped whole.
    store.append_messages(session.session_id, [call, result])
    assert await store.trim_interrupted(session.session_id, entry.user_turn_id)
    assert store.load_transcript(session.session_id) == [_user("go"), call, result, result2]
    assert store.get_session(session.session_id).message_count == 4
    # After a /new the turn is no longer live: nothing to continue from.
    store.new_session("console:c1")
    assert not await store.trim_interrupted(session.session_id, entry.user_turn_id)


async def test_the_outbox_keeps_what_was_sent_and_what_was_not(store: SqliteStore) -> None:
    target = Target("console", "c1")
    sent = await store.outbox_add(7, 1, "block", target, "one")
    pending = await store.outbox_add(7, 2, "block", target, "two")
    failed = await store.outbox_add(None, 1, "final", target, "three")
    store.outbox_sent(sent, ["m1"])
    store.outbox_failed(failed)
    assert await store.outbox_sent_texts([7]) == ["one"]
    [left] = store.outbox_pending()
    assert (left.id, left.anchor, left.text, left.target) == (pending, 7, "two", target)
    await store.outbox_supersede([pending])
    assert store.outbox_pending() == []


async def test_finished_rows_are_pruned_and_open_ones_kept(tmp_path: Path) -> None:
    now = [1000.0]
    with SqliteStore.open(tmp_path, clock=lambda: now[0]) as store:
        done = await _accept(store, inbound("done", n=1))
        await _accept(store, inbound("open", n=2))
        assert done.inbox_id is not None
        store.finish_inbox([done.inbox_id], "answered")
        sent = await store.outbox_add(done.inbox_id, 1, "block", Target("c", "1"), "x")
        store.outbox_sent(sent, [])
        await store.outbox_add(done.inbox_id, 2, "block", Target("c", "1"), "y")
        now[0] += 100
        assert await store.prune_finished(50) == 2
        assert _states(store) == ["accepted"]
        assert [p.text for p in store.outbox_pending()] == ["y"]


# --- the router -----------------------------------------------------------------------------


async def test_the_router_hands_on_only_what_it_accepted(store: SqliteStore) -> None:
    got: list[InboundMessage] = []

    async def submit(message: InboundMessage) -> None:
        got.append(message)

    async def reply(target: Target, text: str) -> None:
        return None

    router = Router(store, submit, reply, {"console": AccessPolicy(dm_policy="open")})
    message = replace(inbound("hi"), is_direct=True)
    assert (await router.handle(message)).accepted
    assert not (await router.handle(message)).accepted
    assert len(got) == 1 and got[0].inbox_id is not None
    assert _states(store) == ["accepted"]
    # Refused by policy: remembered as seen, not put in the inbox.
    refused = replace(inbound("no", n=2), is_direct=False, chat_id="g1")
    assert not (await router.handle(refused)).accepted
    assert _states(store) == ["accepted"]


# --- the sessions ---------------------------------------------------------------------------


async def test_states_follow_the_runs(store: SqliteStore) -> None:
    sink = ListSink()
    manager = Conversations(store, ScriptedProvider(delay=0.005), sink, settings())
    first = await _accept(store, inbound("first", n=0))
    await manager.submit(first)
    await until(lambda: not manager.conversations["console:c1"].pending, "the first run to start")
    for n in (1, 2):
        await manager.submit(await _accept(store, inbound(f"more {n}", n=n)))
    await asyncio.wait_for(manager.drain(), GUARD)
    # The two waiting messages were collected into one run and answered with it.
    assert _states(store) == ["answered"] * 3
    assert sink.texts("c1") == ["You said: first", "You said: more 1", "more 2"]


async def test_stop_marks_the_run_and_what_waited_skipped(store: SqliteStore) -> None:
    gate = GateTool()
    provider = ScriptedProvider([ScriptedTurn(tool_calls=[{"name": "wait", "args": {}}])])
    manager = Conversations(store, provider, ListSink(), settings(), tools=lambda m: [gate])
    await manager.submit(await _accept(store, inbound("work", n=0)))
    await asyncio.wait_for(gate.started.wait(), GUARD)
    await manager.submit(await _accept(store, inbound("then this", n=1)))
    await manager.submit(await _accept(store, inbound("/stop", n=2)))
    await asyncio.wait_for(manager.drain(), GUARD)
    assert _states(store) == ["skipped", "skipped", "answered"]


async def test_the_user_turn_is_in_the_transcript_while_the_run_goes(store: SqliteStore) -> None:
    gate = GateTool()
    provider = ScriptedProvider([ScriptedTurn(tool_calls=[{"name": "wait", "args": {}}])])
    manager = Conversations(store, provider, ListSink(), settings(), tools=lambda m: [gate])
    await manager.submit(await _accept(store, inbound("remember me")))
    await asyncio.wait_for(gate.started.wait(), GUARD)
    session_id = store.get_or_create_session("console:c1").session_id
    roles = [m.role for m in store.load_transcript(session_id)]
    assert roles == ["user", "assistant"]  # the tool call's message, written when it ended
    gate.release.set()
    await asyncio.wait_for(manager.drain(), GUARD)
    roles = [m.role for m in store.load_transcript(session_id)]
    assert roles == ["user", "assistant", "tool_result", "assistant"]  # each once


async def test_a_run_cut_by_shutdown_resumes_in_a_new_manager(tmp_path: Path) -> None:
    state = tmp_path / "state"
    gate = GateTool()
    with SqliteStore.open(state) as store:
        provider = ScriptedProvider(
            [ScriptedTurn(text="Looking.", tool_calls=[{"name": "wait", "args": {}}])]
        )
        sink = ListSink()
        manager = Conversations(store, provider, sink, settings(), tools=lambda m: [gate])
        await manager.submit(await _accept(store, inbound("find it", n=0)))
        await asyncio.wait_for(gate.started.wait(), GUARD)
        await manager.submit(await _accept(store, inbound("and this", n=1)))
        await asyncio.wait_for(manager.close(grace=0.0), GUARD)
        assert _states(store) == ["running", "accepted"]
        assert sink.texts("c1") == ["Looking."]

    with SqliteStore.open(state) as store:
        recording = RecordingProvider(ScriptedProvider())
        sink = ListSink()
        manager = Conversations(store, recording, sink, settings(), tools=lambda m: [gate])
        await asyncio.sleep(0)
        assert recording.requests == []  # nothing runs before the dispatcher starts
        async with dispatching(manager, store) as dispatcher:
            await asyncio.wait_for(dispatcher.drain(), GUARD)
            assert dispatcher.held() == ["console:c1"]  # its first poll claimed it
        assert _states(store) == ["answered", "answered"]
        # The interrupted run went on from its transcript (its turn once), then the next one.
        assert recording.prompts()[0] == ["find it"]
        assert recording.prompts()[1] == ["find it", "and this"]
        texts = sink.texts("c1")
        assert texts[0] == "(The answer was interrupted by a restart; continuing.)"
        assert texts[-1] == "You said: and this"


async def test_a_shutdown_before_the_dispatcher_starts_runs_nothing_and_keeps_the_inbox(
    tmp_path: Path,
) -> None:
    with SqliteStore.open(tmp_path / "state") as store:
        await _accept(store, inbound("waiting"))
        recording = RecordingProvider(ScriptedProvider())
        manager = Conversations(store, recording, ListSink(), settings())
        dispatcher = Dispatcher(manager, store, LeaseKeeper.alone("node"))
        await asyncio.sleep(0)
        await asyncio.wait_for(dispatcher.close(), GUARD)
        await asyncio.wait_for(manager.close(grace=0.0), GUARD)
        assert recording.requests == []
        assert _states(store) == ["accepted"]


async def test_pieces_left_unconfirmed_by_a_finished_run_are_sent_at_start(
    store: SqliteStore,
) -> None:
    target = Target("console", "c1")
    sent = await store.outbox_add(None, 1, "block", target, "already shown")
    store.outbox_sent(sent, ["m1"])
    await store.outbox_add(None, 2, "block", target, "never confirmed")  # a scheduled run's piece
    open_run = await _accept(store, inbound("resumed"))
    await store.outbox_add(open_run.inbox_id, 1, "block", target, "the resumed run's")
    sink = ListSink()
    manager = Conversations(store, ScriptedProvider(), sink, settings())
    async with dispatching(manager, store) as dispatcher:
        await asyncio.wait_for(dispatcher.drain(), GUARD)
    # The finished run's piece went out once; the resumed run made its own answer.
    assert sink.texts("c1") == ["never confirmed", "You said: resumed"]
    assert store.outbox_pending() == []


async def test_a_resumed_answer_the_chat_already_shows_posts_nothing(store: SqliteStore) -> None:
    # The crash came after the whole answer was shown, before it was marked answered.
    message = await _accept(store, inbound("say it again"))
    assert message.inbox_id is not None
    session = store.get_or_create_session("console:c1")
    store.start_inbox_run(
        [message.inbox_id],
        session_id=session.session_id,
        run_id="r1",
        user_turn=[_user("say it again")],
    )
    target = Target("console", "c1")
    shown = await store.outbox_add(message.inbox_id, 1, "block", target, "You said: say it again")
    store.outbox_sent(shown, ["m1"])
    sink = ListSink()
    manager = Conversations(store, ScriptedProvider(), sink, settings())
    async with dispatching(manager, store) as dispatcher:
        await asyncio.wait_for(dispatcher.drain(), GUARD)
    assert sink.texts("c1") == []  # no repeat, and no notice for an answer already whole
    assert _states(store) == ["answered"]


async def test_a_resumed_batch_goes_on_alone_and_later_messages_follow(store: SqliteStore) -> None:
    # Two messages collected into one run that was cut, a third that was still waiting.
    first, second, _third = [await _accept(store, inbound(t, n=n)) for n, t in enumerate("abc")]
    ids = [m.inbox_id for m in (first, second) if m.inbox_id is not None]
    session = store.get_or_create_session("console:c1")
    store.start_inbox_run(
        ids, session_id=session.session_id, run_id="r1", user_turn=[_user("a\n\nb")]
    )
    recording = RecordingProvider(ScriptedProvider())
    sink = ListSink()
    manager = Conversations(store, recording, sink, settings(queue_mode="collect"))
    async with dispatching(manager, store) as dispatcher:
        await asyncio.wait_for(dispatcher.drain(), GUARD)
    # The cut run went on from its turn (not written again); the waiting one ran after it.
    assert recording.prompts() == [["a\n\nb"], ["a\n\nb", "c"]]
    assert sink.texts("c1") == ["You said: a", "b", "You said: c"]
    assert _states(store) == ["answered"] * 3
    assert [m.role for m in store.load_transcript(session.session_id)] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]


async def test_a_crash_right_after_the_reply_was_marked_sent_does_not_answer_again(
    tmp_path: Path,
) -> None:
    # The disk as a crash would leave it right after the commit that marked the reply sent:
    # the message must be marked answered in that same commit, or a restart would run it again
    # (and a real model would answer it a second time, in other words).
    state, crashed = tmp_path / "state", tmp_path / "crashed"
    with SqliteStore.open(state) as store:
        commit = store._transaction

        @contextmanager
        def snapshotting(kind: str) -> Iterator[sqlite3.Connection]:
            marks_sent = any(k == "outbox_sent" for k, _ in store._deferred or ())
            with commit(kind) as conn:
                yield conn
            if marks_sent and not crashed.exists():
                crashed.mkdir()
                with sqlite3.connect(crashed / DB_FILENAME) as copy:
                    store._connection().backup(copy)

        store._transaction = snapshotting  # type: ignore[method-assign]
        sink = ListSink()
        manager = Conversations(store, ScriptedProvider(), sink, settings())
        await manager.submit(await _accept(store, inbound("hello")))
        await asyncio.wait_for(manager.drain(), GUARD)
        await manager.close(grace=5)
        assert sink.texts("c1") == ["You said: hello"]
    assert crashed.exists()

    with SqliteStore.open(crashed) as store:
        recording = RecordingProvider(ScriptedProvider())
        sink = ListSink()
        manager = Conversations(store, recording, sink, settings())
        async with dispatching(manager, store) as dispatcher:
            await asyncio.wait_for(dispatcher.drain(), GUARD)
            assert dispatcher.held() == []  # nothing left to claim
        assert recording.requests == []
        assert sink.texts("c1") == []
        assert _states(store) == ["answered"]


async def test_a_new_left_unanswered_keeps_its_place_among_the_messages(store: SqliteStore) -> None:
    # A crash left three messages unanswered: one, then /new, then one for the new conversation.
    for n, text in enumerate(["old topic", "/new", "new topic"]):
        await _accept(store, inbound(text, n=n))
    before = store.get_or_create_session("console:c1").session_id
    recording = RecordingProvider(ScriptedProvider())
    sink = ListSink()
    manager = Conversations(store, recording, sink, settings())
    async with dispatching(manager, store) as dispatcher:
        await asyncio.wait_for(dispatcher.drain(), GUARD)
    # The message after /new is answered in the new conversation (before, /new was answered
    # last and dropped it); the one before it is dropped by /new, as a waiting message is.
    assert recording.prompts() == [["new topic"]]
    assert manager.conversations["console:c1"].session_id != before
    assert sorted(sink.texts("c1")) == ["Started a new conversation.", "You said: new topic"]
    assert _states(store) == ["skipped", "answered", "answered"]


async def test_a_resumed_run_of_new_with_text_does_not_start_over_again(store: SqliteStore) -> None:
    # /new with text had started over and its run was cut: the run goes on where it was.
    message = await _accept(store, inbound("/new what now?"))
    assert message.inbox_id is not None
    session = store.new_session("console:c1")
    store.start_inbox_run(
        [message.inbox_id],
        session_id=session.session_id,
        run_id="r1",
        user_turn=[_user("what now?")],
    )
    recording = RecordingProvider(ScriptedProvider())
    sink = ListSink()
    manager = Conversations(store, recording, sink, settings())
    async with dispatching(manager, store) as dispatcher:
        await asyncio.wait_for(dispatcher.drain(), GUARD)
    assert manager.conversations["console:c1"].session_id == session.session_id
    assert recording.prompts() == [["what now?"]]  # its turn, once
    assert sink.texts("c1") == ["You said: what now?"]
    assert _states(store) == ["answered"]
