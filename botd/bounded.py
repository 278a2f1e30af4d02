"""Memories that keep only their newest entries: what a long-running daemon has seen lately
(ids already handled, names looked up, replies owed) without growing forever."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Recent(OrderedDict[K, V]):
    """An ``OrderedDict`` of at most ``size`` entries; ``remember`` puts an entry last (the
    newest) and forgets the oldest beyond ``size``. ``touch`` makes an entry the newest."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def remember(self, key: K, value: V) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)

    def touch(self, key: K) -> None:
        self.move_to_end(key)


class Expiring(Generic[K, V]):
    """At most ``size`` entries (the newest), each good for ``ttl`` seconds of ``clock``:
    ``take`` hands an entry out once, and not when it is older than that."""

    def __init__(self, size: int, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: Recent[K, tuple[V, float]] = Recent(size)
        self._ttl = ttl
        self._clock = clock

    def remember(self, key: K, value: V) -> None:
        self._entries.remember(key, (value, self._clock()))

    def take(self, key: K) -> V | None:
        found = self._entries.pop(key, None)
        if found is None or self._clock() - found[1] > self._ttl:
            return None
        return found[0]


__all__ = ["Expiring", "Recent"]
