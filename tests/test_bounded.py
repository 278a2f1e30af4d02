"""``Recent``: the newest entries kept, the oldest forgotten beyond its size."""

from __future__ import annotations

from botd.bounded import Recent


def test_remember_forgets_the_oldest_beyond_the_size() -> None:
    recent: Recent[str, int] = Recent(2)
    recent.remember("a", 1)
    recent.remember("b", 2)
    recent.remember("a", 3)  # again: now the newest
    recent.remember("c", 4)
    assert list(recent.items()) == [("a", 3), ("c", 4)]


def test_touch_keeps_an_entry_from_being_forgotten() -> None:
    recent: Recent[str, None] = Recent(2)
    recent.remember("a", None)
    recent.remember("b", None)
    recent.touch("a")
    recent.remember("c", None)
    assert list(recent) == ["a", "c"]
