"""The Telegram budget at saturation against a fake Bot API that answers 429 past Telegram's
limits (``FakeTelegramAPI.limit_like_telegram``): 30 requests in any second per token, 20
messages in any minute per group, 3 in any 3 seconds per private chat.

Prints, with the real python-telegram-bot and the fake model (which answers at once):

* one node (in process), ``--dms`` DMs writing at once: messages answered per second with
  status reactions on (the default) and off, their ratio (issue 35 asks at least 0.9), the
  429s received and the most requests the fake counted in any one second;
* three nodes (``botd run`` processes on one throwaway PostgreSQL, Telegram's webhook through a
  round-robin proxy: ``tests/cluster/harness.py``), the same load: answered per second, 429s,
  the most requests in any second (at most 30 is the budget held);
* a group that gets ``--group`` messages ``--gap`` seconds apart, with reactions on and off:
  the latest an answer started after its message, each way, and the largest difference
  between the two runs' answers (issue 35 asks within a second).

Run: make bench   (or .venv/bin/python bench/budget.py [--dms N] [--group N] [--gap S]
[--no-cluster]). A machine without PostgreSQL skips the three nodes and says so.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.cluster.harness import MODEL_KEY, TOKEN, Cluster
from tests.cluster.script import ModelScript, ask_every_dm, every_dm_answered, prompt
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.telegram_api import Call, FakeTelegramAPI, user
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)
from tests.support.pg_server import postgres_bin_dir, running_postgres
from tests.support.waiting import until

FIRST_DM = 5000
GROUP = -100900
GUARD = 600.0


def busiest_second(calls: Sequence[Call]) -> int:
    """The most calls (``getUpdates`` left out) in any one second."""
    times = sorted(c.at for c in calls if c.method != "getUpdates" and c.status != 429)
    most, start = 0, 0
    for end, at in enumerate(times):
        while times[start] <= at - 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


def first_answer_at(telegram: FakeTelegramAPI, chat: int) -> float:
    for call in telegram.calls_to("sendMessage", ok_only=True):
        if call.params.get("chat_id") in (chat, str(chat)):
            return call.at
    raise AssertionError(f"no answer in {chat}")


async def one_node(dms: int, reactions: bool) -> tuple[float, int, int]:
    """(answered per second, 429s, busiest second) of one node with ``dms`` DMs at once."""
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key=MODEL_KEY) as model:
        ModelScript(model)
        options = ["dm_policy: open", *([] if reactions else ["reactions: false"])]
        with tempfile.TemporaryDirectory() as tmp:
            config = config_yaml(
                Path(tmp),
                anthropic_yaml(model, api_key=MODEL_KEY),
                telegram_yaml(telegram, *options),
            )
            async with daemon_running(config):
                telegram.limit_like_telegram()
                started = time.monotonic()
                ask_every_dm(telegram, FIRST_DM, dms)
                answered = partial(every_dm_answered, telegram, FIRST_DM, dms)
                await until(answered, "every DM answered", GUARD)
                took = time.monotonic() - started
        return dms / took, len(telegram.rate_limited), busiest_second(telegram.calls)


async def group_starts(messages: int, gap: float, reactions: bool) -> list[float]:
    """Seconds from each group message to its answer's first message."""
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key=MODEL_KEY) as model:
        ModelScript(model)
        group = ["groups:", f'  "{GROUP}": {{require_mention: false}}']
        options = [*group, *([] if reactions else ["reactions: false"])]
        with tempfile.TemporaryDirectory() as tmp:
            config = config_yaml(
                Path(tmp),
                anthropic_yaml(model, api_key=MODEL_KEY),
                telegram_yaml(telegram, *options),
            )
            async with daemon_running(config):
                telegram.limit_like_telegram()
                pushed: list[float] = []
                for n in range(messages):
                    pushed.append(time.monotonic())
                    telegram.push_text(GROUP, prompt(0, n), sender=user(600 + n))
                    await asyncio.sleep(gap)  # the load's own pace: a bench, not a test
                await until(lambda: len(telegram.visible(GROUP)) >= messages, "every answer", GUARD)
        answers = [c.at for c in telegram.calls_to("sendMessage", ok_only=True)]
        return [at - sent for at, sent in zip(answers, pushed, strict=False)]


async def three_nodes(dms: int) -> tuple[float, int, int]:
    """(answered per second, 429s, busiest second) of three nodes with ``dms`` DMs at once."""
    with running_postgres() as server, tempfile.TemporaryDirectory() as tmp:
        async with (
            FakeTelegramAPI(TOKEN) as telegram,
            FakeAnthropicAPI(api_key=MODEL_KEY) as model,
            Cluster(
                Path(tmp), server.new_database(), model, telegram=telegram, telegram_mode="webhook"
            ) as nodes,
        ):
            ModelScript(model)
            await nodes.start_all()
            await nodes.ready("telegram")
            telegram.limit_like_telegram()
            started = time.monotonic()
            ask_every_dm(telegram, FIRST_DM, dms)
            answered = partial(every_dm_answered, telegram, FIRST_DM, dms)
            await until(answered, "every DM answered", GUARD)
            took = time.monotonic() - started
            await nodes.stop_all()
        return dms / took, len(telegram.rate_limited), busiest_second(telegram.calls)


def no_postgres() -> str | None:
    """Why the three nodes cannot run here (None: they can)."""
    try:
        postgres_bin_dir()
    except RuntimeError as exc:
        return str(exc)
    return None


async def main(args: argparse.Namespace) -> None:
    on = await one_node(args.dms, reactions=True)
    off = await one_node(args.dms, reactions=False)
    print(f"budget, one node, {args.dms} DMs at once, against Telegram's limits:")
    print(f"  reactions on:  {on[0]:6.1f} answered/s, {on[1]} x 429, busiest second {on[2]}")
    print(f"  reactions off: {off[0]:6.1f} answered/s, {off[1]} x 429, busiest second {off[2]}")
    print(f"  reactions ratio (on / off): {on[0] / off[0]:.2f}  (issue 35: at least 0.9)")
    if args.no_cluster:
        print("budget, three nodes: skipped (--no-cluster)")
    elif (missing := no_postgres()) is not None:
        print(f"budget, three nodes: skipped ({missing})")
    else:
        rate, refused, busiest = await three_nodes(args.dms)
        print(f"budget, three nodes, {args.dms} DMs at once, one token:")
        print(f"  {rate:6.1f} answered/s, {refused} x 429, busiest second {busiest} (limit 30)")
    with_r = await group_starts(args.group, args.gap, reactions=True)
    without = await group_starts(args.group, args.gap, reactions=False)
    worst = max(abs(a - b) for a, b in zip(with_r, without, strict=False))
    print(f"budget, a group of {args.group} messages {args.gap:g} s apart:")
    print(
        f"  latest answer start: {max(with_r):.2f} s with reactions, {max(without):.2f} s without"
    )
    print(f"  largest difference per answer: {worst:.2f} s  (issue 35: within 1 s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dms", type=int, default=150)
    parser.add_argument("--group", type=int, default=16)
    parser.add_argument("--gap", type=float, default=3.0)
    parser.add_argument("--no-cluster", action="store_true")
    asyncio.run(main(parser.parse_args()))
