"""``Recent``: the newest entries kept, the oldest forgotten beyond its size."""

from __future__ import annotations

from botd.bounded import Expiring, Recent


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


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_expiring_hands_an_entry_out_once_and_not_after_its_time() -> None:
    clock = Clock()
    owed: Expiring[str, str] = Expiring(10, 60.0, clock)
    owed.remember("C1", "url-1")
    owed.remember("C2", "url-2")
    assert owed.take("C1") == "url-1"
    assert owed.take("C1") is None  # once
    clock.now += 60.5
    assert owed.take("C2") is None  # too old
    assert owed.take("C3") is None  # never there


def test_expiring_keeps_only_the_newest_entries() -> None:
    owed: Expiring[int, int] = Expiring(2, 60.0, Clock())
    for n in range(3):
        owed.remember(n, n)
    assert [owed.take(n) for n in range(3)] == [None, 1, 2]
