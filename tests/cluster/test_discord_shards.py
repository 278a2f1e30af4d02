"""Discord's gateway shards on two ``botd run`` nodes sharing one PostgreSQL: each shard's
session is held by one node at a time under the lease ``discord:default:<shard>``, every node
sends over REST, the shards spread over the nodes up (a node that held both hands one to
a node that joins), and the shards of a killed node move to the other within about the TTL.

The loopback gateway routes as Discord does: the guild (shard 1 of 2) to its shard, DMs to
shard 0; ``sessions_open`` counts the sessions identified on each shard."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from urllib.parse import urlsplit

from tests.cluster.nodes import Node, lease_holders, node
from tests.fakes.discord_api import CHANNEL_ID, DM_CHANNEL_ID, FakeDiscordAPI
from tests.fakes.tcp_proxy import SilentProxy
from tests.support.daemon_process import RunningDaemon, ended, reap, stop_daemon
from tests.support.waiting import until

SHARDS = {"discord:default:0", "discord:default:1"}


def discord_node(
    tmp_path: Path, name: str, discord: FakeDiscordAPI, *, gateway_url: str | None = None
) -> Node:
    """A node on ``discord`` with two shards, reaching its gateway at ``gateway_url``
    (default: the fake's own)."""
    return node(
        tmp_path,
        name,
        f"""channels:
  discord:
    token: fake-discord-token
    api_base_url: {json.dumps(discord.base_url)}
    gateway_url: {json.dumps(gateway_url or discord.gateway_url)}
    guild_ready_timeout: 0.05
    shard_count: 2
    dm_policy: open
    group_policy: open
    require_mention: false
    command_menu: false
""",
    )


async def say(discord: FakeDiscordAPI, text: str, *, dm: bool) -> None:
    """``text`` in the DM (shard 0) or the guild's channel (shard 1)."""
    channel = DM_CHANNEL_ID if dm else CHANNEL_ID
    await discord.dispatch_message(discord.message(text, channel_id=channel, guild=not dm))


def answers(discord: FakeDiscordAPI) -> list[str]:
    """What the bot posted, each answer reduced to what it echoed (the scripted model names
    the sender of a guild message: "You said: [alice (id ...)] text")."""
    return [
        text.rsplit("] ", 1)[-1].removeprefix("You said: ")
        for _c, text in discord.messages.values()
    ]


async def holding_both_shards(dsn: str, discord: FakeDiscordAPI, node: str) -> None:
    """Wait until ``node`` holds both shards' leases with one gateway session open each."""
    await until(
        lambda: (
            lease_holders(dsn, "discord:") == dict.fromkeys(SHARDS, node)
            and discord.sessions_open() == {0: 1, 1: 1}
        ),
        f"{node} holding both shards",
    )


async def test_each_shard_is_held_by_one_node_and_moves_when_its_node_is_killed(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with FakeDiscordAPI() as discord:
        a = discord_node(tmp_path, "node-a", discord)
        b = discord_node(tmp_path, "node-b", discord)
        first = await a.start(postgres_dsn)
        second: RunningDaemon | None = None
        try:
            await holding_both_shards(postgres_dsn, discord, "node-a")
            second = await b.start(postgres_dsn)
            standby = [f"discord:default:{n} gateway: standby (held by node-a)" for n in (0, 1)]
            await until(lambda: all(map(b.logged, standby)), "node-b standby on both shards")
            # node-a holds more than its share of the two shards now: it hands one over.
            await until(
                lambda: (
                    lease_holders(postgres_dsn, "discord:")
                    == {"discord:default:0": "node-a", "discord:default:1": "node-b"}
                    and discord.sessions_open() == {0: 1, 1: 1}
                ),
                "the shards spread over the two nodes",
            )
            assert a.logged("discord:default:1 gateway: handed over to spread the inputs")
            await say(discord, "dm one", dm=True)
            await say(discord, "guild one", dm=False)
            await until(
                lambda: {"dm one", "guild one"} <= set(answers(discord)),
                "both answered",
            )
            # One session per shard at a time: shard 1 identified again on node-b.
            assert discord.sessions_open() == {0: 1, 1: 1}
            shards = sorted(tuple(i["shard"]) for i in discord.identifies)
            assert shards == [(0, 2), (1, 2), (1, 2)]

            first.kill()  # its sessions drop with it; its leases lapse
            await ended(first)
            await holding_both_shards(postgres_dsn, discord, "node-b")
            await say(discord, "dm two", dm=True)
            await say(discord, "guild two", dm=False)
            await until(
                lambda: {"dm two", "guild two"} <= set(answers(discord)),
                "both answered by node-b",
            )
            assert await stop_daemon(second) == 0
            # A clean stop closes the shards' sessions and gives their leases up at once.
            assert lease_holders(postgres_dsn, "discord:") == {}
        finally:
            await reap(first)
            if second is not None:
                await reap(second)

    texts = answers(discord)
    for said in ("dm one", "guild one", "dm two", "guild two"):
        assert texts.count(said) == 1, said
    assert sorted(tuple(i["shard"]) for i in discord.identifies) == [(0, 2), (0, 2), (1, 2), (1, 2)]


async def test_a_node_paused_past_its_leases_closes_its_shards_sessions_when_it_runs_again(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with FakeDiscordAPI() as discord:
        a = discord_node(tmp_path, "node-a", discord)
        b = discord_node(tmp_path, "node-b", discord)
        first = await a.start(postgres_dsn)
        second: RunningDaemon | None = None
        try:
            await holding_both_shards(postgres_dsn, discord, "node-a")
            second = await b.start(postgres_dsn)
            first.send_signal(signal.SIGSTOP)  # its sockets stay open, its leases lapse
            await until(
                lambda: (
                    lease_holders(postgres_dsn, "discord:") == dict.fromkeys(SHARDS, "node-b")
                    and discord.sessions_open() == {0: 2, 1: 2}
                ),
                "node-b connected both shards beside node-a's stale sessions",
            )
            first.send_signal(signal.SIGCONT)
            await until(lambda: discord.sessions_open() == {0: 1, 1: 1}, "node-a's sessions closed")
            lost = [f"discord:default:{n} gateway: lost (epoch 1)" for n in (0, 1)]
            await until(lambda: all(map(a.logged, lost)), "node-a saying so")
            await say(discord, "dm", dm=True)
            await say(discord, "guild", dm=False)
            await until(lambda: {"dm", "guild"} <= set(answers(discord)), "both answered")
            for process in (first, second):
                assert await stop_daemon(process) == 0
        finally:
            if first.returncode is None:
                first.send_signal(signal.SIGCONT)
            await reap(first)
            if second is not None:
                await reap(second)

    assert sorted(answers(discord)) == ["dm", "guild"]
    assert lease_holders(postgres_dsn, "discord:") == {}


async def test_a_node_taking_over_the_shards_answers_what_was_sent_while_none_held_them(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """Issue 35: Discord does not redeliver what was sent while no session was open; the node
    that takes the shards over reads each shard's chats from their marks (shared in the
    database) and answers what was missed, once each."""
    async with FakeDiscordAPI() as discord:
        a = discord_node(tmp_path, "node-a", discord)
        b = discord_node(tmp_path, "node-b", discord)
        first = await a.start(postgres_dsn)
        second: RunningDaemon | None = None
        try:
            await holding_both_shards(postgres_dsn, discord, "node-a")
            await say(discord, "dm one", dm=True)
            await say(discord, "guild one", dm=False)
            await until(lambda: {"dm one", "guild one"} <= set(answers(discord)), "answered")
            first.kill()
            await ended(first)
            # Nobody holds the shards: these are posted and never dispatched.
            discord.message("dm missed", channel_id=DM_CHANNEL_ID, guild=False)
            discord.message("guild missed", channel_id=CHANNEL_ID)
            second = await b.start(postgres_dsn)
            await holding_both_shards(postgres_dsn, discord, "node-b")
            await until(
                lambda: {"dm missed", "guild missed"} <= set(answers(discord)),
                "the missed messages answered by node-b",
            )
            assert await stop_daemon(second) == 0
        finally:
            await reap(first)
            if second is not None:
                await reap(second)

    texts = answers(discord)
    for said in ("dm one", "guild one", "dm missed", "guild missed"):
        assert texts.count(said) == 1, said
    reads = {channel for channel, _query in discord.history_reads}
    assert reads == {str(DM_CHANNEL_ID), str(CHANNEL_ID)}


async def test_a_node_that_cannot_reach_the_gateway_gives_its_shards_up(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """Issue 35: a node whose gateway sessions end and cannot be made again (Discord
    unreachable from it alone) gives each shard's lease up after ``UNREACHABLE_TTLS`` lease
    TTLs, and the node that reaches Discord takes the shards over and answers."""
    async with (
        FakeDiscordAPI() as discord,
        SilentProxy("127.0.0.1", urlsplit(discord.gateway_url).port or 0) as gateway,
    ):
        a = discord_node(
            tmp_path, "node-a", discord, gateway_url=f"ws://127.0.0.1:{gateway.port}/gateway/"
        )
        b = discord_node(tmp_path, "node-b", discord)
        first = await a.start(postgres_dsn)
        second: RunningDaemon | None = None
        try:
            await holding_both_shards(postgres_dsn, discord, "node-a")
            second = await b.start(postgres_dsn)
            standby = [f"discord:default:{n} gateway: standby (held by node-a)" for n in (0, 1)]
            await until(lambda: all(map(b.logged, standby)), "node-b standby on both shards")
            gateway.refuse()  # node-a's sessions end, and none can be made again
            await holding_both_shards(postgres_dsn, discord, "node-b")
            # Shard 1 may have been handed over to node-b to spread the shards first.
            given_up = [
                (
                    f"discord:default:{n} gateway: giving the lease up",
                    f"discord:default:{n} gateway: handed over",
                )
                for n in (0, 1)
            ]
            await until(
                lambda: a.logged(given_up[0][0]) and any(map(a.logged, given_up[1])),
                "node-a saying why",
            )
            await say(discord, "dm", dm=True)
            await say(discord, "guild", dm=False)
            await until(lambda: {"dm", "guild"} <= set(answers(discord)), "both answered")
            gateway.mend()
            for process in (first, second):
                assert await stop_daemon(process) == 0
        finally:
            await reap(first)
            if second is not None:
                await reap(second)

    assert sorted(answers(discord)) == ["dm", "guild"]
    assert not a.logged("Traceback")
