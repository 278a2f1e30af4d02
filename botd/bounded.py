"""A mapping that keeps only its newest entries: the memory of what a long-running daemon has
seen lately (ids already handled, names looked up, replies owed) without growing forever."""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

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


__all__ = ["Recent"]
