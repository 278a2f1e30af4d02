"""Voice replies on Telegram, end to end: the real python-telegram-bot and anthropic SDKs
inside botd; the loopback Telegram, Anthropic and OpenAI-compatible speech fakes outside.

An answer carrying ``[[tts]]`` goes out as the fake's Ogg Opus audio, uploaded as a voice
note with the answer's text as its caption, while the transcript keeps the model's own text
and the audio file is gone once the upload is confirmed. ``/voice on`` speaks a plain answer;
a synthesis that fails is not retried: the answer goes as text, a WARNING in the provider's
words.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.fakes.anthropic_api import stream, text
from tests.fakes.ogg_opus import pages
from tests.media.telegram_botd import DM, TRANSCRIBE_KEY, botd
from tests.support.daemon_inprocess import HANG_GUARD


async def test_a_tts_answer_is_uploaded_as_the_fakes_voice_note_with_its_text(
    tmp_path: Path,
) -> None:
    async with botd(tmp_path, speech=True) as b:
        b.model.push(stream(text("[[tts]] It is **sunny** today.")), stream(text("Yes.")))
        b.telegram.push_text(DM, "weather?")
        await b.telegram.wait_for_call("sendVoice", timeout=HANG_GUARD)
        await b.idle()
        b.telegram.push_text(DM, "really?")
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
    [upload] = b.telegram.uploads
    assert upload.method == "sendVoice"
    assert upload.file.data == b.transcriber.speech_audio
    assert pages(upload.file.data)[0][0].startswith(b"OpusHead")  # Ogg Opus, as sent
    assert upload.caption == "It is sunny today."
    [speech] = b.transcriber.speeches
    assert speech.body == {
        "model": "tts-test",
        "voice": "fable",
        "input": "It is sunny today.",  # what is heard: no Markdown marks read aloud
        "response_format": "opus",
    }
    assert speech.authorization == f"Bearer {TRANSCRIBE_KEY}"
    assert b.sent() == ["Yes."]  # the first answer's text went as the caption, once
    # The model's own text is what the transcript keeps.
    history = json.dumps(b.model.requests[1].body["messages"])
    assert "[[tts]] It is **sunny** today." in history
    assert list((tmp_path / "state" / "speech").iterdir()) == []


async def test_voice_on_speaks_a_plain_answer_and_a_failed_synthesis_goes_as_text_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="botd.delivery.voice")
    async with botd(tmp_path, speech=True) as b:
        b.telegram.push_text(DM, "/voice on")
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        b.model.push(stream(text("Hello there.")), stream(text("Still here.")))
        b.telegram.push_text(DM, "hi")
        await b.telegram.wait_for_call("sendVoice", timeout=HANG_GUARD)
        await b.idle()
        b.transcriber.fail_speech(503)
        b.telegram.push_text(DM, "again")
        await b.telegram.wait_for_call("sendMessage", 2, timeout=HANG_GUARD)
        await b.idle()
    assert b.sent() == [
        "Voice replies are on: answers come as voice notes with their text.",
        "Still here.",
    ]
    [upload] = b.telegram.uploads
    assert (upload.method, upload.caption) == ("sendVoice", "Hello there.")
    assert [s.body["input"] for s in b.transcriber.speeches] == ["Hello there.", "Still here."]
    [warning] = [r for r in caplog.records if r.name == "botd.delivery.voice"]
    assert warning.levelno == logging.WARNING
    assert "HTTP 503" in warning.getMessage()
    assert "The server had an error while processing your request." in warning.getMessage()
    assert TRANSCRIBE_KEY not in caplog.text
