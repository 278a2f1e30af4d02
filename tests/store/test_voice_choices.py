"""What every store backend promises through ``VoiceChoices``: a conversation's ``/voice``
choice is its own, kept until turned off, and still there when the store is opened again
(a restart)."""

from __future__ import annotations

from pathlib import Path

import pytest

from botd.store import Store, VoiceChoices
from botd.store.postgres import PostgresStore
from botd.store.sqlite import SqliteStore
from tests.conftest import STORE_BACKENDS


async def test_a_voice_choice_is_kept_for_its_conversation_alone(store: Store) -> None:
    choices: VoiceChoices = store
    assert not await choices.voice_replies("telegram:1")
    await choices.set_voice_replies("telegram:1", True)
    await choices.set_voice_replies("telegram:1", True)  # again: still one choice, still on
    assert await choices.voice_replies("telegram:1")
    assert not await choices.voice_replies("telegram:2")
    await choices.set_voice_replies("telegram:1", False)
    assert not await choices.voice_replies("telegram:1")
    await choices.set_voice_replies("telegram:2", False)  # off when it was never on
    assert not await choices.voice_replies("telegram:2")


@pytest.mark.parametrize("backend", STORE_BACKENDS)
async def test_a_voice_choice_survives_a_restart(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    async def opened() -> Store:
        if backend == "postgres":
            return await PostgresStore.open(request.getfixturevalue("migrated_postgres_dsn"))
        return SqliteStore.open(tmp_path / "store")

    first = await opened()
    try:
        await first.set_voice_replies("slack:C1", True)
        await first.set_voice_replies("slack:C2", True)
        await first.set_voice_replies("slack:C2", False)
    finally:
        await first.aclose()
    second = await opened()
    try:
        assert await second.voice_replies("slack:C1")
        assert not await second.voice_replies("slack:C2")
    finally:
        await second.aclose()
