"""Waiting in tests for a condition, never for a fixed time.

A test that needs something to have happened asks ``await until(predicate, what)``: the
predicate is polled (it may be a plain function or a coroutine function) until it returns
something true, which ``until`` returns. ``HANG_GUARD`` is the one bound on how long any wait
in the tests may take; it is never a delay, only what turns a hang into a failure that names
what it waited for.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar, overload

T = TypeVar("T")

HANG_GUARD = 60.0
"""Seconds a wait may take before the test fails: far past any healthy wait, even under load."""

POLL = 0.01
"""Seconds between two looks at a condition."""


@overload
async def until(
    predicate: Callable[[], Awaitable[T]], what: str, guard: float = HANG_GUARD
) -> T: ...


@overload
async def until(predicate: Callable[[], T], what: str, guard: float = HANG_GUARD) -> T: ...


async def until(
    predicate: Callable[[], T | Awaitable[T]], what: str, guard: float = HANG_GUARD
) -> T:
    """Return ``predicate()``'s first true value (awaited if it is awaitable); fail naming
    ``what`` after ``guard`` seconds."""
    deadline = time.monotonic() + guard
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(POLL)


def until_sync(predicate: Callable[[], T], what: str, guard: float = HANG_GUARD) -> T:
    """``until`` for a test with no event loop (a child process, a thread)."""
    deadline = time.monotonic() + guard
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(POLL)
    return value


async def after_timers(seconds: float) -> None:
    """Return once every timer the event loop had armed to fire within ``seconds`` has fired,
    and the first step of each task those timers started has run.

    For a check that something did *not* happen (a "typing…" renewal after the answer went
    out): asyncio fires due timers in the order of their deadlines, so a timer of this
    function's with a later deadline fires after them however loaded the machine is. It waits
    for that positive signal, never for a guessed stretch of time.
    """
    loop = asyncio.get_running_loop()
    fired: asyncio.Future[None] = loop.create_future()
    timer = loop.call_later(seconds, fired.set_result, None)
    try:
        await fired
    finally:
        timer.cancel()


def file_contains(path: Path, text: str) -> Callable[[], bool]:
    """A predicate: whether the file at ``path`` (a log being written) contains ``text``."""
    return lambda: path.exists() and text in path.read_text(encoding="utf-8", errors="replace")


async def guarded(awaitable: Awaitable[T], what: str, guard: float = HANG_GUARD) -> T:
    """``awaitable``'s result; fail naming ``what`` if it takes past ``guard`` seconds."""
    try:
        return await asyncio.wait_for(awaitable, guard)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None
