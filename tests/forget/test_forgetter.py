"""``/forget me``'s confirmation (``botd.forget.Forgetter``) over a real store: the button
names who asked; a press is taken from that person only, within ten minutes; Keep and any
other use remove nothing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from botd.chat import InboundMessage, Press
from botd.forget import CONFIRM_MINUTES, USAGE, Forgetter
from botd.store import MemoryOwner
from botd.store.sqlite import SqliteStore

ALICE = "5050501"


def _said(text: str, sender: str = ALICE) -> InboundMessage:
    return InboundMessage(
        "telegram", ALICE, sender, text, "m1", f"telegram:{ALICE}", is_direct=True
    )


async def test_a_press_counts_from_its_asker_within_the_minutes_only(tmp_path: Path) -> None:
    now = {"t": 1_800_000_000.0}
    with SqliteStore.open(tmp_path / "state") as store:
        owner = MemoryOwner("telegram", "user", ALICE)
        await store.remember(owner, ALICE, "tea", max_items=5)
        forgetter = Forgetter(
            store,
            tmp_path / "state",
            lambda _c, _u: (frozenset(), frozenset()),
            clock=lambda: now["t"],
        )
        assert await forgetter.command(_said("/forget"), "") == (USAGE, ())
        assert await forgetter.command(_said("/forget you"), "you") == (USAGE, ())
        text, [[forget, keep]] = await forgetter.command(_said("/forget me"), "me")
        assert "Press to confirm" in text and (forget.label, keep.label) == ("Forget me", "Keep")

        def press(value: str, sender: str = ALICE) -> InboundMessage:
            return replace(_said("(pressed)", sender), press=Press("q", value, "9"))

        assert await forgetter.press(press(keep.value)) == "Nothing was removed."
        assert await forgetter.press(press(forget.value, "6060601")) == (
            "Only the person who asked can confirm this."
        )
        now["t"] += (CONFIRM_MINUTES + 2) * 60
        assert "expired" in str(await forgetter.press(press(forget.value)))
        assert [m.text for m in await store.memories(owner)] == ["tea"]
        now["t"] -= 2 * 60
        done = await forgetter.press(press(forget.value))
        assert done is not None and done.startswith("Done: removed 1: memories 1")
        assert await store.memories(owner) == []
        assert await forgetter.press(press(forget.value)) == "Done: I kept nothing about you here."
