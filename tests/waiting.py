"""Waiting in tests for a condition, never for a fixed time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

HANG_GUARD = 30.0
"""Seconds a wait may take before the test fails: far past any healthy wait, even under load."""


async def until(predicate: Callable[[], bool], what: str, guard: float = HANG_GUARD) -> None:
    """Return once ``predicate()`` holds; fail naming ``what`` after ``guard`` seconds."""
    deadline = time.monotonic() + guard
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)
