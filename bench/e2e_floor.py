"""The SDK floor for ``bench/e2e.py``: a minimal bot doing only what the SDKs must per message.

It long-polls with python-telegram-bot's ``Bot.get_updates`` (timeout 30, as botd polls) and,
for each text message, makes one streamed request with the anthropic SDK and posts the
streamed text with one ``Bot.send_message``. Nothing else: no store, no router, no agent loop.

The request body for each message is the one botd sent for the same message (the model, the
system prompt, the tools, the whole history), read from ``--bodies`` (a JSON object from the
message's key, its first word, to the body; the file holds the bodies of botd's last window
and is read again on SIGHUP, which the bench sends before each of the floor's windows, so
the reading is not measured), so the prompt size is
botd's exactly. Messages of
one chat are answered in order, and at most ``--concurrency`` at once, as botd's run cap does.

With ``--rate-limiter`` its bot is python-telegram-bot's ``ExtBot`` with
``AIORateLimiter(max_retries=0)``, as botd builds its own (the limiter holds every bot to
Telegram's 30 requests per second), so latencies compare with the same limit on both sides.

It runs until SIGTERM.

Run by bench/e2e.py:
    python bench/e2e_floor.py --telegram URL --token T --anthropic URL --api-key K --bodies F
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import signal
from pathlib import Path
from typing import Any

import anthropic
from telegram import Bot, Update
from telegram.ext import AIORateLimiter, ExtBot

_SDK_ARGS = ("model", "max_tokens", "messages", "system", "tools")


async def answer(
    update: Update,
    bot: Bot,
    client: anthropic.AsyncAnthropic,
    bodies: dict[str, dict[str, Any]],
    chat_locks: dict[int, asyncio.Lock],
    cap: asyncio.Semaphore,
) -> None:
    message = update.message
    if message is None or message.text is None:
        return
    body = bodies[message.text.split()[0]]
    arguments = {k: body[k] for k in _SDK_ARGS if k in body}
    extra = {k: v for k, v in body.items() if k not in _SDK_ARGS and k != "stream"}
    lock = chat_locks.setdefault(message.chat_id, asyncio.Lock())
    async with lock, cap:
        async with client.messages.stream(**arguments, extra_body=extra or None) as stream:
            parts = [event.text async for event in stream if event.type == "text"]
        await bot.send_message(message.chat_id, "".join(parts))


async def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--telegram", "--token", "--anthropic", "--api-key", "--bodies"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rate-limiter", action="store_true")
    args = parser.parse_args()
    bodies: dict[str, dict[str, Any]] = {}
    loads = itertools.count(1)

    def load_bodies() -> None:
        bodies.clear()
        bodies.update(json.loads(Path(args.bodies).read_text()))
        print(f"bodies load {next(loads)}: {len(bodies)}", flush=True)

    load_bodies()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGHUP, load_bodies)
    client = anthropic.AsyncAnthropic(api_key=args.api_key, base_url=args.anthropic, max_retries=0)
    bot = Bot(args.token, base_url=f"{args.telegram}/bot")
    if args.rate_limiter:
        limiter = AIORateLimiter(max_retries=0)
        bot = ExtBot(args.token, base_url=f"{args.telegram}/bot", rate_limiter=limiter)
    chat_locks: dict[int, asyncio.Lock] = {}
    cap = asyncio.Semaphore(args.concurrency)
    tasks: set[asyncio.Task[None]] = set()
    async with bot:
        offset = 0
        while not stop.is_set():
            poll = asyncio.ensure_future(
                bot.get_updates(offset=offset, timeout=30, allowed_updates=["message"])
            )
            halt = asyncio.ensure_future(stop.wait())
            await asyncio.wait({poll, halt}, return_when=asyncio.FIRST_COMPLETED)
            if not poll.done():
                poll.cancel()
                break
            halt.cancel()
            for update in poll.result():
                offset = update.update_id + 1
                task = asyncio.ensure_future(answer(update, bot, client, bodies, chat_locks, cap))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())
