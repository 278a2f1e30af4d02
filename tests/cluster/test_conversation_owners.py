"""Two botd nodes on one PostgreSQL (cluster mode), in this test's event loop, behind one
Telegram in webhook mode, as several nodes are run behind a load balancer: the test plays
the balancer and POSTs each update to the node it chooses (its webhook listener, with the
secret token), so a message arrives on that node; the conversation's owner (by lease)
answers it. Each node reaches the one Bot API fake under a path prefix of its own, so what
the chats show is told apart by the node that sent it."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from botd.app import App
from botd.channels.telegram.adapter import TelegramAdapter
from botd.channels.telegram.webhook import SECRET_HEADER
from botd.chat import InboundMessage
from botd.store import Person
from botd.store.postgres import PostgresStore
from tests.conversation.crash import PARAGRAPHS, long_answer
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.telegram_api import FakeTelegramAPI, user
from tests.support.daemon_inprocess import anthropic_yaml, daemon_running
from tests.support.waiting import until

TOKEN = "123456:TEST-TOKEN"
SECRET = "cluster-webhook-secret"
TTL = 2.0
NODES = ("node-0", "node-1")


def node_config(
    tmp_path: Path, name: str, dsn: str, telegram: FakeTelegramAPI, *extra: str, ttl: float = TTL
) -> str:
    return (
        f"state_dir: {json.dumps(str(tmp_path / name))}\n"
        "health: {enabled: false}\n"
        "shutdown_grace: 1\n"
        f"store:\n  backend: postgres\n  dsn: {json.dumps(dsn)}\n"
        f"  node_id: {name}\n  lease_ttl: {ttl}\n"
        "channels:\n  telegram:\n"
        f"    token: {json.dumps(TOKEN)}\n"
        f"    api_base_url: {json.dumps(telegram.node_url(name))}\n"
        "    dm_policy: open\n"
        "    mode: webhook\n"
        # The balancer's public URL, the same on every node; each listens on a port of its own.
        "    webhook_url: https://bot.example.org/telegram\n"
        f"    webhook_secret: {SECRET}\n"
        "    listen: {host: 127.0.0.1, port: 0, path: /telegram}\n" + "".join(extra)
    )


def webhook_port(app: App) -> int | None:
    """The port ``app``'s Telegram webhook listens on, once it does."""
    adapter = None if app.runtime is None else app.runtime.adapters.get("telegram")
    return adapter.webhook_port if isinstance(adapter, TelegramAdapter) else None


@dataclass
class Cluster:
    """The one Telegram fake and the two nodes behind it."""

    telegram: FakeTelegramAPI
    apps: list[App]
    _next_update: int = field(default=1)

    async def arrive(self, node: int, chat: int, text: str, message_id: int) -> None:
        """The DM ``text`` from ``chat`` delivered to node ``node``'s webhook as Telegram
        POSTs it; answered 200, so that node accepted it."""
        update: dict[str, Any] = {
            "update_id": self._next_update,
            "message": {
                "message_id": message_id,
                "date": int(time.time()),
                "chat": self.telegram.chat(chat),
                "from": user(chat),
                "text": text,
            },
        }
        self._next_update += 1
        port = webhook_port(self.apps[node])
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"http://127.0.0.1:{port}/telegram", json=update, headers={SECRET_HEADER: SECRET}
            ) as response,
        ):
            assert response.status == 200, f"node {node} answered {response.status}"

    def texts(self, chat: int, node: int | None = None) -> list[str]:
        """What the bot posted in ``chat``, by node ``node`` only (None: by either)."""
        return [
            str(c.params["text"])
            for c in self.telegram.calls_to("sendMessage", ok_only=True)
            if str(c.params["chat_id"]) == str(chat) and (node is None or c.via == NODES[node])
        ]


@asynccontextmanager
async def two_nodes(
    tmp_path: Path, dsn: str, *extra: str, ttl: float = TTL
) -> AsyncIterator[Cluster]:
    async with AsyncExitStack() as stack:
        telegram = await stack.enter_async_context(FakeTelegramAPI(TOKEN))
        apps = [
            await stack.enter_async_context(
                daemon_running(
                    node_config(tmp_path, name, dsn, telegram, *extra, ttl=ttl),
                    ready=lambda app: webhook_port(app) is not None,
                )
            )
            for name in NODES
        ]
        yield Cluster(telegram, apps)


def owner(apps: list[App], chat: int) -> int | None:
    """Which node owns the DM ``chat`` now."""
    for index, app in enumerate(apps):
        assert app.runtime is not None
        if any(key.endswith(f":{chat}") for key in app.runtime.dispatcher.held()):
            return index
    return None


async def test_messages_arriving_on_either_node_are_answered_once_in_order_by_the_owner(
    tmp_path: Path, postgres_dsn: str
) -> None:
    chats, rounds = list(range(101, 113)), 3
    # A TTL longer than the test: no conversation is let go as idle between the rounds.
    async with two_nodes(
        tmp_path, postgres_dsn, "agent:\n  queue_mode: followup\n", ttl=30
    ) as cluster:

        def answered(count: int) -> bool:
            return all(len(cluster.texts(chat)) >= count for chat in chats)

        for n in range(1, rounds + 1):
            for chat in chats:
                # Each conversation's messages arrive on one node, then the other.
                await cluster.arrive((chat + n) % 2, chat, f"c{chat} m{n}", message_id=n)
            await until(partial(answered, n), f"round {n} answered", guard=60)
        for chat in chats:
            expected = [f"You said: c{chat} m{n}" for n in range(1, rounds + 1)]
            # All answered once, in order, by the one node that owns the conversation.
            assert sorted([cluster.texts(chat, 0), cluster.texts(chat, 1)]) == [[], expected]
        # The conversations' runs went to both nodes.
        assert {c.via for c in cluster.telegram.calls_to("sendMessage", ok_only=True)} == set(NODES)


async def test_a_stop_accepted_by_the_other_node_stops_the_owners_run(
    tmp_path: Path, postgres_dsn: str
) -> None:
    chat = 777
    async with FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(long_answer(delay=0.6))
        extra = (
            anthropic_yaml(model),
            "agent:\n  block_streaming: {min_chars: 10, max_chars: 200}\n",
        )
        async with two_nodes(tmp_path, postgres_dsn, *extra) as cluster:
            apps = cluster.apps
            await cluster.arrive(0, chat, "tell me the long story", message_id=1)
            await until(lambda: owner(apps, chat) is not None, "an owner")
            owning = owner(apps, chat)
            assert owning is not None
            await until(lambda: len(cluster.texts(chat, owning)) >= 2, "the answer under way")
            # /stop arrives on the node that does not own the conversation.
            await cluster.arrive(1 - owning, chat, "/stop", message_id=1000)
            await until(
                lambda: "Stopped." in cluster.texts(chat, owning), "the owner's answer to /stop"
            )
            assert cluster.texts(chat, 1 - owning) == []  # the other node posted nothing
            shown = cluster.texts(chat, owning)
            assert len([t for t in shown if t in PARAGRAPHS]) < len(PARAGRAPHS)


async def test_an_accept_no_node_was_told_of_is_answered_by_the_claimer(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """An accept whose commit reply was cut: committed, but the node never handed it on (no
    pull, no NOTIFY). The claimer finds it, claims the conversation and answers it."""
    async with two_nodes(tmp_path, postgres_dsn) as cluster:
        store = await PostgresStore.open(postgres_dsn)
        try:
            message = InboundMessage(
                channel="telegram",
                chat_id="555",
                sender_id="555",
                text="was anyone told?",
                message_id="555:1",
                conversation_key="telegram:555",
            )
            assert await store.accept_inbound("telegram", ["555:1"], message) is not None
        finally:
            await store.aclose()
        await until(lambda: cluster.texts(555), "the claimer's answer")
        answers = cluster.texts(555)
        assert len(answers) == 1 and answers[0].endswith("was anyone told?")


async def test_an_idle_conversation_lets_its_lease_go_and_leaves_memory(
    tmp_path: Path, postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    chat = 303
    async with two_nodes(tmp_path, postgres_dsn) as cluster:
        apps = cluster.apps
        await cluster.arrive(0, chat, "first", message_id=1)
        await until(lambda: cluster.texts(chat), "the first answer")
        first = owner(apps, chat)
        assert first is not None
        await until(lambda: owner(apps, chat) is None, "the idle conversation let go")
        runtime = apps[first].runtime
        assert runtime is not None
        assert f"telegram:{chat}" not in runtime.sessions.conversations

        async def released() -> bool:
            # The node forgets the conversation first, then expires its lease row: the
            # row is read until that write is in.
            assert runtime is not None
            rows = await runtime.leases.table.rows()
            named = [r for r in rows if r.name == f"conversation:telegram:{chat}"]
            assert len(named) == 1
            return named[0].expires_in <= 0

        await until(released, "the lease expired")
        # Released by the node (a failed release would say it is left to run out).
        assert "not released" not in caplog.text
        # A new message is taken up at once by whichever node claims it.
        await cluster.arrive(1, chat, "second", message_id=2)
        await until(lambda: len(cluster.texts(chat)) == 2, "the second answer")


async def test_a_forgotten_persons_next_message_is_answered_afresh(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """Forgetting takes every inbox row of the person's conversation, so its ``seq`` starts
    again below what its holder took: the holder lets it go as idle, and the next message is
    answered by whoever claims it, in a new session."""
    chat = 404
    async with two_nodes(tmp_path, postgres_dsn) as cluster:
        await cluster.arrive(0, chat, "first", message_id=1)
        await until(lambda: cluster.texts(chat), "the first answer")
        store = await PostgresStore.open(postgres_dsn)
        try:
            done = await store.forget_person(Person("telegram", str(chat)))
        finally:
            await store.aclose()
        assert done.removed["inbox"] == 1 and done.removed["sessions"] == 1
        await cluster.arrive(1, chat, "second", message_id=2)
        await until(lambda: len(cluster.texts(chat)) == 2, "the second answer")
        assert "first" not in cluster.texts(chat)[1]
