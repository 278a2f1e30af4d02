"""``/voice``: each conversation's choice, kept in the store, and the one-line answers
(``botd.conversation.voice.VoiceSwitch``)."""

from __future__ import annotations

from botd.conversation.voice import NOT_CONFIGURED, USAGE, VoiceSwitch
from botd.store.sqlite import SqliteStore


async def test_voice_on_off_and_the_state_are_answered_and_kept(
    sqlite_store: SqliteStore,
) -> None:
    switch = VoiceSwitch(sqlite_store, configured=lambda: True)
    assert (await switch.answer("c", "")).startswith("Voice replies are off")
    assert (await switch.answer("c", "ON")).startswith("Voice replies are on")
    assert await switch.on("c") and not await switch.on("d")
    assert await sqlite_store.voice_replies("c")
    # A switch made after a restart reads the choice back.
    again = VoiceSwitch(sqlite_store, configured=lambda: True)
    assert (await again.answer("c", "")).startswith("Voice replies are on")
    assert (await again.answer("c", "off")) == "Voice replies are off: answers come as text."
    assert not await again.on("c") and not await sqlite_store.voice_replies("c")
    assert await again.answer("c", "loud") == USAGE


async def test_without_media_speech_voice_on_says_so_and_keeps_nothing(
    sqlite_store: SqliteStore,
) -> None:
    configured = False
    switch = VoiceSwitch(sqlite_store, configured=lambda: configured)
    assert await switch.answer("c", "on") == NOT_CONFIGURED
    assert await switch.answer("c", "") == NOT_CONFIGURED
    assert not await sqlite_store.voice_replies("c")
    # A choice kept before media.speech went away (a reload) speaks nothing meanwhile.
    await sqlite_store.set_voice_replies("c", True)
    assert not await switch.on("c")
    configured = True
    assert await switch.on("c")
