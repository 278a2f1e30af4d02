"""Cost of splitting a long reply under a platform limit: linear in its length?

Splits a 1 MB and a 4 MB markdown reply (prose, lists, many fenced blocks) at Discord's
2000-character and a tight 100-character limit, in all three modes, and prints the time
and the ratio 4 MB / 1 MB (linear cost gives about 4).

Run: make bench   (or .venv/bin/python bench/outbound.py)
"""

from __future__ import annotations

import time

from botd.subscriber import chunk_text

UNIT = (
    "Some prose (with a parenthetical remark) and more words here.\n\n"
    "```python\n" + "def f(x):\n    return x + 1\n" * 6 + "```\n"
    "- item one\n- item two\n\n"
)


def reply(size: int) -> str:
    return (UNIT * (size // len(UNIT) + 1))[:size]


def best_time(text: str, limit: int, **options: object) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        chunk_text(text, limit, **options)  # type: ignore[arg-type]
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    small, large = reply(1_000_000), reply(4_000_000)
    for limit in (2000, 100):
        for label, options in (
            ("markdown", {}),
            ("newline", {"mode": "newline"}),
            ("plain", {"markdown": False}),
        ):
            one = best_time(small, limit, **options)
            four = best_time(large, limit, **options)
            print(
                f"limit {limit:>4} {label:>8}: 1 MB {one:.3f} s, 4 MB {four:.3f} s, "
                f"ratio {four / one:.2f}"
            )


if __name__ == "__main__":
    main()
