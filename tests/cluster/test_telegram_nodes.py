"""Telegram on several ``botd run`` nodes sharing one PostgreSQL: a node killed mid-answer and
another paused past the lease TTL, and every message still answered once, in order.

Three nodes, the real python-telegram-bot against the loopback Bot API, the fake model: twelve
DMs of three messages each talk at once while a scheduled job fires every few seconds. The
node holding the poller lease (long polling), or a node behind the round-robin proxy (webhook
mode), is SIGKILLed while it streams a long answer; then a node streaming another long answer
is SIGSTOPped until that conversation was taken over, and continued (``tests/cluster/
scenario.py``). What the fakes saw must show: every prompt answered exactly once and in order
per chat, the paused node posting no piece of its old answer once continued, each job fire
answered once, distinct and none missed outside the takeovers, and pieces posted twice only in
the Telegram window (no send key): counted, printed, at most those between written and
confirmed at the faults.

The one-node test is the same harness on a single node: PostgreSQL, behind the proxy in
webhook mode, killed mid-answer and started again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

from tests.cluster.harness import MODEL_KEY, TOKEN, Cluster, Job
from tests.cluster.scenario import (
    EVERY,
    Outcome,
    TelegramChats,
    Users,
    check_outcome,
    finish_with_fires,
    kill_and_pause,
    pending_pieces,
    pieces_posted,
)
from tests.cluster.script import JOB_PROMPT, ModelScript
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.waiting import until

JOB = Job("tick", f"{EVERY:g}s", JOB_PROMPT, "telegram", "5000")


async def three_nodes(tmp_path: Path, dsn: str, mode: Literal["polling", "webhook"]) -> None:
    async with (
        FakeTelegramAPI(TOKEN) as telegram,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        Cluster(tmp_path, dsn, model, telegram=telegram, telegram_mode=mode, jobs=[JOB]) as cluster,
    ):
        script = ModelScript(model)
        chats = TelegramChats(telegram)
        await cluster.start_all()
        outcome = await kill_and_pause(
            cluster,
            chats,
            script,
            JOB,
            dms=12,
            messages=3,
            poller="telegram:" if mode == "polling" else None,
        )
    print(f"telegram: long polls cut off by another one (409): {telegram.conflicts}")
    check_outcome(chats, script, JOB, outcome, window=True)


async def test_three_nodes_long_polling_survive_a_kill_and_a_pause(
    tmp_path: Path, postgres_dsn: str
) -> None:
    await three_nodes(tmp_path, postgres_dsn, "polling")


async def test_three_nodes_behind_a_webhook_proxy_survive_a_kill_and_a_pause(
    tmp_path: Path, postgres_dsn: str
) -> None:
    await three_nodes(tmp_path, postgres_dsn, "webhook")


async def test_one_node_behind_the_webhook_proxy_killed_mid_answer_and_restarted(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with (
        FakeTelegramAPI(TOKEN) as telegram,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        Cluster(
            tmp_path,
            postgres_dsn,
            model,
            telegram=telegram,
            telegram_mode="webhook",
            size=1,
            jobs=[JOB],
        ) as cluster,
    ):
        script = ModelScript(model)
        chats = TelegramChats(telegram)
        [node] = cluster.nodes
        await cluster.start(node)
        await cluster.ready("telegram")
        stretch = script.stretch_next([node.name])
        outcome = Outcome(Users(chats, script, dms=4, messages=2))
        outcome.users.start()
        try:
            await until(lambda: pieces_posted(chats, stretch)() >= 3, "a long answer going")
            killed_at = time.time()
            await cluster.kill(node)
            outcome.in_flight = await pending_pieces(cluster)
            await cluster.start(node)
            await outcome.users.finished()
            outcome.outages.append((killed_at, time.time()))
            await finish_with_fires(cluster, chats, JOB, outcome, outcome.outages[-1][1])
        except BaseException:
            await outcome.users.cancel()
            print(cluster.logs())
            raise

    assert outcome.statuses == {node.name: 0}
    tally = check_outcome(chats, script, JOB, outcome, window=True)
    assert tally.notices == 1  # the resumed answer says once that it was interrupted
    assert cluster.proxy is not None and cluster.proxy.forwards
