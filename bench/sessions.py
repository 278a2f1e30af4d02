"""Sessions under load: 500 conversations x 10 messages through the whole runtime.

Each message goes through the router (dedupe and accept into the durable inbox), the
dispatcher (the entry pulled from the inbox for its conversation), the session manager (inbox
states, the transcript written as the run goes), the agent loop (scripted
provider, no delay), the subscriber, the final-reply step and the delivery (the run's outbox,
each piece journaled in the durable outbox before it is sent, typing, ``ChannelDelivery``) into
an in-memory platform, all on a real SQLite store. Three figures:

* capacity: 500 users each send their 10 messages one after another, the next as soon as
  the previous is answered, all users at once: messages per second;
* latency: the same 5,000 messages arriving at a steady 2,000 per second (each conversation
  still in order): p50 and p99 from a message's arrival to its first block;
* memory: peak RSS, and traced memory per idle session once 500 sessions have answered.

It asserts every message was answered exactly once, in order, and that the inbox and outbox
hold nothing unfinished at the end. The collector runs as in a started daemon
(``botd.app.settled_heap``). Targets: >= 2,000 messages
per second, p99 < 50 ms, < 50 KB per idle session.

Run: make bench   (or .venv/bin/python bench/sessions.py)
"""

from __future__ import annotations

import asyncio
import gc
import resource
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from botd.agent.loop import LoopConfig
from botd.agent.providers.scripted import ScriptedProvider
from botd.app import settled_heap
from botd.channels.base import InboundSink, OutboundFile, SendScope
from botd.chat import Attachment, Capabilities, InboundMessage, MessageRef, Target
from botd.cluster.leases import LeaseKeeper
from botd.conversation import Conversations, SessionSettings
from botd.conversation.dispatcher import Dispatcher
from botd.delivery import ChannelDelivery
from botd.inbound.access import AccessPolicy
from botd.inbound.router import Router
from botd.store.sqlite import SqliteStore
from botd.text.markup import PLAIN

CONVERSATIONS = 500
MESSAGES = 10
RATE = 2000.0  # messages per second for the latency run


class Sink:
    """A platform that records the first block of each answer, keyed by the message it
    answers; the real ``ChannelDelivery`` posts to it."""

    name = "bench"
    capabilities = Capabilities(text_limit=100_000, markup=PLAIN)

    def __init__(self) -> None:
        self.first_block_at: dict[str, float] = {}
        self.answers: dict[str, list[str]] = {}
        self.waiters: dict[str, asyncio.Future[None]] = {}

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        text = markdown.removeprefix("You said: ")
        self.first_block_at.setdefault(text, time.perf_counter())
        self.answers.setdefault(target.chat_id, []).append(text)
        waiter = self.waiters.pop(text, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        return [MessageRef(target, text)]

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        return [ref]

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        return None

    async def send_file(
        self,
        target: Target,
        file: OutboundFile,
        caption: str = "",
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        raise SystemExit("the bench sends no files")

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        raise SystemExit("the bench receives no files")

    async def react(self, ref: MessageRef, emoji: str) -> None:
        return None

    async def typing(self, target: Target) -> None:
        return None

    async def start(self, sink: InboundSink) -> None:
        return None

    async def stop_inbound(self) -> None:
        return None

    async def stop(self) -> None:
        return None


def message(conversation: int, n: int) -> InboundMessage:
    chat = f"chat{conversation}"
    return InboundMessage(
        channel="bench",
        chat_id=chat,
        sender_id=f"user{conversation}",
        text=f"{chat} message {n}",
        message_id=f"{chat}-{n}",
        conversation_key=f"bench:{chat}",
        is_direct=True,
    )


class Intake:
    """The sessions behind the router and the dispatcher, as the daemon wires them on one
    node: ``submit`` is the router; ``start`` starts the dispatcher, ``drain`` waits for it
    and the sessions."""

    def __init__(self, state: Path, sink: Sink) -> None:
        self.store = store = SqliteStore.open(state)
        settings = SessionSettings(loop=LoopConfig(model="scripted"), queue_mode="followup")
        delivery = ChannelDelivery({"bench": sink})
        self.manager = Conversations(store, ScriptedProvider(chunk_chars=64), delivery, settings)
        self.dispatcher = Dispatcher(self.manager, store, LeaseKeeper.alone("bench"))

        async def reply(target: Target, text: str) -> None:
            raise SystemExit(f"the router refused a message: {text}")

        open_policy = {"bench": AccessPolicy(dm_policy="open")}
        self.router = Router(store, self.dispatcher.arrived, reply, open_policy)

    async def start(self) -> None:
        await self.dispatcher.start()

    async def drain(self) -> None:
        await self.dispatcher.drain()
        await self.dispatcher.close()

    async def submit(self, inbound: InboundMessage) -> None:
        if not (await self.router.handle(inbound)).accepted:
            raise SystemExit(f"not accepted: {inbound.message_id}")

    def close(self) -> None:
        unfinished = self.store.unfinished_inbox()
        unsent = self.store.outbox_pending()
        self.store.close()
        if unfinished or unsent:
            raise SystemExit(f"{len(unfinished)} unanswered, {len(unsent)} unconfirmed pieces")


def check(sink: Sink) -> None:
    for conversation in range(CONVERSATIONS):
        chat = f"chat{conversation}"
        expected = [f"{chat} message {n}" for n in range(MESSAGES)]
        if sink.answers.get(chat) != expected:
            raise SystemExit(f"{chat}: lost, repeated or out of order: {sink.answers.get(chat)}")


async def capacity(state: Path) -> float:
    sink = Sink()
    intake = Intake(state, sink)
    await intake.start()
    loop = asyncio.get_running_loop()

    async def user(conversation: int) -> None:
        for n in range(MESSAGES):
            inbound = message(conversation, n)
            answered = loop.create_future()
            sink.waiters[inbound.text] = answered
            await intake.submit(inbound)
            await answered

    started = time.perf_counter()
    await asyncio.gather(*(user(c) for c in range(CONVERSATIONS)))
    await intake.drain()
    elapsed = time.perf_counter() - started
    intake.close()
    check(sink)
    return CONVERSATIONS * MESSAGES / elapsed


async def latency(state: Path) -> list[float]:
    sink = Sink()
    intake = Intake(state, sink)
    await intake.start()
    arrivals: dict[str, float] = {}
    started = time.perf_counter()
    index = 0
    for n in range(MESSAGES):
        for conversation in range(CONVERSATIONS):
            due = started + index / RATE
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            inbound = message(conversation, n)
            arrivals[inbound.text] = time.perf_counter()
            await intake.submit(inbound)
            index += 1
    await intake.drain()
    intake.close()
    check(sink)
    return [sink.first_block_at[text] - at for text, at in arrivals.items()]


async def idle_memory(state: Path) -> float:
    sink = Sink()
    gc.collect()
    tracemalloc.start()
    intake = Intake(state, sink)
    await intake.start()
    before = tracemalloc.get_traced_memory()[0]
    for conversation in range(CONVERSATIONS):
        await intake.submit(message(conversation, 0))
    await intake.drain()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    intake.close()
    return (after - before) / CONVERSATIONS


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, settled_heap():
        base = Path(tmp)
        rate = await capacity(base / "capacity")
        samples = sorted(await latency(base / "latency"))
        per_session = await idle_memory(base / "memory")
    p50 = statistics.median(samples) * 1000
    p99 = samples[int(len(samples) * 0.99) - 1] * 1000
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"capacity: {CONVERSATIONS * MESSAGES:,} messages at {rate:,.0f} messages/s")
    print(f"latency at {RATE:,.0f} messages/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    print(f"memory: peak RSS {peak_mb:.0f} MB, {per_session / 1024:.1f} KB per idle session")
    print("every message answered once, in order")


if __name__ == "__main__":
    asyncio.run(main())
