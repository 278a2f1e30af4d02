"""``retention``: the daily pruner drops what holds people's words once it is older than the
configured days (the store's part on both backends: ``tests/store/test_forget_contracts.py``),
the event recordings in the state dir too, and keeps everything as before when it is unset."""

from __future__ import annotations

import os
from pathlib import Path

from botd.chat import InboundMessage
from botd.config import load_config
from botd.events import Message
from botd.store import InboundPruner
from botd.store.sqlite import SqliteStore

DAY = 86400.0


async def test_the_pruner_drops_old_words_and_recordings_by_the_configured_days(
    tmp_path: Path,
) -> None:
    now = {"t": 1_800_000_000.0}
    events = tmp_path / "events"
    events.mkdir()
    old, new = events / "s-0001.jsonl", events / "s-0002.jsonl"
    for path, age in ((old, 10 * DAY), (new, DAY)):
        path.write_text("{}\n")
        os.utime(path, (now["t"] - age, now["t"] - age))
    days: dict[str, int | None] = {"kept": None}
    with SqliteStore.open(tmp_path / "state", clock=lambda: now["t"]) as store:
        session = await store.open_session("telegram:1")
        now["t"] -= 10 * DAY
        store.append_messages_soon(session.session_id, [Message(role="user", content="old")])
        now["t"] += 5 * DAY  # within chatter's own week
        line = InboundMessage("telegram", "-5", "1", "chatter", "m1", "telegram:-5")
        await store.keep_chatter("telegram", ("k1",), line, limit=10)
        now["t"] += 5 * DAY
        store.append_messages_soon(session.session_id, [Message(role="user", content="new")])
        pruner = InboundPruner(
            store, kept_for=lambda: days["kept"], recordings=events, clock=lambda: now["t"]
        )

        await pruner.prune()  # unset: nothing of the words goes
        assert len(await store.transcript(session.session_id)) == 2
        assert len(await store.kept_chatter("telegram:-5")) == 1
        assert old.exists() and new.exists()

        days["kept"] = 3  # read live: a reload's value holds at the next prune
        await pruner.prune()
        assert [m.content for m in await store.transcript(session.session_id)] == ["new"]
        assert await store.kept_chatter("telegram:-5") == []
        assert not old.exists() and new.exists()


def test_retention_is_a_whole_number_of_days_or_unset(tmp_path: Path) -> None:
    path = tmp_path / "botd.yaml"
    path.write_text("retention: 30\n")
    assert load_config(path, allow_empty=True).retention == 30
    path.write_text("state_dir: x\n")
    assert load_config(path, allow_empty=True).retention is None
