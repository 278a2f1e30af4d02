"""Voice replies in delivery: the speech client against the OpenAI-compatible fake, and a
run's outbox speaking a reply into a file it writes down by reference (``speech:<name>``),
uploads as a voice note with the text, and deletes once confirmed; a resend of that piece
uploads the same audio without speaking again; a failure or a text over the cap goes as
text, once."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import cast

import pytest

from botd.channels.base import ChannelAdapter, InboundSink, OutboundFile, SendScope
from botd.chat import Attachment, Capabilities, MessageRef, Target
from botd.config.schema import SpeechSection
from botd.delivery import ChannelDelivery, Outgoing, RunOptions, RunOutbox
from botd.delivery.media import MediaSettings, MediaUnavailable, load
from botd.delivery.voice import Voice, speech_dir
from botd.media.speech import SpeechFailed, synthesize
from botd.subscriber import BlockReply
from botd.text.markup import PLAIN
from tests.fakes.ogg_opus import pages, silence
from tests.fakes.openai_api import FakeOpenAI

KEY = "sk-speech-unit"
CHAT = Target("console", "c1")


@pytest.fixture
async def speaker() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=KEY) as fake:
        yield fake


def section(fake: FakeOpenAI, **changes: object) -> SpeechSection:
    return SpeechSection.model_validate(
        {"base_url": fake.base_url, "api_key": KEY, "model": "tts-1", "voice": "nova", **changes}
    )


class VoiceAdapter:
    """A chat that records texts and uploads (bytes, as voice, media type, caption)."""

    name = "console"
    capabilities = Capabilities(text_limit=4000, markup=PLAIN, caption_limit=100)

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.files: list[tuple[bytes, bool, str, str]] = []

    async def start(self, sink: InboundSink) -> None:
        return None

    async def stop_inbound(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        self.texts.append(markdown)
        return [MessageRef(target, f"t{len(self.texts)}")]

    async def send_file(
        self,
        target: Target,
        file: OutboundFile,
        caption: str = "",
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        self.files.append((file.data, file.as_voice, file.media_type, caption))
        return [MessageRef(target, f"f{len(self.files)}")]

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        raise AssertionError("nothing is edited here")

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        raise AssertionError("nothing is deleted here")

    async def react(self, ref: MessageRef, emoji: str) -> None:
        return None

    async def typing(self, target: Target) -> None:
        return None

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        raise AssertionError("nothing is downloaded here")


class Journal:
    """Remembers each piece written (its text and files, and whether its files were on disk
    when it was written) and each confirmed."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.pieces: list[tuple[str, list[str], bool]] = []
        self.confirmed: list[int] = []

    async def written(self, piece: Outgoing, text: str) -> int:
        assert isinstance(piece.reply, BlockReply)
        urls = list(piece.reply.media_urls)
        on_disk = all((self.directory / u.removeprefix("speech:")).exists() for u in urls)
        self.pieces.append((text, urls, on_disk))
        return len(self.pieces)

    def sent(self, key: int, refs: Sequence[MessageRef]) -> None:
        self.confirmed.append(key)

    def failed(self, key: int) -> None:
        raise AssertionError("nothing fails here")


async def test_synthesis_posts_the_text_and_returns_the_services_audio(
    speaker: FakeOpenAI,
) -> None:
    audio = await synthesize(section(speaker), "Hello.")
    assert audio == speaker.speech_audio
    assert pages(audio)[0] == [pages(silence())[0][0]]  # an OpusHead page first
    [request] = speaker.speeches
    assert request.body == {
        "model": "tts-1",
        "voice": "nova",
        "input": "Hello.",
        "response_format": "opus",
    }
    assert request.authorization == f"Bearer {KEY}"


@pytest.mark.parametrize(
    ("status", "words"),
    [(503, "The server had an error"), (401, "Incorrect API key provided")],
)
async def test_a_refused_synthesis_says_so_in_the_providers_words(
    speaker: FakeOpenAI, status: int, words: str
) -> None:
    settings = section(speaker)
    if status == 401:
        settings = settings.model_copy(update={"api_key": "sk-wrong-key"})
    else:
        speaker.fail_speech(status)
    with pytest.raises(SpeechFailed) as failed:
        await synthesize(settings, "Hello.")
    message = str(failed.value)
    assert f"HTTP {status}" in message and words in message
    assert "\n" not in message and "sk-" not in message


async def test_an_unreachable_service_is_one_line() -> None:
    async with FakeOpenAI() as gone:
        settings = SpeechSection(base_url=gone.base_url, api_key=KEY)
    with pytest.raises(SpeechFailed, match="could not be reached"):
        await synthesize(settings, "Hello.")


async def test_a_spoken_reply_is_written_by_reference_uploaded_as_a_voice_note_and_removed(
    speaker: FakeOpenAI, tmp_path: Path
) -> None:
    directory = speech_dir(tmp_path)
    adapter, journal = VoiceAdapter(), Journal(directory)
    delivery = ChannelDelivery({"console": adapter}, media=MediaSettings(speech_dir=directory))
    voice = Voice(lambda: section(speaker), directory)
    output = delivery.open_run(CHAT, RunOptions(journal=journal, speech=voice))
    output.final(BlockReply("It is **sunny**.", tts=True))
    output.final(BlockReply("Not spoken."))
    await output.close()
    [(text, [reference], on_disk), plain] = journal.pieces
    assert text == "It is **sunny**." and reference.startswith("speech:") and on_disk
    assert plain == ("Not spoken.", [], True)
    assert journal.confirmed == [1, 2]
    assert adapter.files == [(speaker.speech_audio, True, "audio/ogg", "It is **sunny**.")]
    assert adapter.texts == ["Not spoken."]
    assert [s.body["input"] for s in speaker.speeches] == ["It is sunny."]
    assert list(directory.iterdir()) == []  # confirmed: the audio is gone


async def test_a_resent_piece_uploads_the_same_audio_without_speaking_again(
    speaker: FakeOpenAI, tmp_path: Path
) -> None:
    # What a restart does with a piece written and never confirmed (Promise.send_unconfirmed).
    directory = speech_dir(tmp_path)
    voice = Voice(lambda: section(speaker), directory)
    spoken = await voice.spoken(BlockReply("Hello.", tts=True), "c1")
    [reference] = spoken.media_urls
    adapter = VoiceAdapter()
    delivery = ChannelDelivery({"console": adapter}, media=MediaSettings(speech_dir=directory))
    await delivery.send_text(CHAT, "Hello.", media=[reference], audio_as_voice=True)
    assert adapter.files == [(speaker.speech_audio, True, "audio/ogg", "Hello.")]
    assert len(speaker.speeches) == 1
    # Gone (confirmed meanwhile, or another node's): the text alone, once, never a file name.
    voice.done(spoken)
    await delivery.send_text(CHAT, "Hello.", media=[reference], audio_as_voice=True)
    assert adapter.texts == ["Hello."] and len(adapter.files) == 1


async def test_a_long_text_goes_before_its_voice_note_as_a_piece_of_its_own(
    speaker: FakeOpenAI, tmp_path: Path
) -> None:
    directory = speech_dir(tmp_path)
    adapter, journal = VoiceAdapter(), Journal(directory)
    delivery = ChannelDelivery({"console": adapter}, media=MediaSettings(speech_dir=directory))
    voice = Voice(lambda: section(speaker), directory)
    output = delivery.open_run(CHAT, RunOptions(journal=journal, speech=voice, voice=True))
    long_text = ("A longer answer. " * 10).strip()  # 169 characters: over the caption limit
    output.final(BlockReply(long_text))
    await output.close()
    assert [(text, len(urls)) for text, urls, _ in journal.pieces] == [
        (long_text, 0),
        ("", 1),
    ]
    assert adapter.texts == [long_text]
    assert [(voiced, caption) for _, voiced, _, caption in adapter.files] == [(True, "")]


async def test_a_failed_or_too_long_synthesis_goes_as_text_once(
    speaker: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="botd.delivery.voice")
    directory = speech_dir(tmp_path)
    adapter = VoiceAdapter()
    delivery = ChannelDelivery({"console": adapter}, media=MediaSettings(speech_dir=directory))
    voice = Voice(lambda: section(speaker, max_chars=20), directory)
    speaker.fail_speech(502)
    output = delivery.open_run(CHAT, RunOptions(speech=voice, voice=True))
    output.final(BlockReply("Short answer."))
    output.final(BlockReply("An answer longer than twenty characters."))
    await output.close()
    assert adapter.texts == ["Short answer.", "An answer longer than twenty characters."]
    assert adapter.files == []
    assert len(speaker.speeches) == 1  # no retry, and nothing asked for the long one
    # One line for each, in whichever order the two were decided (the long one is told at
    # once, the failed one when the service answers).
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "botd.delivery.voice"]
    assert len(said) == 2
    assert any(level == logging.WARNING and "HTTP 502" in text for level, text in said)
    assert any(level == logging.INFO and "max_chars is 20" in text for level, text in said)


@pytest.mark.parametrize("unset", ["no voice", "no media.speech"])
async def test_a_tts_reply_without_speech_configured_goes_as_text(
    tmp_path: Path, unset: str
) -> None:
    adapter = VoiceAdapter()
    voice = None if unset == "no voice" else Voice(lambda: None, speech_dir(tmp_path))
    output = ChannelDelivery({"console": adapter}).open_run(CHAT, RunOptions(speech=voice))
    output.final(BlockReply("Hello.", tts=True))
    await output.close()
    assert adapter.texts == ["Hello."] and adapter.files == []


@pytest.mark.parametrize(
    "reference",
    ["speech:../../etc/passwd", "speech:short.ogg", "speech:" + "a" * 32 + ".wav"],
)
async def test_only_a_voice_reply_name_is_read_from_the_speech_dir(
    tmp_path: Path, reference: str
) -> None:
    directory = speech_dir(tmp_path)
    directory.mkdir()
    (directory / ("a" * 32 + ".wav")).write_bytes(b"RIFF")
    with pytest.raises(MediaUnavailable, match="not a voice reply"):
        await load(reference, MediaSettings(speech_dir=directory))


async def test_a_chat_without_uploads_gets_the_text_of_a_voice_reply_alone(tmp_path: Path) -> None:
    class TextOnly(VoiceAdapter):
        send_file = None  # type: ignore[assignment]

    adapter = TextOnly()  # an adapter of another distribution, without send_file at all
    adapters = {"console": cast(ChannelAdapter, adapter)}
    delivery = ChannelDelivery(adapters, media=MediaSettings(speech_dir=tmp_path))
    reference = "speech:" + "b" * 32 + ".ogg"
    await delivery.send_text(CHAT, "Hello.", media=[reference], audio_as_voice=True)
    assert adapter.texts == ["Hello."]


async def test_a_reply_spoken_while_the_run_is_stopped_is_not_sent_and_its_audio_goes(
    speaker: FakeOpenAI, tmp_path: Path
) -> None:
    directory = speech_dir(tmp_path)
    adapter = VoiceAdapter()
    delivery = ChannelDelivery({"console": adapter}, media=MediaSettings(speech_dir=directory))
    stopped: list[RunOutbox] = []

    async def spoken_then_stopped(settings: SpeechSection, text: str) -> bytes:
        stopped[0].cancel()  # /stop arrives while the service speaks
        return silence()

    voice = Voice(lambda: section(speaker), directory, synthesizer=spoken_then_stopped)
    output = delivery.open_run(CHAT, RunOptions(speech=voice, voice=True))
    stopped.append(output)
    output.final(BlockReply("Hello."))
    await output.close()
    assert adapter.texts == [] and adapter.files == []
    assert list(directory.iterdir()) == []
