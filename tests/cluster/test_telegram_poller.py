"""Telegram long polling on two ``botd run`` nodes sharing one PostgreSQL: one poller per
token, chosen by the lease ``telegram:default``. Each node reaches the loopback Bot API under
its own path prefix, so every ``getUpdates`` is known by the node that sent it.

Paused (SIGSTOP) past the TTL, the poller finds its lease lost when it runs again and asks
Telegram nothing more, while the other node polls on and the saved offset never moves back;
killed, the poller's lease lapses and the first node polls again. Each message is pushed once
the last one was answered, whichever node runs the conversation (its own lease), so each gets
an answer of its own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from tests.cluster.nodes import (
    TELEGRAM_TOKEN,
    Node,
    accepted_message_ids,
    node,
    saved_offset,
    unfinished_entries,
)
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_process import RunningDaemon, ended, reap, stop_daemon
from tests.support.waiting import until

DM = 777
POLLER = "telegram:default poller"


def telegram_node(tmp_path: Path, name: str, telegram: FakeTelegramAPI) -> Node:
    """Node ``name`` polling ``telegram`` under its own path prefix; each message its own run
    and answer (messages that reach the owner together are not collected into one turn)."""
    return node(
        tmp_path,
        name,
        f"""channels:
  telegram:
    token: ${{TELEGRAM_TEST_TOKEN}}
    api_base_url: {json.dumps(telegram.node_url(name))}
    dm_policy: open
    poll_timeout: 1
    command_menu: false
agent:
  queue_mode: followup
""",
    )


def polls(telegram: FakeTelegramAPI, via: str) -> int:
    return sum(1 for call in telegram.calls_to("getUpdates") if call.via == via)


def answers(telegram: FakeTelegramAPI) -> list[str]:
    return [str(c.params["text"]) for c in telegram.calls_to("sendMessage", ok_only=True)]


def pushed(telegram: FakeTelegramAPI, text: str) -> str:
    """Push ``text`` as a DM; its message id."""
    return str(telegram.push_text(DM, text)["message_id"])


def answered(telegram: FakeTelegramAPI, text: str) -> Callable[[], bool]:
    return lambda: f"You said: {text}" in answers(telegram)


async def said(telegram: FakeTelegramAPI, text: str) -> str:
    """Push ``text`` as a DM and wait for its answer (from whichever node runs the
    conversation); its message id. One at a time: messages waiting together are answered in
    one run ("You said: m2\n\nm3")."""
    message_id = pushed(telegram, text)
    await until(answered(telegram, text), f"{text} answered")
    return message_id


@contextlib.asynccontextmanager
async def offsets_watched(dsn: str) -> AsyncIterator[list[int]]:
    """Every distinct value the saved Telegram offset takes while the block runs, in order."""
    seen: list[int] = []

    async def watch() -> None:
        while True:
            value = await asyncio.to_thread(saved_offset, dsn, "telegram", "default")
            if value is not None and (not seen or seen[-1] != value):
                seen.append(value)
            await asyncio.sleep(0.02)  # sampling another process's database: no event to await

    watching = asyncio.create_task(watch())
    try:
        yield seen
    finally:
        watching.cancel()
        await asyncio.wait({watching})


async def test_the_poller_paused_then_killed_hands_polling_over_and_the_offset_never_moves_back(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with (
        FakeTelegramAPI(TELEGRAM_TOKEN) as telegram,
        offsets_watched(postgres_dsn) as offsets,
    ):
        a = telegram_node(tmp_path, "node-a", telegram)
        b = telegram_node(tmp_path, "node-b", telegram)
        first = await a.start(postgres_dsn)
        second: RunningDaemon | None = None
        try:
            await until(lambda: a.logged(f"{POLLER}: holding (epoch 1)"), "node-a polling")
            second = await b.start(postgres_dsn)
            await until(lambda: b.logged(f"{POLLER}: standby (held by node-a)"), "node-b standby")
            ids = [await said(telegram, "m1"), await said(telegram, "m2")]
            await until(lambda: offsets and offsets[-1] == 3, "node-a's offset saved")
            # node-b tries its claim every third of the TTL meanwhile; node-a's one-second
            # polls go on for several TTLs, and only node-a asks Telegram.
            mark = polls(telegram, "node-a")
            await until(lambda: polls(telegram, "node-a") >= mark + 5, "node-a polling on")
            assert polls(telegram, "node-b") == 0

            first.send_signal(signal.SIGSTOP)  # mid long poll: its lease lapses meanwhile
            await until(lambda: b.logged(f"{POLLER}: holding (epoch 2)"), "node-b takes over")
            await until(lambda: polls(telegram, "node-b") >= 1, "node-b polling")
            ids.append(await said(telegram, "m3"))
            await until(lambda: offsets[-1] == 4, "node-b's offset saved")

            asked_by_a = polls(telegram, "node-a")
            first.send_signal(signal.SIGCONT)
            await until(lambda: a.logged(f"{POLLER}: lost (epoch 1)"), "node-a finds it lost")
            await until(lambda: a.logged(f"{POLLER}: standby (held by node-b)"), "node-a standby")
            ids.append(await said(telegram, "m4"))
            await until(lambda: offsets[-1] == 5, "node-b's offset saved")
            # node-a asked Telegram nothing once it ran again: node-b's polls were never cut.
            assert polls(telegram, "node-a") == asked_by_a

            # Killed once m4's answer is recorded as sent: a kill between the send and that
            # record is the Telegram window (no send key), where a resumed answer shows twice.
            async def all_finished() -> bool:
                return await asyncio.to_thread(unfinished_entries, postgres_dsn) == 0

            await until(all_finished, "every entry answered in the database")
            second.kill()  # SIGKILL: its lease is never released, it lapses
            await ended(second)
            ids += [await said(telegram, "m5"), await said(telegram, "m6")]
            assert polls(telegram, "node-a") > asked_by_a
            assert a.logged(f"{POLLER}: holding (epoch 3)")
            assert await stop_daemon(first) == 0
        finally:
            if first.returncode is None:
                first.send_signal(signal.SIGCONT)
            await reap(first)
            if second is not None:
                await reap(second)

    assert offsets == sorted(offsets) and offsets[-1] == 7  # never backwards
    texts = answers(telegram)
    for n in range(1, 7):
        assert texts.count(f"You said: m{n}") == 1, n
    assert sorted(accepted_message_ids(postgres_dsn)) == sorted(ids)  # each accepted once
    # Each standby line once, not at every retry.
    assert b.log.read_text().count(f"{POLLER}: standby (held by node-a)") == 1
    assert a.log.read_text().count(f"{POLLER}: standby (held by node-b)") == 1
