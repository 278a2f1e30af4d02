"""No node waits on another (issue 35), with three ``botd run`` nodes on Telegram (long
polling) sharing one PostgreSQL, each reaching the database and Telegram through a
``SilentProxy`` of its own.

* One node is cut off from the database (its proxy forwards nothing, sockets kept open):
  while it streams a long answer, right after an accept took its conversation's lock (the
  poller's node), or right after a fence's ``FOR KEY SHARE`` over eight or more conversations.
  The other nodes lose no lease and answer their conversations; the cut-off node's
  conversations are taken over and answered once; forwarding again, the node rejoins (it
  takes a new conversation and answers it) and posts nothing of its old epoch after the
  takeover.
* The poller's link to Telegram is cut: the poller lease moves to another node.
* A busy node is SIGSTOPped at random points, again and again, each time until another
  node took one of its conversations over: the same checks (the users talk until the last
  stop is over).

The faulted node's log stays quiet (``loud_faults``): no traceback, no ERROR but the
database's outage (one line per outage), at most one WARNING naming a conversation per lease
of it the node lost.

What is asserted is what the fakes saw and the nodes' logs say; the bounds are hang guards
of many lease times, and the times the moves took are printed, not asserted.
"""

from __future__ import annotations

import random
import re
import time
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

from botd.inbound.router import STORE_FAILED_NOTICE
from tests.cluster.harness import MODEL_KEY, TOKEN, Cluster, Node
from tests.cluster.scenario import TelegramChats, Users, pieces_posted, stretched_dm
from tests.cluster.script import ModelScript, Post, Stretch, check_answers
from tests.conversation.crash import NOTICE, PARAGRAPHS
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.tcp_proxy import SilentProxy
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.waiting import file_contains, until

TTL = 2.0
POLLER = "telegram:default"
"""The poller lease (``<channel>:<account>``)."""
GUARD = 15 * TTL
"""How long a move may take before the test fails: a hang guard, far past the bound."""
BATCHED = 27
"""DMs asking at once in the cut after ``FOR KEY SHARE``: one node holds nine of them or more
(the first it answers held back, eight to fence together)."""
FENCED = 8
"""Conversations the batch the cut comes after fences, at least (issue 35)."""
ROUNDS = 4
"""Tries at that batch at most, a message of every DM each (``cut_after_a_big_batch``)."""
LOST = re.compile(r"lease \S+ \(epoch \d+\) lost|lost \(epoch \d+[):]")


def leases_lost(node: Node) -> list[str]:
    """The lines of ``node``'s log that say it lost a lease."""
    text = node.log.read_text(errors="replace") if node.log.exists() else ""
    return [line for line in text.splitlines() if LOST.search(line)]


LEVEL = re.compile(r"^\S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
CONVERSATION = re.compile(r"\btelegram:(\d+)\b")
LOST_CONVERSATION = re.compile(r"conversation telegram:(\d+): lease lost \(epoch")
NOT_CONVERSATIONS = {"default", TOKEN.split(":")[0]}
"""What follows ``telegram:`` in a line but names no conversation: the poller's account, and
the bot (its shared budget, ``<channel>:<bot id>``, told unreadable once per outage)."""
OUTAGE = "store degraded:"
"""The one ERROR line a fault of the database is worth, once per outage (``StoreHealth``)."""
REFUSED = ("could not be handled: the store failed", "held back behind one the store could not")
"""A message the store could not take, or one held back behind it to keep the order: its
sender is told (one WARNING line each)."""


def loud_faults(node: Node, outages: int) -> list[str]:
    """What ``node``'s log says louder than issue 35's rule for expected faults: a
    traceback; an ERROR but the database's outage (at most one per outage); more than one
    WARNING naming a conversation per lease of it this node lost (a message the store
    refused is told apart, one line each)."""
    lines = _lines(node)
    loud = [line for line in lines if line.startswith("Traceback")]
    levels = [(match.group(1), line) for line in lines if (match := LEVEL.match(line))]
    errors = [line for level, line in levels if level in ("ERROR", "CRITICAL")]
    loud += [line for line in errors if OUTAGE not in line]
    if len(errors) - len(loud) > outages:
        loud += [f"{len(errors)} outage lines for {outages} outage(s)"]
    lost = Counter(m.group(1) for _, line in levels if (m := LOST_CONVERSATION.search(line)))
    warned: Counter[str] = Counter()
    for level, line in levels:
        if level == "WARNING" and not any(told in line for told in REFUSED):
            warned.update({m.group(1) for m in CONVERSATION.finditer(line)} - NOT_CONVERSATIONS)
    loud += [
        f"telegram:{chat}: {count} WARNING lines for {lost[chat]} lost lease(s)"
        for chat, count in warned.items()
        if count > lost[chat]
    ]
    return loud


def old_epoch_posts(chats: TelegramChats, node: Node, since: int, back: Stretch) -> list[Post]:
    """Pieces of a long answer (or the notice) ``node`` posted after the mark ``since``, but
    those of the long answer ``back`` it was given once it rejoined."""
    old = {p.strip() for p in PARAGRAPHS} | {NOTICE}
    new_chat = chats.chat(stretched_dm(back))
    return [
        post
        for post in chats.posts()
        if post.index >= since
        and post.via == node.name
        and post.text.strip() in old
        and post.chat != new_chat
    ]


async def taken_from(cluster: Cluster, node: Node, name: str) -> bool:
    holder = (await cluster.holders(name)).get(name)
    return holder is not None and holder != node.name


def _asking(model: FakeAnthropicAPI, asked: int) -> dict[str, int] | None:
    """How many model requests each node made, once ``asked`` were made (None before)."""
    if len(model.requests) < asked:
        return None
    return dict(Counter(request.via for request in model.requests))


def fenced_batch(conversations: int, sent: bytes) -> bool:
    """A fence's ``FOR KEY SHARE`` over the leases of at least ``conversations`` conversations
    in ``sent`` (what a node sent in one turn: ``SilentProxy.cut_after``): its text, or a
    batch's ``BEGIN`` with their lease names (the fence check of a connection that has
    prepared it goes as an ``EXECUTE`` of it, without its text)."""
    fence = b"FOR KEY SHARE" in sent or b"BEGIN" in sent
    return fence and len(set(LEASE_NAME.findall(sent))) >= conversations


LEASE_NAME = re.compile(rb"conversation:telegram:\d+")


async def cut_after_a_big_batch(cluster: Cluster, model: FakeAnthropicAPI, users: Users) -> Node:
    """Start ``users`` and cut the node answering most of their DMs (nine at least: 27 over
    three nodes) off from the database right after one of its batches fences ``FENCED`` or
    more conversations: that node.

    The node's store writes one batch at a time, each carrying everything queued while the
    one before it was written, so a batch fences many conversations only if their runs
    queued their writes together: left to themselves, on a loaded machine, they spread over
    small batches. So, each round, every DM's message is held at the model until all are
    asked; then the first answer of that node is let through alone, and its first batch that
    fences a conversation is held at the proxy (the server sees nothing of it); the other
    answers go, each run queues its first write and waits, and once the model has sent them
    all, the held batch is forwarded: the next one carries the rest, eight conversations or
    more, and the cut comes right after its ``FOR KEY SHARE``. The hold stays under the
    node's own bound for an answer (half a TTL), and the writes a run queues after its
    answer came are not observable from outside: on a machine so loaded that some were not
    queued yet, the round is missed and the next one (its messages held at the model before
    this round goes) is another try, ``ROUNDS`` in all. The DMs talk on, a message more,
    once the cut came."""
    dms = len(users.dms)
    gate = model.hold()
    users.start()
    asking = await until(partial(_asking, model, dms), "every DM's first message asked")
    assert asking is not None
    target = cluster.node(max(asking, key=asking.__getitem__))
    proxy = cluster.database_proxy(target)
    proxy.cut_after(partial(fenced_batch, FENCED))
    for round_ in range(1, ROUNDS + 1):
        if round_ > 1:
            await until(partial(_asking, model, round_ * dms), f"every DM's message {round_} asked")
        waiting = _held_for(model, target)
        assert len(waiting) > FENCED, (target.name, len(waiting))
        held = proxy.holds
        proxy.hold(partial(fenced_batch, 1), at_most=TTL / 2)
        model.let_through(waiting[0])
        await until(partial(_held_since, proxy, held), f"a batch of {target.name} held")
        released, gate = gate, model.hold()  # the next round held before this one goes
        released.set()
        await until(
            partial(_answered_or_let_go, model, proxy, waiting),
            f"{target.name}'s answers sent, its batch held",
        )
        proxy.let_go()
        # Cut, or every message of this round answered (the next one asked, and held).
        await until(
            partial(_cut_or_asked, proxy, model, (round_ + 1) * dms),
            f"{target.name} cut off, or round {round_} answered",
        )
        if proxy.silent:
            users.ask_at_most(round_ + 1)
            gate.set()  # what comes now is answered as it is asked
            print(f"after FOR KEY SHARE: {target.name} cut in round {round_}")
            return target
    gate.set()
    raise AssertionError(f"no batch of {target.name} fenced {FENCED} conversations in {ROUNDS}")


def _held_for(model: FakeAnthropicAPI, node: Node) -> list[int]:
    """The requests ``node`` made that the model holds (none answered yet), in order."""
    served = {stream.request_index for stream in model.streams}
    return [
        index
        for index, request in enumerate(model.requests)
        if request.via == node.name and index not in served
    ]


def _held_since(proxy: SilentProxy, holds: int) -> bool:
    """The proxy held a turn more than ``holds`` (or is cut)."""
    return proxy.holds > holds or proxy.silent


def _answered_or_let_go(model: FakeAnthropicAPI, proxy: SilentProxy, requests: list[int]) -> bool:
    """The model sent its whole answer to each of ``requests``, or the proxy's hold ended."""
    ended = {stream.request_index for stream in model.streams if stream.ended.is_set()}
    return not proxy.holding or ended.issuperset(requests)


def _cut_or_asked(proxy: SilentProxy, model: FakeAnthropicAPI, asked: int) -> bool:
    return proxy.silent or len(model.requests) >= asked


@pytest.mark.parametrize("where", ["mid-answer", "after the accept's lock", "after FOR KEY SHARE"])
async def test_a_node_cut_off_from_the_database_holds_up_no_other_node(
    tmp_path: Path, postgres_dsn: str, where: str
) -> None:
    async with (
        FakeTelegramAPI(TOKEN) as telegram,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        Cluster(
            tmp_path,
            postgres_dsn,
            model,
            telegram=telegram,
            lease_ttl=TTL,
            proxied=True,
            max_concurrent_runs=BATCHED,  # every run of a node at the model at once
        ) as cluster,
    ):
        script = ModelScript(model)
        chats = TelegramChats(telegram)
        await cluster.start_all()
        await cluster.ready("telegram")
        users = Users(
            chats,
            script,
            dms=BATCHED if where == "after FOR KEY SHARE" else 9,
            messages=None if where == "after FOR KEY SHARE" else 2,
        )
        try:
            poller = await cluster.lease_holder("telegram:")
            if where == "mid-answer":
                stretch = await users.ask_long()
                target = cluster.node(stretch.asked_via)
                users.start()
                await until(lambda: pieces_posted(chats, stretch)() >= 2, "a long answer going")
                cluster.database_proxy(target).cut()
            elif where == "after the accept's lock":
                target = poller
                cluster.database_proxy(target).cut_after(b"pg_try_advisory_xact_lock")
                users.start()
            else:
                target = await cut_after_a_big_batch(cluster, model, users)
            proxy = cluster.database_proxy(target)
            await until(lambda: proxy.silent, f"{target.name} cut off ({where})")
            cut_at = time.monotonic()
            held_at_cut = {
                name.rsplit(":", 1)[-1]
                for name, holder in (await cluster.holders("conversation:")).items()
                if holder == target.name
            }
            # What the cut-off node held goes to the others: the poller if it had it, and
            # the conversation it was answering (or any of its conversations).
            if target is poller:
                await until(
                    partial(taken_from, cluster, target, POLLER),
                    "the poller lease taken over",
                    guard=GUARD,
                )
            # Its conversations are let go (an idle one is left expired: nobody needs it),
            # and the one it was answering is taken over.
            mine = [
                name
                for name, holder in (await cluster.holders("conversation:")).items()
                if holder == target.name
            ]
            for name in mine:
                await until(
                    partial(_expired_or_taken, cluster, target, name), f"{name} let go", guard=GUARD
                )
            if where == "mid-answer":
                name = f"conversation:{chats.conversation(stretched_dm(stretch))}"
                await until(
                    partial(taken_from, cluster, target, name), f"{name} taken over", guard=GUARD
                )
            moved = time.monotonic() - cut_at
            print(f"{where}: {target.name}'s work taken over {moved:.1f} s after the cut")
            taken_at = chats.mark()
            proxy.mend()
            # Back: it takes a conversation again and answers it (a long answer of its own).
            back = await users.ask_long(on=target)
            await users.finished()
        except BaseException:
            await users.cancel()
            print(cluster.logs())
            raise
        statuses = await cluster.stop_all()
    assert set(statuses.values()) == {0}, statuses
    for node in cluster.nodes:
        if node is not target:
            assert leases_lost(node) == [], (node.name, leases_lost(node))
    assert loud_faults(target, outages=1) == []
    # A message whose accept the cut held up is refused with the notice its sender is
    # promised (docs/operations.md, storage faults) and answered once Telegram hands it over
    # again, to the node that polls then.
    tally = check_answers(
        chats.posts(), users.asked, script.long_prompts(), told=STORE_FAILED_NOTICE
    )
    print(f"{where}: pieces posted twice: {len(tally.repeats)}, store notices: {tally.told}")
    # The Telegram window: a piece sent as the cut came, its sent mark in the transaction
    # the cut ended, is sent again by the next holder: only in the cut-off node's
    # conversations, one piece in each at most (a batch marks several conversations' pieces).
    repeated = [post.chat for post in tally.repeats]
    assert len(set(repeated)) == len(repeated), repeated
    assert set(repeated) <= held_at_cut, (repeated, held_at_cut)
    assert old_epoch_posts(chats, target, taken_at, back) == []


async def test_a_poller_cut_off_from_telegram_gives_the_poller_up(
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
            lease_ttl=TTL,
            proxied=True,
            telegram_poll_timeout=1,
        ) as cluster,
    ):
        script = ModelScript(model)
        chats = TelegramChats(telegram)
        await cluster.start_all()
        await cluster.ready("telegram")
        users = Users(chats, script, dms=6, messages=2)
        try:
            poller = await cluster.lease_holder("telegram:")
            cluster.telegram_proxy(poller).cut()
            cut_at = time.monotonic()
            users.start()
            await until(
                partial(taken_from, cluster, poller, POLLER),
                "the poller lease taken over",
                guard=GUARD + 2 * TTL,
            )
            print(f"the poller moved {time.monotonic() - cut_at:.1f} s after the cut")
            cluster.telegram_proxy(poller).mend()
            await users.finished()
        except BaseException:
            await users.cancel()
            print(cluster.logs())
            raise
        statuses = await cluster.stop_all()
    assert set(statuses.values()) == {0}, statuses
    assert any("giving the lease up" in line for line in _lines(poller))
    assert not any(line.startswith("Traceback") for line in _lines(poller))
    check_answers(chats.posts(), users.asked, script.long_prompts())


async def test_a_poller_whose_first_call_goes_unanswered_gives_the_poller_up(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """The poller's link to Telegram dies between the start and the first poll (PTB's
    ``deleteWebhook``, sent when a node begins to poll): the lease is given up in one line,
    without a traceback, and another node polls."""
    async with (
        FakeTelegramAPI(TOKEN) as telegram,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        Cluster(
            tmp_path, postgres_dsn, model, telegram=telegram, lease_ttl=TTL, proxied=True, size=2
        ) as cluster,
    ):
        script = ModelScript(model)
        chats = TelegramChats(telegram)
        first, second = cluster.nodes
        cluster.telegram_proxy(first).cut_after(b"deleteWebhook")
        await cluster.start(first)
        await until(file_contains(first.log, "giving the lease up"), "n1 giving the poller up")
        await cluster.start(second)
        await until(
            partial(taken_from, cluster, first, POLLER), "the poller lease taken", guard=GUARD
        )
        cluster.telegram_proxy(first).mend()
        users = Users(chats, script, dms=2, messages=1)
        try:
            users.start()
            await users.finished()
        except BaseException:
            await users.cancel()
            print(cluster.logs())
            raise
        statuses = await cluster.stop_all()
    assert set(statuses.values()) == {0}, statuses
    # Given up once, or again if n1 claimed it back before n2 was up (cut all along).
    given_up = [line for line in _lines(first) if "giving the lease up" in line]
    assert given_up
    assert all("Telegram did not answer before the first poll" in line for line in given_up)
    assert loud_faults(first, outages=0) == []
    check_answers(chats.posts(), users.asked, script.long_prompts())


def _lines(node: Node) -> list[str]:
    return node.log.read_text(errors="replace").splitlines()


async def test_a_busy_node_stopped_at_random_points_again_and_again(
    tmp_path: Path, postgres_dsn: str
) -> None:
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    chance = random.Random(seed)
    async with (
        FakeTelegramAPI(TOKEN) as telegram,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        Cluster(tmp_path, postgres_dsn, model, telegram=telegram, lease_ttl=TTL) as cluster,
    ):
        script = ModelScript(model)
        chats = TelegramChats(telegram)
        await cluster.start_all()
        await cluster.ready("telegram")
        # Talking until the last stop is over: a fast machine answers any fixed number of
        # messages before three stops are done.
        users = Users(chats, script, dms=9, messages=None)
        resumed: list[tuple[Node, int]] = []
        try:
            users.start()
            for _ in range(3):
                # A random node, at a random point: after a random number of posts more.
                sleeper = chance.choice(cluster.nodes)
                wanted = chats.mark() + chance.randint(1, 6)
                await until(partial(_past, chats, wanted), "the users' traffic going on")
                held = [
                    name
                    for name, holder in (await cluster.holders("conversation:")).items()
                    if holder == sleeper.name
                ] or ["node:" + sleeper.name]
                cluster.pause(sleeper)
                for name in held[:1]:
                    await until(
                        partial(_expired_or_taken, cluster, sleeper, name),
                        f"{name} past {sleeper.name}'s hold",
                        guard=GUARD,
                    )
                resumed.append((sleeper, chats.mark()))
                cluster.resume(sleeper)
            users.wind_down()
            await users.finished()
        except BaseException:
            await users.cancel()
            print(cluster.logs())
            raise
        statuses = await cluster.stop_all()
    assert set(statuses.values()) == {0}, statuses
    stopped = Counter(node.name for node, _ in resumed)
    for node in cluster.nodes:
        if node.name not in stopped:
            assert leases_lost(node) == [], (node.name, leases_lost(node))
        assert loud_faults(node, outages=stopped[node.name]) == [], node.name
    # A message whose accept a stop cut short is refused with the notice its sender is
    # promised, and answered once Telegram hands it over again (as in the database cuts).
    tally = check_answers(
        chats.posts(), users.asked, script.long_prompts(), told=STORE_FAILED_NOTICE
    )
    print(f"pieces posted twice: {len(tally.repeats)}, store notices: {tally.told}")
    assert len(tally.repeats) <= len(resumed)  # the Telegram window, once per stop at most


def _past(chats: TelegramChats, mark: int) -> bool:
    return chats.mark() >= mark


async def _expired_or_taken(cluster: Cluster, node: Node, name: str) -> bool:
    return (await cluster.holders(name)).get(name) != node.name
