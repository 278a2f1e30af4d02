"""Telegram on several ``botd run`` nodes sharing one PostgreSQL: a node killed mid-answer and
another paused past the lease TTL, and every message still answered once, in order.

Three nodes, the real python-telegram-bot against the loopback Bot API, the fake model: many
DMs talk at once while a scheduled job fires every few seconds. The node holding the poller
lease (long polling), or any node behind the round-robin proxy (webhook mode), is SIGKILLed
while it streams a long answer; then a node streaming another long answer is SIGSTOPped until
that conversation was taken over, and continued. What the fakes saw must show: every prompt
answered exactly once and in order per chat, the paused node posting no piece of its old
answer once continued, each job fire distinct and none missed outside the takeovers, and
repeated pieces only within the Telegram window (counted, printed, and at most the pieces that
were between sent and confirmed at the faults).

The one-node test is the same harness on what any build has: one node on PostgreSQL behind
the proxy in webhook mode, killed mid-answer and started again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Literal

from tests.cluster.harness import MODEL_KEY, TOKEN, Cluster, Job, Node
from tests.cluster.script import (
    JOB_ANSWER,
    JOB_PROMPT,
    ModelScript,
    Post,
    Stretch,
    answer,
    check_answers,
    prompt,
)
from tests.conversation.crash import NOTICE, PARAGRAPHS
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.waiting import guarded, until

FIRST_DM = 1001
JOB_CHAT = "5000"
EVERY = 3.0
JOB = Job("tick", f"{EVERY:g}s", JOB_PROMPT, "telegram", JOB_CHAT)


def posts(telegram: FakeTelegramAPI) -> list[Post]:
    """Every message the bot posted (sendMessage answered 200), in the order they came."""
    return [
        Post(str(call.params["chat_id"]), str(call.params["text"]), call.via, index)
        for index, call in enumerate(telegram.calls)
        if call.method == "sendMessage" and call.status == 200
    ]


def shown(telegram: FakeTelegramAPI, chat: str) -> list[str]:
    return [post.text.strip() for post in posts(telegram) if post.chat == chat]


class Users:
    """DMs that each send their prompts one after the other, the next once the last one's
    answer shows (``asked``: the prompts sent, by chat)."""

    def __init__(self, telegram: FakeTelegramAPI, script: ModelScript, dms: int, messages: int):
        self.telegram = telegram
        self.script = script
        self.dms = [FIRST_DM + n for n in range(dms)]
        self.messages = messages
        self.asked: dict[str, list[str]] = {str(dm): [] for dm in self.dms}
        self.tasks: list[asyncio.Task[None]] = []

    def answered(self, chat: str, asked: str) -> bool:
        texts = shown(self.telegram, chat)
        if asked in self.script.long_prompts():
            return PARAGRAPHS[-1] in texts
        return answer(asked) in texts

    async def talk(self, dm: int) -> None:
        for number in range(1, self.messages + 1):
            asked = prompt(dm, number)
            self.asked[str(dm)].append(asked)
            self.telegram.push_text(dm, asked)
            await until(partial(self.answered, str(dm), asked), f"the answer to {asked}")

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self.talk(dm)) for dm in self.dms]

    async def finished(self) -> None:
        await guarded(asyncio.gather(*self.tasks), "every DM answered")

    async def cancel(self) -> None:
        """Stop talking (a failed test): every task ended, its failure retrieved."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def pending_pieces(cluster: Cluster) -> int:
    """Pieces written to the outbox and not yet known sent (the ambiguous window), on every
    node: an upper bound of those a fault can leave unconfirmed."""
    rows = await cluster.query("SELECT count(*) FROM outbox WHERE state = 'pending'")
    return int(str(rows[0][0])) if rows else 0


def pieces_posted(telegram: FakeTelegramAPI, stretch: Stretch) -> Callable[[], int]:
    """How many paragraphs of ``stretch``'s answer its node posted so far."""

    def count() -> int:
        if stretch.prompt is None:
            return 0
        return sum(
            1
            for post in posts(telegram)
            if post.via == stretch.asked_via and post.text.strip() in PARAGRAPHS
        )

    return count


def stretched_chat(stretch: Stretch) -> str:
    assert stretch.prompt is not None
    return stretch.prompt.split()[0].removeprefix("dm")  # dm<chat id> msg<n>


async def job_fires(cluster: Cluster) -> list[float]:
    """When each fire of the job was accepted (the inbox rows of its conversation)."""
    rows = await cluster.query(
        "SELECT accepted_at FROM inbox WHERE conversation_key = %s ORDER BY accepted_at",
        f"cron:{JOB.id}",
    )
    return [float(str(row[0])) for row in rows]


def check_fires(fires: list[float], outages: list[tuple[float, float]]) -> None:
    """Each fire in a slot of its own (two nodes firing one slot would share it), and no
    slot without a fire except while a fault kept the schedule's leader away (those slots
    are coalesced into one fire at the takeover)."""
    assert fires, "the job never fired"
    slots = [round((at - fires[0]) / EVERY) for at in fires]
    assert len(set(slots)) == len(slots), f"a slot fired twice: {slots}"
    for slot in set(range(max(slots) + 1)) - set(slots):
        due = fires[0] + slot * EVERY
        assert any(start - EVERY <= due <= end + EVERY for start, end in outages), (
            f"slot {slot} (due {due:.1f}) never fired; takeovers: {outages}"
        )


async def held_by_live(cluster: Cluster, name: str, *down: Node) -> float:
    """Wait until the lease ``name`` is held by a node not among ``down``; when it was seen."""
    await until(lambda: _held_elsewhere(cluster, name, down), f"{name} held by a node still up")
    return time.time()


async def _held_elsewhere(cluster: Cluster, name: str, down: tuple[Node, ...]) -> bool:
    holder = (await cluster.holders(name)).get(name)
    return holder is not None and holder not in {node.name for node in down}


async def three_nodes_kill_and_pause(
    tmp_path: Path, dsn: str, mode: Literal["polling", "webhook"]
) -> None:
    """The scenario of the module docstring in ``mode``."""
    async with (
        FakeTelegramAPI(TOKEN) as telegram,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        Cluster(tmp_path, dsn, model, telegram=telegram, telegram_mode=mode, jobs=[JOB]) as cluster,
    ):
        script = ModelScript(model)
        await cluster.start_all()
        if mode == "polling":
            doomed = await cluster.lease_holder("telegram:")
        else:
            doomed = cluster.nodes[0]
        killed_answer = script.stretch_next([doomed.name])
        users = Users(telegram, script, dms=12, messages=3)
        users.start()
        outages: list[tuple[float, float]] = []
        try:
            await until(
                lambda: pieces_posted(telegram, killed_answer)() >= 3,
                f"{doomed.name} streaming a long answer",
            )
            killed_at = time.time()
            await cluster.kill(doomed)
            in_flight = await pending_pieces(cluster)
            if mode == "polling":
                await cluster.lease_holder("telegram:", not_on=(doomed,))
            await held_by_live(
                cluster, f"conversation:telegram:{stretched_chat(killed_answer)}", doomed
            )
            outages.append((killed_at, await held_by_live(cluster, "scheduler", doomed)))

            live = [node for node in cluster.nodes if node is not doomed]
            paused_answer = script.stretch_next([node.name for node in live])
            await until(
                lambda: pieces_posted(telegram, paused_answer)() >= 2,
                "another node streaming a long answer",
            )
            sleeper = cluster.node(paused_answer.asked_via)
            cluster.pause(sleeper)
            paused_at = time.time()
            in_flight += await pending_pieces(cluster)
            taken = f"conversation:telegram:{stretched_chat(paused_answer)}"
            await held_by_live(cluster, taken, doomed, sleeper)
            outages.append((paused_at, await held_by_live(cluster, "scheduler", doomed, sleeper)))
            continued_from = len(telegram.calls)
            cluster.resume(sleeper)

            await users.finished()
            # The schedule goes on after the takeovers: two more fires answered.
            after = outages[-1][1]
            await until(
                lambda: _fired_since(cluster, after, 2), "two job fires after the takeovers"
            )
            fires = await job_fires(cluster)
            await until(
                lambda: shown(telegram, JOB_CHAT).count(JOB_ANSWER) >= len(fires),
                "every job fire answered",
            )
            fires = await job_fires(cluster)
            statuses = await cluster.stop_all()
        except BaseException:
            await users.cancel()
            print(cluster.logs())
            raise

    assert all(status == 0 for name, status in statuses.items() if name != doomed.name), statuses
    long_prompts = script.long_prompts()
    tally = check_answers(posts(telegram), users.asked, long_prompts)
    print(
        f"pieces posted twice (the Telegram window): {len(tally.repeats)}; "
        f"pieces in flight at the faults: {in_flight}; job fires: {len(fires)}"
    )
    assert len(tally.repeats) <= in_flight, tally.repeats
    assert tally.notices <= len(long_prompts)
    # Continued after its conversation was taken over, the paused node posted nothing of
    # the old run's answer.
    old = {p.strip() for p in PARAGRAPHS} | {NOTICE}
    late = [
        post
        for post in posts(telegram)
        if post.index >= continued_from and post.via == sleeper.name and post.text.strip() in old
    ]
    assert late == [], late
    # Each fire answered once, each in a slot of its own, none missed but in a takeover.
    assert shown(telegram, JOB_CHAT).count(JOB_ANSWER) == len(fires)
    check_fires(fires, outages)


async def _fired_since(cluster: Cluster, since: float, count: int) -> bool:
    return len([at for at in await job_fires(cluster) if at > since]) >= count


async def test_three_nodes_long_polling_survive_a_kill_and_a_pause(
    tmp_path: Path, postgres_dsn: str
) -> None:
    await three_nodes_kill_and_pause(tmp_path, postgres_dsn, "polling")


async def test_three_nodes_behind_a_webhook_proxy_survive_a_kill_and_a_pause(
    tmp_path: Path, postgres_dsn: str
) -> None:
    await three_nodes_kill_and_pause(tmp_path, postgres_dsn, "webhook")


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
        [node] = cluster.nodes
        await cluster.start(node)
        stretch = script.stretch_next([node.name])
        users = Users(telegram, script, dms=4, messages=2)
        users.start()
        try:
            await until(lambda: pieces_posted(telegram, stretch)() >= 3, "a long answer going")
            killed_at = time.time()
            await cluster.kill(node)
            in_flight = await pending_pieces(cluster)
            await cluster.start(node)
            await users.finished()
            outage = (killed_at, time.time())
            await until(lambda: _fired_since(cluster, outage[1], 2), "two job fires after")
            fires = await job_fires(cluster)
            await until(
                lambda: shown(telegram, JOB_CHAT).count(JOB_ANSWER) >= len(fires),
                "every job fire answered",
            )
            fires = await job_fires(cluster)
            statuses = await cluster.stop_all()
        except BaseException:
            await users.cancel()
            print(cluster.logs())
            raise

    assert statuses == {node.name: 0}
    tally = check_answers(posts(telegram), users.asked, script.long_prompts())
    print(
        f"pieces posted twice (the Telegram window): {len(tally.repeats)}; "
        f"pieces in flight at the kill: {in_flight}; job fires: {len(fires)}"
    )
    assert len(tally.repeats) <= in_flight
    assert tally.notices == 1  # the resumed answer says once that it was interrupted
    assert shown(telegram, JOB_CHAT).count(JOB_ANSWER) == len(fires)
    check_fires(fires, [outage])
