"""The conversation's promise under random interleavings (a hypothesis state machine).

One conversation over a real SQLite store and the real delivery, a scripted model that echoes
each prompt, and a platform at the edge that records every post. Hypothesis interleaves:
messages arriving (steering in ``steer`` mode), ``/stop`` and ``/new``, sends the platform
refuses, answers with a 5xx once, or that hang, the event loop running on for a while, and
crashes at any point: the database is copied as a crash leaves it (what was committed),
everything of the process is dropped, and a new one opens the copy and resumes (its
dispatcher's first poll claims what was left). Every message goes in as botd's do: accepted
into the inbox, then handed over by the dispatcher.

The invariants, checked once the platform works again and everything settled:

* every accepted message ends answered, failed or skipped, and a state once final stays so;
* each answer line (a block) is posted at most once, except in the documented ambiguous window (a
  piece posted whose sent mark a crash lost: then once more);
* answers come in the order their messages were accepted.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import shutil
import sqlite3
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from botd.agent.loop import LoopConfig
from botd.agent.providers.scripted import ScriptedProvider
from botd.chat import InboundMessage
from botd.cluster.leases import LeaseKeeper
from botd.conversation import Conversations, SessionSettings
from botd.conversation.dispatcher import Dispatcher
from botd.delivery import ChannelDelivery
from botd.delivery.retrying import Retrier, RetrySettings
from botd.store.sqlite import DB_FILENAME, SqliteStore
from botd.subscriber import ChunkingConfig, SubscriberConfig
from tests.conversation.platform import Edge, Platform

CHAT = "c1"
KEY = f"console:{CHAT}"
GUARD = 30.0
WORD = re.compile(r"\bm(\d+)\b")
FINAL = {"answered", "failed", "skipped"}


async def _no_wait(_seconds: float) -> None:
    await asyncio.sleep(0)


class PromiseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix="botd-promise-"))
        self.generation = 0
        self.platform = Platform()
        self.numbers = itertools.count(1)
        self.accepted: list[tuple[int, int | None]] = []
        """(inbox id, message number; None for a command), in acceptance order."""
        self.final: dict[int, str] = {}
        self.allowance: Counter[str] = Counter()
        """Extra posts allowed per answer line (the ambiguous window)."""
        self.mode = "collect"
        self.store: SqliteStore | None = None
        self.conversations: Conversations | None = None
        self.dispatcher: Dispatcher | None = None
        self.edge: Edge | None = None

    # -- the process ------------------------------------------------------------------------

    def _state(self) -> Path:
        return self.dir / f"state{self.generation}"

    def _run(self, coro: object) -> object:
        return self.loop.run_until_complete(asyncio.wait_for(coro, GUARD))  # type: ignore[arg-type]

    async def _start(self) -> None:
        self.store = SqliteStore.open(self._state())
        self.edge = Edge(self.platform)
        delivery = ChannelDelivery(
            {"console": self.edge},
            retrier=Retrier(RetrySettings(budget=3600, first=0, cap=0), sleep=_no_wait),
        )
        settings_ = SessionSettings(
            loop=LoopConfig(model="scripted"),
            subscriber=SubscriberConfig(chunking=ChunkingConfig(1, 4000)),
            queue_mode=self.mode,  # type: ignore[arg-type]
            typing_delay=3600,
        )
        self.conversations = Conversations(self.store, ScriptedProvider(), delivery, settings_)
        self.dispatcher = Dispatcher(self.conversations, self.store, LeaseKeeper.alone("node"))
        await self.dispatcher.start()

    @initialize(mode=st.sampled_from(["collect", "followup", "steer", "interrupt"]))
    def start(self, mode: str) -> None:
        self.mode = mode
        self._run(self._start())

    def teardown(self) -> None:
        try:
            if self.conversations is not None:
                self._settle_all()
                self._check_final()
        finally:
            self._drop()
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def _drop(self) -> None:
        """Drop the process: its tasks cancelled and awaited, its store closed."""
        if self.dispatcher is not None:
            self._run(self.dispatcher.close())
        if self.conversations is not None:
            self.platform.gate.set()
            self._run(self.conversations.close(grace=0))
        if self.store is not None:
            self.store.close()
        self.conversations = self.store = None
        self.dispatcher = None

    # -- rules ------------------------------------------------------------------------------

    async def _accept(self, text: str, number: int | None) -> None:
        assert self.store is not None and self.dispatcher is not None
        n = next(self.numbers)
        message = InboundMessage(
            channel="console",
            chat_id=CHAT,
            sender_id="u1",
            text=text,
            message_id=f"{CHAT}-{n}",
            conversation_key=KEY,
            is_direct=True,
        )
        inbox_id = await self.store.accept_inbound("console", [message.message_id], message)
        assert inbox_id is not None
        self.accepted.append((inbox_id, number))
        await self.dispatcher.arrived(replace(message, inbox_id=inbox_id))

    @rule()
    def message(self) -> None:
        # Two paragraphs: an answer of two blocks, so a crash can fall between them.
        number = next(self.numbers)
        self._run(self._accept(f"m{number} one\n\nm{number} two", number))

    @rule(command=st.sampled_from(["/stop", "/new"]))
    def command(self, command: str) -> None:
        self._run(self._accept(command, None))

    @rule(fine=st.integers(0, 2), how=st.sampled_from(["refuse", "5xx", "hang"]))
    def sends(self, fine: int, how: str) -> None:
        """After ``fine`` more sends that go through, one goes ``how``."""
        self.platform.script.extend(["ok"] * fine + [how])

    @rule()
    def unhang(self) -> None:
        self.platform.gate.set()
        self.platform.gate = asyncio.Event()

    @rule(steps=st.integers(1, 80))
    def run_on(self, steps: int) -> None:
        async def spin() -> None:
            for _ in range(steps):
                await asyncio.sleep(0)

        self._run(spin())

    @rule()
    def crash(self) -> None:
        """The process dies now: what is committed survives, nothing else."""
        crashed = self.dir / f"state{self.generation + 1}"
        crashed.mkdir()
        source = sqlite3.connect(self._state() / DB_FILENAME)
        copy = sqlite3.connect(crashed / DB_FILENAME)
        try:
            source.backup(copy)  # what is committed, as the crash leaves the disk
        finally:
            copy.close()
            source.close()
        assert self.edge is not None
        self.edge.alive = False
        posted = list(self.platform.posts)
        self._drop()
        self.generation += 1
        # The ambiguous window: a line posted whose piece is not marked sent on the disk.
        db = sqlite3.connect(crashed / DB_FILENAME)
        try:
            rows = db.execute("SELECT text FROM outbox WHERE state != 'sent'").fetchall()
        finally:
            db.close()
        unconfirmed = [str(row[0]) for row in rows]
        for text in unconfirmed:
            if text in posted:
                self.allowance[text] += 1
        self.platform.script.clear()
        self.platform.gate = asyncio.Event()
        self._run(self._start())

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def final_states_stay_final(self) -> None:
        if self.store is None:
            return
        for inbox_id, _number in self.accepted:
            state = self.store.inbox_state(inbox_id)
            if inbox_id in self.final:
                assert state == self.final[inbox_id], (inbox_id, self.final[inbox_id], state)
            elif state in FINAL:
                self.final[inbox_id] = state

    @invariant()
    def no_answer_line_twice(self) -> None:
        counts = Counter(post for post in self.platform.posts if WORD.search(post))
        for line, count in counts.items():
            assert count <= 1 + self.allowance[line], (line, self.platform.posts)

    def _settle_all(self) -> None:
        """The platform works again and everything runs to its end."""
        self.platform.script.clear()
        self.platform.gate.set()
        assert self.dispatcher is not None
        self._run(self.dispatcher.drain())

    def _check_final(self) -> None:
        assert self.store is not None
        for inbox_id, number in self.accepted:
            state = self.store.inbox_state(inbox_id)
            assert state in FINAL, (inbox_id, number, state)
        order = []
        for post in self.platform.posts:
            for n in WORD.findall(post):
                if int(n) not in order:
                    order.append(int(n))
        assert order == sorted(order), self.platform.posts


PromiseMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=14,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestPromise = PromiseMachine.TestCase
