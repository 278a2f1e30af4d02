"""Two Telegram bots and two Discord bots in one config on two ``botd run`` nodes sharing one
PostgreSQL (issue 37): each bot's input (a Telegram poller, a Discord gateway shard) is held
by one node, the inputs spread over the two nodes so that each holds one poller and one
gateway, and the same person writing to all four bots gets four conversations, each answered
once by its own bot on its own server.

Node-a starts alone and takes all four inputs; node-b joins and is handed one of each kind.
Each node reaches each Bot API under its own path prefix, so every ``getUpdates`` is known by
the node that sent it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from tests.cluster.nodes import Node, lease_holders, node
from tests.fakes.discord_api import DM_CHANNEL_ID, USER_ID, user
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_process import RunningDaemon, reap, stop_daemon
from tests.support.four_bots import FourBots, four_bots, four_bots_yaml
from tests.support.waiting import until

CHAT = 777
"""The Telegram DM written to each bot (a private chat's id is its user's)."""
ALICE = user(USER_ID, "alice")
INPUTS = ("discord:default:0", "guild:default:0", "support:default", "telegram:default")
SPREAD = {
    "discord:default:0": "node-a",
    "support:default": "node-a",
    "guild:default:0": "node-b",
    "telegram:default": "node-b",
}
"""Where the inputs end: node-a hands over first of the kind it holds most of, the last by
name (``botd.cluster.holding.first_to_hand_over``)."""


@pytest.fixture
async def fakes() -> AsyncIterator[FourBots]:
    async with four_bots() as bots:
        yield bots


def four_bots_node(tmp_path: Path, name: str, fakes: FourBots) -> Node:
    """Node ``name`` running the four bots, reaching each Bot API under its own prefix."""
    return node(tmp_path, name, four_bots_yaml(fakes, lambda fake: fake.node_url(name)))


def holders(dsn: str) -> dict[str, str]:
    """Who holds each of the four inputs now."""
    held = lease_holders(dsn, "")
    return {name: held[name] for name in INPUTS if name in held}


def polled_by(fake: FakeTelegramAPI) -> set[str]:
    return {call.via for call in fake.calls_to("getUpdates")}


def conversation_keys(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT DISTINCT conversation_key FROM inbox").fetchall()
    return {str(row[0]) for row in rows}


async def test_four_bots_on_two_nodes_spread_their_inputs_and_keep_one_user_apart(
    tmp_path: Path, postgres_dsn: str, fakes: FourBots
) -> None:
    a, b = (four_bots_node(tmp_path, name, fakes) for name in ("node-a", "node-b"))
    first = await a.start(postgres_dsn)
    second: RunningDaemon | None = None
    try:
        await until(
            lambda: holders(postgres_dsn) == dict.fromkeys(INPUTS, "node-a"),
            "node-a alone holding every input",
        )
        second = await b.start(postgres_dsn)
        await until(
            lambda: holders(postgres_dsn) == SPREAD,
            "one poller and one gateway on each node",
        )
        # The pollers now poll from their own nodes.
        fakes.telegram.calls.clear()
        fakes.support.calls.clear()
        await until(lambda: polled_by(fakes.telegram) and polled_by(fakes.support), "both polling")
        fakes.telegram.push_text(CHAT, "hello first")
        fakes.support.push_text(CHAT, "hello second")
        for fake, text in ((fakes.discord, "ping first"), (fakes.guild, "ping second")):
            dm = fake.message(text, channel_id=DM_CHANNEL_ID, author=ALICE, guild=False)
            await fake.dispatch_message(dm)
        await until(
            lambda: all(
                (
                    fakes.telegram.visible(CHAT),
                    fakes.support.visible(CHAT),
                    fakes.discord.visible(DM_CHANNEL_ID),
                    fakes.guild.visible(DM_CHANNEL_ID),
                )
            ),
            "every bot's answer",
        )
        assert polled_by(fakes.telegram) == {"node-b"}
        assert polled_by(fakes.support) == {"node-a"}
        for process in (first, second):
            assert await stop_daemon(process) == 0
    finally:
        await reap(first)
        if second is not None:
            await reap(second)

    assert fakes.telegram.visible(CHAT) == ["You said: hello first"]
    assert fakes.support.visible(CHAT) == ["You said: hello second"]
    assert fakes.discord.visible(DM_CHANNEL_ID) == ["You said: ping first"]
    assert fakes.guild.visible(DM_CHANNEL_ID) == ["You said: ping second"]
    for fake in (fakes.discord, fakes.guild):
        assert {identify["token"] for identify in fake.identifies} == {fake.token}
    assert conversation_keys(postgres_dsn) == {
        f"telegram:{CHAT}",
        f"support:{CHAT}",
        f"discord:dm:{USER_ID}",
        f"guild:dm:{USER_ID}",
    }
    assert holders(postgres_dsn) == {}  # clean stops give every input up
