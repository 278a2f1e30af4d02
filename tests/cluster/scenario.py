"""The cluster tests' scenario, on any chat platform: many DMs talking to three nodes while a
job fires, one node SIGKILLed mid-answer, another SIGSTOPped mid-answer until its conversation
was taken over and then continued, and the checks on what the platform showed.

A ``Chats`` is the platform side: how a user in DM ``dm`` says something, and every message the
bot posted (``Post``: chat, text, the node that posted it, its place among the fake's calls).
``kill_and_pause`` runs the scenario on a started ``Cluster`` and returns what the checks need;
``check_outcome`` asserts on it (module docstring of ``test_telegram_nodes``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Protocol

from tests.cluster.harness import Cluster, Job, Node
from tests.cluster.script import (
    JOB_ANSWER,
    ModelScript,
    Post,
    Stretch,
    Tally,
    answer,
    check_answers,
    prompt,
)
from tests.conversation.crash import NOTICE, PARAGRAPHS
from tests.fakes.discord_api import FakeDiscordAPI
from tests.fakes.discord_api import user as discord_user
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.waiting import HANG_GUARD, guarded, until

EVERY = 3.0
"""Seconds between two fires of the job."""


class Chats(Protocol):
    """A platform as the users and the checks see it."""

    channel: str
    """The channel's name in botd's config and conversation keys."""

    async def say(self, dm: int, text: str) -> None: ...

    def chat(self, dm: int) -> str:
        """DM ``dm``'s chat id, as ``Post.chat`` has it."""
        ...

    def conversation(self, dm: int) -> str:
        """DM ``dm``'s conversation key (its lease is ``conversation:<key>``)."""
        ...

    def posts(self) -> list[Post]: ...

    def mark(self) -> int:
        """A place among the fake's calls: posts with a higher ``index`` came later."""
        ...


@dataclass
class TelegramChats:
    telegram: FakeTelegramAPI
    channel: str = "telegram"

    async def say(self, dm: int, text: str) -> None:
        self.telegram.push_text(dm, text)

    def chat(self, dm: int) -> str:
        return str(dm)

    def conversation(self, dm: int) -> str:
        return f"telegram:{dm}"

    def posts(self) -> list[Post]:
        """Every message the bot posted (sendMessage answered 200), in the order they came."""
        return [
            Post(str(call.params["chat_id"]), str(call.params["text"]), call.via, index)
            for index, call in enumerate(self.telegram.calls)
            if call.method == "sendMessage" and call.status == 200
        ]

    def mark(self) -> int:
        return len(self.telegram.calls)


@dataclass
class SlackChats:
    """DM ``dm`` is channel ``D<dm>`` with user ``U<dm>``; events go out by
    ``deliver_event`` (spread over every node's Socket Mode connection, sent again when
    not acknowledged)."""

    slack: FakeSlack
    channel: str = "slack"
    _ts: int = 0

    async def say(self, dm: int, text: str) -> None:
        self._ts += 1
        event = {
            "type": "message",
            "channel": self.chat(dm),
            "channel_type": "im",
            "user": f"U{dm}",
            "text": text,
            "ts": f"1800000000.{self._ts:06d}",
        }
        assert await self.slack.deliver_event(event_callback(event)), f"{text!r} not acked"

    def chat(self, dm: int) -> str:
        return f"D{dm}"

    def conversation(self, dm: int) -> str:
        return f"slack:D{dm}"

    def posts(self) -> list[Post]:
        return [
            Post(str(call.args.get("channel")), str(call.args.get("text")), call.via, index)
            for index, call in enumerate(self.slack.calls)
            if call.method == "chat.postMessage"
        ]

    def mark(self) -> int:
        return len(self.slack.calls)


@dataclass
class ShownSlackChats(SlackChats):
    """``SlackChats`` read from what the chats show now, for answers shown in place
    (``delivery: stream`` or ``edit``: an answer is one message, streamed or edited until
    it is whole): each paragraph of each message is a ``Post``, in the chats' order (its
    ``via`` unknown: '', its ``index`` its message's place in that order, not in time: no
    ``mark`` to compare it with)."""

    def posts(self) -> list[Post]:
        shown = sorted(self.slack.messages.items())  # by (channel, ts): each chat in order
        return [
            Post(chat, paragraph, "", index)
            for index, ((chat, _), text) in enumerate(shown)
            for paragraph in text.split("\n\n")
            if paragraph.strip()
        ]


@dataclass
class ShownTelegramChats(TelegramChats):
    """``TelegramChats`` read from what the chats show now, for answers shown in place (a
    draft, then the answer posted once; an edit preview): each paragraph of each message the
    bot has in a chat is a ``Post``, in the chats' order (its ``via`` unknown: '', its
    ``index`` as ``ShownSlackChats``')."""

    def posts(self) -> list[Post]:
        sent = self.telegram.calls_to("sendMessage", ok_only=True)
        chats = sorted({int(call.params["chat_id"]) for call in sent})
        shown = [(str(chat), text) for chat in chats for text in self.telegram.visible(chat)]
        return [
            Post(chat, paragraph, "", index)
            for index, (chat, text) in enumerate(shown)
            for paragraph in text.split("\n\n")
            if paragraph.strip()
        ]


@dataclass
class DiscordChats:
    """DM ``dm`` is the DM channel ``DM_CHANNEL + dm`` with user ``USER + dm``; a message is
    dispatched on the live gateway session (the one node holding the shard's lease)."""

    discord: FakeDiscordAPI
    channel: str = "discord"

    DM_CHANNEL = 1500000000000000000
    USER = 1400000000000000000

    async def say(self, dm: int, text: str) -> None:
        author = discord_user(self.USER + dm, f"user{dm}")
        await self.discord.dispatch_message(
            self.discord.message(text, channel_id=self.DM_CHANNEL + dm, author=author, guild=False)
        )

    def chat(self, dm: int) -> str:
        return str(self.DM_CHANNEL + dm)

    def conversation(self, dm: int) -> str:
        return f"discord:dm:{self.USER + dm}"

    def posts(self) -> list[Post]:
        """Message POSTs that made a message (a repeated nonce makes none)."""
        repeats = {id(r) for r in self.discord.nonce_repeats}
        return [
            Post(r.path.split("/")[2], str(r.body.get("content")), r.via, index)
            for index, r in enumerate(self.discord.requests)
            if r.method == "POST"
            and r.path.endswith("/messages")
            and isinstance(r.body, dict)
            and id(r) not in repeats
        ]

    def mark(self) -> int:
        return len(self.discord.requests)


def shown(chats: Chats, chat: str) -> list[str]:
    return [post.text.strip() for post in chats.posts() if post.chat == chat]


LONG_DMS = 2001
"""The first of the DMs that each ask one long answer of their own (``Users.ask_long``)."""


class Users:
    """DMs that each send their prompts one after the other, the next once the last one's
    answer shows (``asked``: the prompts sent, by chat): ``messages`` each, or with None
    until ``wind_down``; and DMs that each ask one long answer (``ask_long``), to be cut by
    a fault."""

    def __init__(self, chats: Chats, script: ModelScript, dms: int, messages: int | None) -> None:
        self.chats = chats
        self.script = script
        self.dms = [1001 + n for n in range(dms)]
        self.messages = messages
        self.winding_down = False
        self.asked: dict[str, list[str]] = {chats.chat(dm): [] for dm in self.dms}
        self.tasks: list[asyncio.Task[None]] = []
        self.long_dms: list[int] = []

    async def ask_long(self, *, on: Node | None = None, guard: float = HANG_GUARD) -> Stretch:
        """A long answer streaming on ``on`` (None: on any node), in a DM of its own that
        asks nothing else: a new DM asks for it, and another one again while a different
        node claimed the last one, until ``on`` takes one (failing past ``guard`` seconds).
        Which node wins a claim is not given: the least busy tends to, and a node that has
        just come back may be the busiest (it took the conversations whose messages came
        while it was away), so ``on`` may lose several. The long answers on other nodes run
        to their end meanwhile."""
        deadline, tried = time.monotonic() + guard, 0
        while True:
            tried += 1
            dm = LONG_DMS + len(self.long_dms)
            self.long_dms.append(dm)
            asked = prompt(dm, 1)
            self.asked[self.chats.chat(dm)] = [asked]
            stretch = self.script.stretch_prompt(asked)
            await self.chats.say(dm, asked)
            await until(partial(_asked_via, stretch), f"a node asking for the long answer {asked}")
            if on is None or stretch.asked_via == on.name:
                return stretch
            if time.monotonic() > deadline:
                raise AssertionError(f"{on.name} took none of {tried} long answers in {guard:g} s")

    def answered(self, chat: str, asked: str) -> bool:
        texts = shown(self.chats, chat)
        long_prompts = self.script.long_prompts()
        if asked in long_prompts:  # a chat may get two long answers: this one ends last
            needed = sum(1 for earlier in self.asked[chat] if earlier in long_prompts)
            return texts.count(PARAGRAPHS[-1]) >= needed
        return answer(asked) in texts

    async def talk(self, dm: int) -> None:
        chat = self.chats.chat(dm)
        number = 0
        while not self.winding_down and (self.messages is None or number < self.messages):
            number += 1
            asked = prompt(dm, number)
            self.asked[chat].append(asked)
            await self.chats.say(dm, asked)
            await until(partial(self.answered, chat, asked), f"the answer to {asked}")

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self.talk(dm)) for dm in self.dms]

    def ask_at_most(self, messages: int) -> None:
        """Each DM sends ``messages`` prompts in all, and no more."""
        self.messages = messages

    def wind_down(self) -> None:
        """Ask nothing more: what was asked is still to be answered (``finished``)."""
        self.winding_down = True

    async def finished(self) -> None:
        await guarded(asyncio.gather(*self.tasks), "every DM answered")
        for dm in self.long_dms:
            chat = self.chats.chat(dm)
            await until(partial(_ended, self.chats, chat), f"the long answer in {chat} to its end")

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


def _asked_via(stretch: Stretch) -> str:
    return stretch.asked_via


def _ended(chats: Chats, chat: str) -> bool:
    return PARAGRAPHS[-1] in shown(chats, chat)


def pieces_posted(chats: Chats, stretch: Stretch) -> Callable[[], int]:
    """How many paragraphs of ``stretch``'s answer its node posted so far (in its chat)."""

    def count() -> int:
        if stretch.prompt is None:
            return 0
        chat = chats.chat(stretched_dm(stretch))
        return sum(
            1
            for post in chats.posts()
            if post.chat == chat
            and post.via == stretch.asked_via
            and post.text.strip() in PARAGRAPHS
        )

    return count


def stretched_dm(stretch: Stretch) -> int:
    assert stretch.prompt is not None
    return int(stretch.prompt.split()[0].removeprefix("dm"))  # dm<n> msg<i>


async def job_fires(cluster: Cluster, job: Job) -> list[float]:
    """When each fire of ``job`` was accepted (the inbox rows of its conversation)."""
    rows = await cluster.query(
        "SELECT accepted_at FROM inbox WHERE conversation_key = %s ORDER BY accepted_at",
        f"cron:{job.id}",
    )
    return [float(str(row[0])) for row in rows]


async def fire_states(cluster: Cluster, job: Job) -> list[str]:
    """The state of each fire's inbox row (``answered`` once its run finished)."""
    rows = await cluster.query(
        "SELECT state FROM inbox WHERE conversation_key = %s ORDER BY accepted_at",
        f"cron:{job.id}",
    )
    return [str(row[0]) for row in rows]


async def fires_finished(cluster: Cluster, job: Job) -> bool:
    states = await fire_states(cluster, job)
    return bool(states) and all(s in ("answered", "failed", "skipped") for s in states)


async def next_fire(cluster: Cluster, job: Job) -> float:
    """When ``job`` is due next (a point of its schedule), as the database keeps it."""
    rows = await cluster.query("SELECT next_run_time FROM scheduler_jobs WHERE id = %s", job.id)
    assert rows and rows[0][0], f"job {job.id} has no next run time"
    return datetime.fromisoformat(str(rows[0][0])).timestamp()


def check_fires(fires: list[float], due: float, outages: list[tuple[float, float]]) -> None:
    """Each fire in a slot of its own, and no slot without a fire except around a fault.

    The slots are the stretches of the schedule between two points (``due`` is one): a fire
    on time is a moment after its point, so two fires in one slot mean two nodes fired one
    point. Points missed while a fault kept the schedule's leader away come as one fire at
    the takeover (coalesced, in the slot of that moment), so only those slots may be empty."""
    assert fires, "the job never fired"
    slots = [math.floor((at - due) / EVERY) for at in fires]
    assert len(set(slots)) == len(slots), f"a slot fired twice: {slots}"
    for slot in set(range(min(slots), max(slots) + 1)) - set(slots):
        point = due + slot * EVERY
        assert any(start - EVERY <= point <= end + EVERY for start, end in outages), (
            f"the point {point:.1f} of the schedule never fired; faults: {outages}"
        )


async def held_by_live(cluster: Cluster, name: str, *down: Node) -> float:
    """Wait until the lease ``name`` is held by a node not among ``down``; when it was seen."""
    await until(lambda: _held_elsewhere(cluster, name, down), f"{name} held by a node still up")
    return time.time()


async def _held_elsewhere(cluster: Cluster, name: str, down: tuple[Node, ...]) -> bool:
    holder = (await cluster.holders(name)).get(name)
    return holder is not None and holder not in {node.name for node in down}


async def fired_since(cluster: Cluster, job: Job, since: float, count: int) -> bool:
    return len([at for at in await job_fires(cluster, job) if at > since]) >= count


@dataclass
class Outcome:
    """What a scenario left for the checks."""

    users: Users
    in_flight: int = 0
    """Pieces between written and confirmed right after the faults (all nodes)."""
    outages: list[tuple[float, float]] = field(default_factory=list)
    """(fault, the schedule's lease seen held again) for each fault."""
    fires: list[float] = field(default_factory=list)
    fire_states: list[str] = field(default_factory=list)
    next_fire: float = 0.0
    """A point of the job's schedule (when it was due next at the end)."""
    statuses: dict[str, int] = field(default_factory=dict)
    killed: Node | None = None
    paused: Node | None = None
    continued_from: int = 0
    """``Chats.mark()`` when the paused node was continued."""


async def finish_with_fires(
    cluster: Cluster, chats: Chats, job: Job, outcome: Outcome, since: float
) -> None:
    """Wait for two fires of ``job`` after ``since`` and every fire's answer; then stop
    every node (their statuses and the fires go into ``outcome``)."""
    await until(partial(fired_since, cluster, job, since, 2), "two job fires after the faults")
    await until(partial(fires_finished, cluster, job), "every fire's run finished")
    outcome.fire_states = await fire_states(cluster, job)
    outcome.statuses = await cluster.stop_all()
    # Read after the stop: a fire made meanwhile may have been answered too.
    outcome.fires = await job_fires(cluster, job)
    outcome.next_fire = await next_fire(cluster, job)


async def kill_and_pause(
    cluster: Cluster,
    chats: Chats,
    script: ModelScript,
    job: Job,
    *,
    dms: int,
    messages: int,
    poller: str | None = None,
) -> Outcome:
    """The scenario (module docstring) on a started three-node ``cluster``. ``poller``: the
    lease prefix of a platform connection only one node holds (``telegram:``): that node is
    the one killed, and another one must take the connection over."""
    # Every node up before anyone talks; the node to be killed (the poller's holder, if
    # any) streams a long answer of its own before the users start, so the fault never
    # waits on how the users' conversations happen to spread over the nodes.
    await cluster.ready(chats.channel)
    outcome = Outcome(Users(chats, script, dms, messages))
    try:
        holder = await cluster.lease_holder(poller) if poller else None
        killed_answer = await outcome.users.ask_long(on=holder)
        doomed = outcome.killed = cluster.node(killed_answer.asked_via)
        outcome.users.start()
        await until(
            lambda: pieces_posted(chats, killed_answer)() >= 3,
            f"{doomed.name} streaming a long answer",
        )
        killed_at = time.time()
        await cluster.kill(doomed)
        outcome.in_flight = await pending_pieces(cluster)
        if poller:
            await cluster.lease_holder(poller, not_on=(doomed,))
        conversation = f"conversation:{chats.conversation(stretched_dm(killed_answer))}"
        await held_by_live(cluster, conversation, doomed)
        outcome.outages.append((killed_at, await held_by_live(cluster, "scheduler", doomed)))

        # Another long answer, on whichever node still up claims it: that node is paused.
        paused_answer = await outcome.users.ask_long()
        await until(
            lambda: pieces_posted(chats, paused_answer)() >= 2,
            "another node streaming a long answer",
        )
        sleeper = outcome.paused = cluster.node(paused_answer.asked_via)
        cluster.pause(sleeper)
        paused_at = time.time()
        outcome.in_flight += await pending_pieces(cluster)
        conversation = f"conversation:{chats.conversation(stretched_dm(paused_answer))}"
        await held_by_live(cluster, conversation, doomed, sleeper)
        recovered = await held_by_live(cluster, "scheduler", doomed, sleeper)
        outcome.outages.append((paused_at, recovered))
        outcome.continued_from = chats.mark()
        cluster.resume(sleeper)

        await outcome.users.finished()
        await finish_with_fires(cluster, chats, job, outcome, recovered)
    except BaseException:
        await outcome.users.cancel()
        print(cluster.logs())
        raise
    return outcome


def check_outcome(
    chats: Chats, script: ModelScript, job: Job, outcome: Outcome, *, window: bool
) -> Tally:
    """Every prompt answered once and in order; no piece of the paused node's old answer
    after it was continued; each fire's run answered, the fires distinct, none missed
    outside the takeovers; repeated pieces counted and printed, and allowed (at most the pieces in
    flight at the faults) only where the platform has no send key (``window``). Returns
    the tally of repeats and notices."""
    killed = outcome.killed.name if outcome.killed else ""
    assert all(status == 0 for name, status in outcome.statuses.items() if name != killed), (
        outcome.statuses
    )
    long_prompts = script.long_prompts()
    tally = check_answers(chats.posts(), outcome.users.asked, long_prompts)
    print(
        f"{chats.channel}: pieces posted twice: {len(tally.repeats)}; pieces in flight at "
        f"the faults: {outcome.in_flight}; job fires: {len(outcome.fires)}"
    )
    assert len(tally.repeats) <= (outcome.in_flight if window else 0), tally.repeats
    assert tally.notices <= len(long_prompts)
    if outcome.paused is not None:
        old = {p.strip() for p in PARAGRAPHS} | {NOTICE}
        late = [
            post
            for post in chats.posts()
            if post.index >= outcome.continued_from
            and post.via == outcome.paused.name
            and post.text.strip() in old
        ]
        assert late == [], f"the paused node posted its old answer after the takeover: {late}"
    # Every fire's run answered; two fires close together may share one answer (the second
    # came while the first ran), but no answer shows twice outside the Telegram window.
    assert set(outcome.fire_states) == {"answered"}, outcome.fire_states
    answers = shown(chats, job.chat).count(JOB_ANSWER)
    extra = outcome.in_flight if window else 0
    assert 1 <= answers <= len(outcome.fires) + extra, (answers, outcome.fires)
    check_fires(outcome.fires, outcome.next_fire, outcome.outages)
    return tally
