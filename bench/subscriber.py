"""Streaming throughput of the subscriber: is the cost per delta independent of length?

Streams a 1 MB and a 2 MB markdown reply (paragraphs, lists, fenced code) as 4-character
``text_delta`` events, with block chunking and partial replies on, the way the daemon runs
a long answer. Prints deltas per second for each and the time ratio 2 MB / 1 MB: linear
cost gives a ratio near 2.0; the issue requires >= 100,000 deltas/s and a ratio <= 2.2.

The partial-reply consumer reads ``delta`` for every partial, as an edit-mode preview does
(a chat message holds a few thousand characters, so a preview never needs the whole text),
and reads the full ``text`` of the last partial once, at the end.

Run: make bench   (or .venv/bin/python bench/subscriber.py)
"""

from __future__ import annotations

import gc
import random
import time

from botd.events import AssistantStreamEvent, Message, MessageEnd, MessageStart, MessageUpdate
from botd.events import TextContent as Text
from botd.subscriber import BlockReply, PartialReply, StreamSubscriber, SubscriberConfig

DELTA_CHARS = 4
WORDS = (
    "the agent streams a reply into chat blocks while tools run and the subscriber keeps "
    "every block once in order within the platform limits of slack discord and telegram"
).split(" ")


def markdown(size: int, seed: int) -> str:
    """A markdown reply of about ``size`` characters: paragraphs, lists and code."""
    rng = random.Random(seed)
    parts: list[str] = []
    total = 0
    while total < size:
        kind = rng.random()
        if kind < 0.55:
            sentences = [
                " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))).capitalize() + "."
                for _ in range(rng.randint(2, 6))
            ]
            part = " ".join(sentences)
        elif kind < 0.8:
            part = "\n".join(
                f"- {' '.join(rng.choice(WORDS) for _ in range(rng.randint(3, 10)))}"
                for _ in range(rng.randint(2, 7))
            )
        else:
            lines = [
                f"    value_{i} = compute({rng.randint(0, 999)})  # {rng.choice(WORDS)}"
                for i in range(rng.randint(3, 25))
            ]
            part = "```python\ndef step():\n" + "\n".join(lines) + "\n```"
        parts.append(part)
        total += len(part) + 2
    return "\n\n".join(parts)[:size]


def run(text: str) -> tuple[float, int, int, int]:
    """Seconds spent streaming ``text``, deltas fed, blocks emitted, partials emitted."""
    blocks: list[BlockReply] = []
    partial_count = 0
    preview_chars = 0
    last: list[PartialReply] = []

    def on_partial(partial: PartialReply) -> None:
        nonlocal partial_count, preview_chars
        partial_count += 1
        preview_chars += len(partial.delta)
        if not last:
            last.append(partial)
        else:
            last[0] = partial

    sub = StreamSubscriber(
        SubscriberConfig(),  # text_end breaks, chunking 800..1200 by paragraph
        on_block_reply=blocks.append,
        on_partial_reply=on_partial,
    )
    assistant = Message(role="assistant")
    updates = [
        MessageUpdate(
            message=assistant,
            assistant_event=AssistantStreamEvent(
                type="text_delta", delta=text[i : i + DELTA_CHARS]
            ),
        )
        for i in range(0, len(text), DELTA_CHARS)
    ]
    end = MessageUpdate(message=assistant, assistant_event=AssistantStreamEvent(type="text_end"))
    gc.collect()
    started = time.perf_counter()
    sub.handle(MessageStart(message=assistant))
    for update in updates:
        sub.handle(update)
    sub.handle(end)
    sub.handle(MessageEnd(message=Message(role="assistant", content=[Text(text=text)])))
    full_text = last[0].text if last else ""
    elapsed = time.perf_counter() - started
    if full_text != text.strip() or preview_chars != len(full_text):
        raise SystemExit("partial replies did not add up to the streamed text")
    streamed = sum(len(b.text) for b in blocks)
    if streamed < len(text) * 0.9:
        raise SystemExit(f"only {streamed} of {len(text)} characters came out as blocks")
    return elapsed, len(updates), len(blocks), partial_count


def main() -> None:
    one = markdown(1_000_000, seed=1)
    two = markdown(2_000_000, seed=2)
    run(markdown(50_000, seed=3))  # warm-up
    results = {}
    for label, text in (("1 MB", one), ("2 MB", two)):
        best = min(run(text) for _ in range(3))
        elapsed, deltas, blocks, partials = best
        results[label] = elapsed
        print(
            f"{label}: {deltas:,} deltas in {elapsed:.3f} s = {deltas / elapsed:,.0f} deltas/s "
            f"({blocks:,} blocks, {partials:,} partial replies)"
        )
    print(f"time ratio 2 MB / 1 MB: {results['2 MB'] / results['1 MB']:.2f}")


if __name__ == "__main__":
    main()
