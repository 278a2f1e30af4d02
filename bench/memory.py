"""What memory costs a turn, on a real SQLite store: each turn's note (``Memory.note``: read
the person's whole memory, rank it by shared words, pick what fits) over a full memory
(``agent.memory.max_items`` items of ``max_chars`` characters, the defaults 50 x 500), among
``--people`` people's memories in the table; and a ``remember`` (the count check and the
insert, one statement, awaited through the group commit).

Prints the p50 and p99 of each, in milliseconds. A turn's run waits for its note before the
model is asked, so the note is added to a turn's latency: about a millisecond (p50) on a
shared 2-core machine, beside a model's hundreds.

Run: make bench   (or .venv/bin/python bench/memory.py [--people N] [--turns N])
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from botd.chat import InboundMessage
from botd.config.schema import MemorySection
from botd.memory import Memory
from botd.store.records import MemoryOwner
from botd.store.sqlite import SqliteStore

WORDS = (
    "tea coffee cat dog Lyon Paris nurse teacher garden bike piano Friday Monday sister "
    "brother allergy peanuts vegan running chess football birthday March July project "
    "deadline report meeting holiday Spain Japan sushi pasta"
).split()


def _fact(rng: random.Random, size: int) -> str:
    words: list[str] = []
    while sum(len(word) + 1 for word in words) < size:
        words.append(rng.choice(WORDS))
    return " ".join(words)[:size]


def _ms(samples: list[float]) -> str:
    cuts = statistics.quantiles(samples, n=100)
    return f"p50 {cuts[49] * 1000:.3f} ms, p99 {cuts[98] * 1000:.3f} ms"


async def _bench(people: int, turns: int) -> None:
    settings = MemorySection()
    rng = random.Random(38)
    with tempfile.TemporaryDirectory() as tmp, SqliteStore.open(Path(tmp)) as store:
        memory = Memory(store, lambda: settings)
        for person in range(people):
            owner = MemoryOwner("telegram", "user", str(person))
            for _ in range(settings.max_items):
                kept = await store.remember(
                    owner, str(person), _fact(rng, settings.max_chars), max_items=10**6
                )
                assert kept is not None
        notes: list[float] = []
        for turn in range(turns):
            who = str(rng.randrange(people))
            message = InboundMessage(
                channel="telegram",
                chat_id=who,
                sender_id=who,
                text=_fact(rng, 200),
                message_id=str(turn),
                conversation_key=f"telegram:{who}",
                is_direct=True,
            )
            began = time.perf_counter()
            note = await memory.note(message, message.text)
            notes.append(time.perf_counter() - began)
            assert note
        writes: list[float] = []
        for n in range(turns):
            owner = MemoryOwner("telegram", "user", f"new{n % 50}")
            began = time.perf_counter()
            await store.remember(owner, owner.id, _fact(rng, 100), max_items=settings.max_items)
            writes.append(time.perf_counter() - began)
    print(f"memory: {people} people x {settings.max_items} items of {settings.max_chars} chars")
    print(f"  a turn's note over a full memory: {_ms(notes)}")
    print(f"  a remember (count check + insert, committed): {_ms(writes)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(_bench(args.people, args.turns))


if __name__ == "__main__":
    main()
