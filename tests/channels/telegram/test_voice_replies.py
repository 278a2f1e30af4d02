"""Voice replies on Telegram, end to end: the real python-telegram-bot and anthropic SDKs
inside botd; the loopback Telegram, Anthropic and OpenAI-compatible speech fakes outside.

An answer carrying ``[[tts]]`` goes out as the fake's Ogg Opus audio, uploaded as a voice
note with the answer's text as its caption, while the transcript keeps the model's own text
and the audio file is gone once the upload is confirmed. ``/voice on`` speaks a plain answer.
A failed synthesis, a text over the cap and a resend after a crash are tested in
``tests/delivery/test_voice.py``, against the same speech fake.
"""

from __future__ import annotations

from pathlib import Path

from botd.events import TextContent
from tests.fakes.anthropic_api import stream, text
from tests.fakes.ogg_opus import pages
from tests.media.telegram_botd import DM, TRANSCRIBE_KEY, botd
from tests.support.daemon_inprocess import HANG_GUARD, daemon_store


async def test_a_tts_answer_is_uploaded_as_the_fakes_voice_note_with_its_text(
    tmp_path: Path,
) -> None:
    async with botd(tmp_path, speech=True) as b:
        b.model.push(stream(text("[[tts]] It is **sunny** today.")))
        b.telegram.push_text(DM, "weather?")
        await b.telegram.wait_for_call("sendVoice", timeout=HANG_GUARD)
        await b.idle()
        store = daemon_store(b.daemon)
        session = store.active_session(f"telegram:{DM}")
        assert session is not None
        kept = store.load_transcript(session.session_id)
    [upload] = b.telegram.uploads
    assert upload.method == "sendVoice"
    assert upload.file.data == b.transcriber.speech_audio
    assert pages(upload.file.data)[0][0].startswith(b"OpusHead")  # Ogg Opus, as sent
    assert upload.caption == "It is sunny today."
    assert b.sent() == []  # the text went as the caption, once
    [speech] = b.transcriber.speeches
    assert speech.body == {
        "model": "tts-test",
        "voice": "fable",
        "input": "It is sunny today.",  # what is heard: no Markdown marks read aloud
        "response_format": "opus",
    }
    assert speech.authorization == f"Bearer {TRANSCRIBE_KEY}"
    # The transcript keeps the model's own text; the audio file is gone once confirmed.
    answer = kept[-1]
    assert answer.role == "assistant"
    assert [c.text for c in answer.content if isinstance(c, TextContent)] == [
        "[[tts]] It is **sunny** today."
    ]
    assert list((tmp_path / "state" / "speech").iterdir()) == []


async def test_voice_on_speaks_a_plain_answer(tmp_path: Path) -> None:
    async with botd(tmp_path, speech=True) as b:
        b.telegram.push_text(DM, "/voice on")
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        b.model.push(stream(text("Hello there.")))
        b.telegram.push_text(DM, "hi")
        await b.telegram.wait_for_call("sendVoice", timeout=HANG_GUARD)
        await b.idle()
    assert b.sent() == ["Voice replies are on: answers come as voice notes with their text."]
    [upload] = b.telegram.uploads
    assert (upload.method, upload.caption) == ("sendVoice", "Hello there.")
    assert upload.file.data == b.transcriber.speech_audio
    assert [s.body["input"] for s in b.transcriber.speeches] == ["Hello there."]
