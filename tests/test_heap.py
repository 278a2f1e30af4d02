"""The collector settings the daemon runs with once started."""

from __future__ import annotations

import gc

from botd.app import GC_YOUNG_THRESHOLD, freeze_start_up, settled_heap


def test_the_settled_heap_freezes_start_up_and_is_restored_after() -> None:
    before = gc.get_threshold()
    start_up = [object() for _ in range(3)] + [[n] for n in range(100)]
    with settled_heap():
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, before[1], before[2])
        # What existed at start (the lists here) is out of every generation the collector scans.
        assert gc.get_freeze_count() >= 100
        scanned = {id(o) for o in gc.get_objects()}
        assert not any(id(x) in scanned for x in start_up[3:])
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
    scanned = {id(o) for o in gc.get_objects()}
    assert all(id(x) in scanned for x in start_up[3:])


def test_the_settled_heap_turns_a_paused_collector_on_for_good() -> None:
    # ``botd run`` starts with the collector off (botd.cli): the settled daemon collects, and
    # so does its shutdown (which may still answer what the console's input held).
    gc.disable()
    try:
        with settled_heap():
            assert gc.isenabled()
        assert gc.isenabled()
    finally:
        gc.enable()


def test_start_up_frozen_early_leaves_the_settled_heap_little_to_walk() -> None:
    # ``App.run`` freezes start-up's objects before any lease is held (a full collection of
    # them stops the event loop); the settled heap then freezes only what came after.
    start_up = [[n] for n in range(1000)]
    freeze_start_up()
    try:
        frozen = gc.get_freeze_count()
        assert frozen >= len(start_up)
        later = [[n] for n in range(10)]
        with settled_heap():
            assert frozen + len(later) <= gc.get_freeze_count() < frozen + 1000
    finally:
        gc.unfreeze()
