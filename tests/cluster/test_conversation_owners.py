"""Two botd nodes on one PostgreSQL (cluster mode), in this test's event loop: each polls a
Telegram fake of its own (the same bot token), so a message arrives on the node the test
chooses; the conversation's owner (by lease) answers it, through its own fake. What the
chats show is read from both fakes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path

from botd.app import App
from botd.chat import InboundMessage
from botd.store.postgres import PostgresStore
from tests.chat import telegram_ready
from tests.conversation.crash import PARAGRAPHS, long_answer
from tests.daemon_inprocess import anthropic_yaml, daemon_running, telegram_yaml
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.waiting import until

TOKEN = "123456:TEST-TOKEN"
TTL = 2.0


def node_config(
    tmp_path: Path, name: str, dsn: str, telegram: FakeTelegramAPI, *extra: str, ttl: float = TTL
) -> str:
    return (
        f"state_dir: {json.dumps(str(tmp_path / name))}\n"
        "health: {enabled: false}\n"
        "shutdown_grace: 1\n"
        f"store:\n  backend: postgres\n  dsn: {json.dumps(dsn)}\n"
        f"  node_id: {name}\n  lease_ttl: {ttl}\n"
        + telegram_yaml(telegram, "poll_timeout: 1", "dm_policy: open")
        + "".join(extra)
    )


@asynccontextmanager
async def two_nodes(
    tmp_path: Path, dsn: str, *extra: str, ttl: float = TTL
) -> AsyncIterator[tuple[list[FakeTelegramAPI], list[App]]]:
    async with AsyncExitStack() as stack:
        fakes = [await stack.enter_async_context(FakeTelegramAPI(TOKEN)) for _ in range(2)]
        apps = [
            await stack.enter_async_context(
                daemon_running(
                    node_config(tmp_path, f"node-{i}", dsn, fakes[i], *extra, ttl=ttl),
                    ready=telegram_ready,
                )
            )
            for i in range(2)
        ]
        yield fakes, apps


def texts(telegram: FakeTelegramAPI, chat: int) -> list[str]:
    return [
        str(c.params["text"])
        for c in telegram.calls_to("sendMessage", ok_only=True)
        if str(c.params["chat_id"]) == str(chat)
    ]


def owner(apps: list[App], chat: int) -> int | None:
    """Which node owns the DM ``chat`` now."""
    for index, app in enumerate(apps):
        assert app.runtime is not None and app.runtime.ownership is not None
        if any(key.endswith(f":{chat}") for key in app.runtime.ownership.owned()):
            return index
    return None


async def test_messages_arriving_on_either_node_are_answered_once_in_order_by_the_owner(
    tmp_path: Path, postgres_dsn: str
) -> None:
    chats, rounds = list(range(101, 113)), 3
    # A TTL longer than the test: no conversation is let go as idle between the rounds.
    async with two_nodes(tmp_path, postgres_dsn, "agent:\n  queue_mode: followup\n", ttl=30) as (
        fakes,
        _apps,
    ):

        def answered(count: int) -> bool:
            return all(sum(len(texts(fake, chat)) for fake in fakes) >= count for chat in chats)

        for n in range(1, rounds + 1):
            for chat in chats:
                # Each conversation's messages arrive on one node, then the other (one
                # platform: the message ids go on across the two fakes).
                fakes[(chat + n) % 2].push_text(chat, f"c{chat} m{n}", message_id=n)
            await until(partial(answered, n), f"round {n} answered", guard=60)
        for chat in chats:
            expected = [f"You said: c{chat} m{n}" for n in range(1, rounds + 1)]
            # All answered once, in order, by the one node that owns the conversation.
            assert sorted([texts(fakes[0], chat), texts(fakes[1], chat)]) == [[], expected]
        # The conversations' runs went to both nodes.
        assert all(fake.calls_to("sendMessage", ok_only=True) for fake in fakes)


async def test_a_stop_accepted_by_the_other_node_stops_the_owners_run(
    tmp_path: Path, postgres_dsn: str
) -> None:
    chat = 777
    async with FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(long_answer(delay=0.3))
        extra = (
            anthropic_yaml(model),
            "agent:\n  block_streaming: {min_chars: 10, max_chars: 200}\n",
        )
        async with two_nodes(tmp_path, postgres_dsn, *extra) as (fakes, apps):
            fakes[0].push_text(chat, "tell me the long story")
            found = await until(lambda: owner(apps, chat) is not None, "an owner")
            assert found
            owning = owner(apps, chat)
            assert owning is not None
            await until(lambda: len(texts(fakes[owning], chat)) >= 2, "the answer under way")
            # /stop arrives on the node that does not own the conversation.
            fakes[1 - owning].push_text(chat, "/stop", message_id=1000)
            await until(
                lambda: "Stopped." in texts(fakes[owning], chat),
                "the owner's answer to /stop",
            )
            assert texts(fakes[1 - owning], chat) == []  # the other node posted nothing
            shown = texts(fakes[owning], chat)
            assert len([t for t in shown if t in PARAGRAPHS]) < len(PARAGRAPHS)


async def test_an_accept_no_node_was_told_of_is_answered_by_the_claimer(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """An accept whose commit reply was cut: committed, but the node never handed it on (no
    pull, no NOTIFY). The claimer finds it, claims the conversation and answers it."""
    async with two_nodes(tmp_path, postgres_dsn) as (fakes, _apps):
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
        await until(
            lambda: sum(len(texts(fake, 555)) for fake in fakes) >= 1, "the claimer's answer"
        )
        answers = [t for fake in fakes for t in texts(fake, 555)]
        assert len(answers) == 1 and answers[0].endswith("was anyone told?")


async def test_an_idle_conversation_lets_its_lease_go_and_leaves_memory(
    tmp_path: Path, postgres_dsn: str
) -> None:
    chat = 303
    async with two_nodes(tmp_path, postgres_dsn) as (fakes, apps):
        fakes[0].push_text(chat, "first", message_id=1)
        await until(lambda: any(texts(fake, chat) for fake in fakes), "the first answer")
        first = owner(apps, chat)
        assert first is not None
        await until(lambda: owner(apps, chat) is None, "the idle conversation let go")
        runtime = apps[first].runtime
        assert runtime is not None
        assert f"telegram:{chat}" not in runtime.sessions.conversations
        rows = await runtime.leases.table.rows()
        assert [r.expires_in <= 0 for r in rows if r.name == f"conversation:telegram:{chat}"] == [
            True
        ]
        # A new message is taken up at once by whichever node claims it.
        fakes[1].push_text(chat, "second", message_id=2)
        await until(lambda: sum(len(texts(fake, chat)) for fake in fakes) == 2, "the second answer")
