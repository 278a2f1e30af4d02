"""Files sent on Telegram reach the model, end to end: the real python-telegram-bot and
anthropic SDKs inside botd, the loopback Telegram, Anthropic and transcription fakes outside.

A photo arrives as an image block with its caption (scaled down when larger than the model
APIs take), a voice note as its transcript, a text file and a PDF as their text; a file over
``media.max_bytes``, of an unsupported type, or whose transcription fails, or an image
claiming a huge size, gets one line back and (with no text) no model call at all.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from botd.app import App
from botd.media.images import IMAGE_MAX_SIDE
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.telegram_api import FakeTelegramAPI, server_error
from tests.media.files import JPEG, OGG, PNG, ZIP, claimed_png, jpeg, minimal_pdf, slow_pdf
from tests.media.reading import reaped, worker_pids
from tests.media.telegram_botd import (
    DM,
    GROUP,
    TRANSCRIBE_KEY,
    botd,
    fakes,
    images,
    media_yaml,
    telegram_ready,
    texts,
)
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
    HANG_GUARD,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    daemon_store,
    telegram_yaml,
)
from tests.support.waiting import until


async def test_a_photo_reaches_the_model_as_an_image_with_its_caption(tmp_path: Path) -> None:
    async with botd(tmp_path) as b:
        b.model.push(stream(text("A nice photo.")))
        b.telegram.push_file(DM, "photo", JPEG, caption="what is in this picture?")
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
    content = b.user_content()
    assert images(content) == [JPEG]  # the large size, not the thumbnail
    image = next(block for block in content if block["type"] == "image")
    assert image["source"]["media_type"] == "image/jpeg"
    assert "what is in this picture?" in texts(content)
    assert b.sent() == ["A nice photo."]
    assert len(b.telegram.file_downloads) == 1


async def test_an_image_sent_as_a_file_is_sniffed_from_its_bytes(tmp_path: Path) -> None:
    async with botd(tmp_path) as b:
        b.model.push(stream(text("A diagram.")))
        # Declared as a generic file: the bytes say PNG.
        b.telegram.push_file(
            DM, "document", PNG, file_name="scan.bin", mime_type="application/octet-stream"
        )
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
    content = b.user_content()
    assert images(content) == [PNG]
    image = next(block for block in content if block["type"] == "image")
    assert image["source"]["media_type"] == "image/png"


async def test_a_large_image_reaches_the_model_scaled_to_what_the_apis_take(
    tmp_path: Path,
) -> None:
    big = jpeg((6000, 4000))
    async with botd(tmp_path, max_bytes=len(big) + 1) as b:
        b.model.push(stream(text("A red picture.")))
        b.telegram.push_file(
            DM, "document", big, file_name="scan.jpg", mime_type="image/jpeg", caption="what?"
        )
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
    [image] = images(b.user_content())
    with Image.open(io.BytesIO(image)) as seen:
        assert (seen.format, seen.size) == ("JPEG", (IMAGE_MAX_SIDE, IMAGE_MAX_SIDE * 2 // 3))
    assert b.sent() == ["A red picture."]


async def test_an_image_claiming_a_huge_size_gets_one_line_and_no_model_call(
    tmp_path: Path,
) -> None:
    async with botd(tmp_path) as b:
        b.telegram.push_file(DM, "document", claimed_png(50_000, 50_000), file_name="huge.png")
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
    assert b.sent() == ["I could not read huge.png: the image is too large (50000×50000 pixels)."]
    assert b.model.requests == []


async def test_a_photo_caption_mentioning_the_bot_counts_in_a_group_with_the_kept_photo(
    tmp_path: Path,
) -> None:
    async with botd(tmp_path) as b:
        b.model.push(stream(text("Seen.")))
        b.telegram.push_file(GROUP, "photo", JPEG)  # no mention: kept, not answered
        b.telegram.push_file(GROUP, "photo", PNG, caption="@botd_test_bot look at this")
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
    assert len(b.model.requests) == 1
    content = b.user_content()
    # The photo posted before (kept as chatter) comes along with the one addressing the bot.
    assert images(content) == [JPEG, PNG]
    assert "[Ada (id 4242)] [sent photo.jpg]" in texts(content)
    assert "look at this" in texts(content)


async def test_an_album_is_answered_once_with_all_its_photos(tmp_path: Path) -> None:
    async with botd(tmp_path) as b:
        b.model.push(stream(text("Two photos: a cat and a dog.")))
        b.telegram.push_file(DM, "photo", JPEG, caption="compare these", album="A1")
        b.telegram.push_file(DM, "photo", PNG, album="A1")
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
    assert len(b.model.requests) == 1
    content = b.user_content()
    assert images(content) == [JPEG, PNG]
    assert "compare these" in texts(content)
    assert b.sent() == ["Two photos: a cat and a dog."]


async def test_an_album_addressing_the_bot_in_a_group_brings_its_uncaptioned_photos(
    tmp_path: Path,
) -> None:
    async with botd(tmp_path) as b:
        b.model.push(stream(text("Both seen.")))
        b.telegram.push_file(GROUP, "photo", JPEG, caption="@botd_test_bot which?", album="G1")
        b.telegram.push_file(GROUP, "photo", PNG, album="G1")  # no caption, same post
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
        assert b.daemon.runtime is not None
        assert await b.daemon.runtime.store.kept_chatter(f"telegram:{GROUP}") == []
    assert len(b.model.requests) == 1
    content = b.user_content()
    assert images(content) == [JPEG, PNG]
    assert "which?" in texts(content)
    assert b.sent() == ["Both seen."]


async def test_a_voice_note_reaches_the_model_as_its_transcript(tmp_path: Path) -> None:
    async with botd(tmp_path) as b:
        b.transcriber.transcript = "please book a table for two"
        b.model.push(stream(text("Booked.")))
        b.telegram.push_file(DM, "voice", OGG, mime_type="audio/ogg")
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
    [upload] = b.transcriber.transcriptions
    assert upload.data == OGG
    assert upload.model == "whisper-test"
    assert upload.authorization == f"Bearer {TRANSCRIBE_KEY}"
    assert "[voice note transcript] please book a table for two" in texts(b.user_content())
    assert b.sent() == ["Booked."]


async def test_text_and_pdf_documents_reach_the_model_as_text(tmp_path: Path) -> None:
    async with botd(tmp_path) as b:
        b.model.push(stream(text("Read the notes.")), stream(text("Read the PDF.")))
        notes = "line one\nline two ünïcode\n".encode() + b"\xff bad byte"
        b.telegram.push_file(DM, "document", notes, file_name="notes.txt", mime_type="text/plain")
        await b.telegram.wait_for_call("sendMessage", 1, timeout=HANG_GUARD)
        await b.idle()
        b.telegram.push_file(
            DM,
            "document",
            minimal_pdf("Quarterly revenue grew"),
            file_name="report.pdf",
            mime_type="application/pdf",
            caption="summarise",
        )
        await b.telegram.wait_for_call("sendMessage", 2, timeout=HANG_GUARD)
        await b.idle()
    first = texts(b.user_content(0))
    assert "[file: notes.txt]" in first
    assert "line two ünïcode" in first
    assert "\ufffd bad byte" in first  # undecodable bytes replaced, not fatal
    second = texts(b.user_content(1))
    assert "[file: report.pdf]" in second
    assert "Quarterly revenue grew" in second
    assert "summarise" in second


async def test_a_file_over_the_limit_gets_one_line_and_no_model_call(tmp_path: Path) -> None:
    async with botd(tmp_path, max_bytes=1000) as b:
        b.telegram.push_file(DM, "photo", JPEG, declared_size=5_000_000)
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
    [line] = b.sent()
    assert "\n" not in line
    assert "too big" in line
    assert b.model.requests == []
    assert b.telegram.file_downloads == []  # refused on the declared size


async def test_a_file_larger_than_declared_is_refused_by_getfile_size(tmp_path: Path) -> None:
    async with botd(tmp_path, max_bytes=100) as b:
        b.telegram.push_file(DM, "document", b"x" * 500, file_name="a.txt", declared_size=10)
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
    [line] = b.sent()
    assert "too big" in line
    assert b.model.requests == []


async def test_an_unsupported_file_gets_one_line_and_no_model_call(tmp_path: Path) -> None:
    async with botd(tmp_path) as b:
        b.telegram.push_file(
            DM, "document", ZIP, file_name="archive.zip", mime_type="application/zip"
        )
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
    [line] = b.sent()
    assert line.startswith("I could not read archive.zip:")
    assert "not supported" in line and "\n" not in line
    assert b.model.requests == []


async def test_a_failed_transcription_gets_one_line(tmp_path: Path) -> None:
    async with botd(tmp_path) as b:
        b.transcriber.fail_transcriptions(503)
        b.telegram.push_file(DM, "voice", OGG, mime_type="audio/ogg")
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
    [line] = b.sent()
    assert "voice note" in line and "503" in line and "\n" not in line
    assert TRANSCRIBE_KEY not in line
    assert b.model.requests == []


async def test_a_voice_note_without_transcription_configured_gets_one_line(
    tmp_path: Path,
) -> None:
    async with botd(tmp_path, transcription=False) as b:
        b.telegram.push_file(DM, "voice", OGG, mime_type="audio/ogg")
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
    [line] = b.sent()
    assert "no transcription service is configured" in line
    assert b.telegram.file_downloads == [] and b.model.requests == []


async def test_a_failed_download_with_a_caption_still_answers_the_caption(
    tmp_path: Path,
) -> None:
    async with botd(tmp_path) as b:
        b.telegram.fail_next("getFile", server_error(502))
        b.model.push(stream(text("About your question…")))
        b.telegram.push_file(DM, "photo", JPEG, caption="and what about this?")
        await b.telegram.wait_for_call("sendMessage", 2, timeout=HANG_GUARD)
        await b.idle()
    notice, answer = b.sent()
    assert notice.startswith("I could not read photo.jpg:") and "\n" not in notice
    assert answer == "About your question…"
    content = b.user_content()
    assert images(content) == []
    assert "and what about this?" in texts(content)
    assert "[photo.jpg could not be read:" in texts(content)


async def test_an_image_message_accepted_before_a_restart_is_answered_after_it(
    tmp_path: Path,
) -> None:
    async with botd(tmp_path, extra="shutdown_grace: 0.2\n") as b:
        b.model.push(stream(stall=True))  # the model takes the request and says nothing
        b.telegram.push_file(DM, "photo", PNG, caption="describe it")
        await until(lambda: b.model.requests, "b.model.requests")
    # botd stopped mid-run: the message stays unanswered in the inbox.
    assert b.sent() == []
    async with botd(tmp_path) as again:
        again.model.push(stream(text("It is a chart.")))
        await again.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await again.idle()
    content = again.user_content()
    assert images(content) == [PNG]
    assert "describe it" in texts(content)
    assert again.sent() == ["It is a chart."]


async def test_a_photo_still_waiting_at_a_restart_is_fetched_again_after_it(
    tmp_path: Path,
) -> None:
    """A message accepted but not yet run when botd stops keeps only the file's reference
    (in the inbox); after the restart the file is fetched again and reaches the model."""
    other = 778
    async with (
        FakeTelegramAPI() as telegram,
        FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model,
        FakeOpenAI(api_key=TRANSCRIBE_KEY) as transcriber,
    ):
        config = config_yaml(
            tmp_path,
            "shutdown_grace: 0.2\nagent:\n  max_concurrent_runs: 1\n",
            anthropic_yaml(model),
            telegram_yaml(telegram, "dm_policy: open"),
            media_yaml(transcriber),
        )
        ready = lambda d: d.runtime is not None and "telegram" in d.runtime.adapters  # noqa: E731
        async with daemon_running(config, ready=ready) as daemon:
            model.push(stream(stall=True))  # the one run slot stays taken
            telegram.push_text(other, "a long question")
            await until(lambda: model.requests, "model.requests")
            telegram.push_file(DM, "photo", PNG, caption="and this one?")
            await until(lambda: telegram.file_downloads, "telegram.file_downloads")
            assert daemon.runtime is not None
            assert daemon_store(daemon).unfinished_inbox()[-1].state == "accepted"
        assert len(model.requests) == 1
        model.push(stream(text("First answer.")), stream(text("Second answer.")))
        async with daemon_running(config, ready=ready) as daemon:
            await telegram.wait_for_call("sendMessage", 2, timeout=HANG_GUARD)
            assert daemon.runtime is not None
            await asyncio.wait_for(daemon.runtime.dispatcher.drain(), HANG_GUARD)
    with_image = [r for r in model.requests[1:] if PNG in images(_last_user(r.body["messages"]))]
    assert len(with_image) == 1
    assert "and this one?" in texts(_last_user(with_image[0].body["messages"]))
    assert len(telegram.file_downloads) == 2  # fetched again after the restart


def _last_user(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    content = [m for m in messages if m["role"] == "user"][-1]["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


async def test_a_photo_captioned_new_starts_over_with_the_photo(tmp_path: Path) -> None:
    async with botd(tmp_path) as b:
        b.model.push(stream(text("Noted.")))
        b.telegram.push_text(DM, "the code word is heron")
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
        b.model.push(stream(text("A nice photo.")))
        b.telegram.push_file(DM, "photo", JPEG, caption="/new what is in this picture?")
        await b.telegram.wait_for_call("sendMessage", 2, timeout=HANG_GUARD)
        await b.idle()
    # The photo is the new conversation's first message: nothing of the old one is sent.
    assert len(b.model.requests[-1].body["messages"]) == 1
    content = b.user_content()
    assert images(content) == [JPEG]
    assert "what is in this picture?" in texts(content)
    assert "/new" not in texts(content) and "heron" not in texts(content)
    assert b.sent() == ["Noted.", "A nice photo."]


async def test_a_file_sent_with_another_command_is_said_to_be_unread(tmp_path: Path) -> None:
    async with botd(tmp_path) as b:
        b.telegram.push_file(DM, "photo", JPEG, caption="/status")
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
    (answer,) = b.sent()
    assert answer.startswith("No conversation yet.")
    assert answer.endswith("(The file sent with the command was not read: send it on its own.)")
    assert b.model.requests == []


# --- reading a file is part of its message's run -----------------------------------------------
# A download, a transcription or a document read is cut by /stop, /new, an interrupt or the
# shutdown as a run is; no command waits for one, and no other chat waits behind one.

REPORT = minimal_pdf("Quarterly revenue grew")


def push_report(telegram: FakeTelegramAPI, chat: int = DM, caption: str = "summarise") -> None:
    telegram.push_file(
        chat,
        "document",
        REPORT,
        file_name="report.pdf",
        mime_type="application/pdf",
        caption=caption,
    )


def sent_to(telegram: FakeTelegramAPI, chat: int) -> list[str]:
    calls = telegram.calls_to("sendMessage", ok_only=True)
    return [str(c.params["text"]) for c in calls if int(c.params["chat_id"]) == chat]


async def until_sent(telegram: FakeTelegramAPI, chat: int, count: int = 1) -> None:
    await until(
        lambda: len(sent_to(telegram, chat)) >= count,
        f"{count} message(s) to chat {chat}",
        guard=HANG_GUARD,
    )


async def until_held(telegram: FakeTelegramAPI, count: int = 1) -> None:
    await until(
        lambda: len(telegram.downloads_held) >= count, f"{count} download(s) held", HANG_GUARD
    )


async def idle(daemon: App) -> None:
    assert daemon.runtime is not None
    await asyncio.wait_for(daemon.runtime.dispatcher.drain(), HANG_GUARD)


@pytest.mark.parametrize(
    ("command", "confirmation"),
    [("/stop", "Stopped."), ("/new", "Started a new conversation.")],
)
async def test_a_stop_while_a_file_downloads_cuts_it_and_nothing_of_it_is_posted(
    tmp_path: Path, command: str, confirmation: str
) -> None:
    async with fakes(tmp_path) as f:
        async with daemon_running(f.config, ready=telegram_ready) as daemon:
            assert daemon.runtime is not None
            store = daemon_store(daemon)
            release = f.telegram.hold_downloads()
            push_report(f.telegram)
            await until_held(f.telegram)
            [reading] = store.unfinished_inbox()
            f.telegram.push_text(DM, command)
            # Confirmed while the download still hangs: the command waited for nothing.
            await until_sent(f.telegram, DM)
            assert sent_to(f.telegram, DM) == [confirmation]
            assert store.inbox_state(reading.id) == "skipped"
            release.set()
            await idle(daemon)
            assert sent_to(f.telegram, DM) == [confirmation]  # no "could not read", no answer
        # Not answered after a restart either.
        async with daemon_running(f.config, ready=telegram_ready) as daemon:
            await idle(daemon)
        assert sent_to(f.telegram, DM) == [confirmation]
        assert f.model.requests == []


async def test_new_with_text_while_a_file_downloads_starts_over_with_the_text_alone(
    tmp_path: Path,
) -> None:
    async with botd(tmp_path) as b:
        release = b.telegram.hold_downloads()
        push_report(b.telegram)
        await until_held(b.telegram)
        b.model.push(stream(text("Fresh start.")))
        b.telegram.push_text(DM, "/new what is on today?")
        await until_sent(b.telegram, DM)
        release.set()
        await b.idle()
    assert sent_to(b.telegram, DM) == ["Fresh start."]
    [request] = b.model.requests
    assert [m["role"] for m in request.body["messages"]] == ["user"]
    assert texts(b.user_content()) == "what is on today?"


async def test_a_chat_whose_file_is_being_read_holds_up_no_other_chat(tmp_path: Path) -> None:
    other, third, fourth = DM + 1, DM + 2, DM + 3
    async with botd(tmp_path) as b:
        release = b.telegram.hold_downloads()
        push_report(b.telegram, DM)
        push_report(b.telegram, other, caption="and mine")
        await until_held(b.telegram, 2)
        b.telegram.push_text(DM, "/stop")
        b.model.push(stream(text("Hello there.")))
        b.telegram.push_text(third, "hello")
        b.telegram.push_text(fourth, "/stop")
        b.telegram.push_text(other, "/status")
        for chat in (DM, third, fourth, other):
            await until_sent(b.telegram, chat)
        # All answered while both downloads still hang; the other chat's goes on.
        assert sent_to(b.telegram, DM) == ["Stopped."]
        assert sent_to(b.telegram, third) == ["Hello there."]
        assert sent_to(b.telegram, fourth) == ["Nothing was running."]
        [status] = sent_to(b.telegram, other)
        assert ": working, 0 waiting" in status
        assert "Preparing: and mine" in status
        b.model.push(stream(text("Revenue grew.")))
        release.set()
        await until_sent(b.telegram, other, 2)
        await b.idle()
    assert sent_to(b.telegram, other) == [status, "Revenue grew."]
    assert sent_to(b.telegram, DM) == ["Stopped."]
    assert len(b.model.requests) == 2
    read = texts(b.user_content())
    assert "Quarterly revenue grew" in read and "and mine" in read


async def test_an_interrupting_message_cuts_a_file_being_read(tmp_path: Path) -> None:
    async with (
        fakes(tmp_path, extra="agent:\n  queue_mode: interrupt\n") as f,
        daemon_running(f.config, ready=telegram_ready) as daemon,
    ):
        assert daemon.runtime is not None
        store = daemon_store(daemon)
        release = f.telegram.hold_downloads()
        push_report(f.telegram)
        await until_held(f.telegram)
        [reading] = store.unfinished_inbox()
        f.model.push(stream(text("Sure, forget the report.")))
        f.telegram.push_text(DM, "never mind that")
        await until_sent(f.telegram, DM)
        assert store.inbox_state(reading.id) == "skipped"
        release.set()
        await idle(daemon)
    assert sent_to(f.telegram, DM) == ["Sure, forget the report."]
    [request] = f.model.requests
    assert "never mind that" in str(request.body["messages"])
    assert "report.pdf" not in str(request.body["messages"])


async def test_a_shutdown_while_a_file_downloads_leaves_it_for_the_restart(
    tmp_path: Path,
) -> None:
    async with fakes(tmp_path, extra="shutdown_grace: 0.2\n") as f:
        async with daemon_running(f.config, ready=telegram_ready):
            release = f.telegram.hold_downloads()
            push_report(f.telegram)
            await until_held(f.telegram)
        # botd stopped while the download hung, and said nothing of the file.
        assert f.telegram.calls_to("sendMessage") == []
        release.set()
        f.model.push(stream(text("Revenue grew.")))
        async with daemon_running(f.config, ready=telegram_ready) as daemon:
            await until_sent(f.telegram, DM)
            await idle(daemon)
    assert sent_to(f.telegram, DM) == ["Revenue grew."]
    [request] = f.model.requests
    read = texts(_last_user(request.body["messages"]))
    assert "Quarterly revenue grew" in read and "summarise" in read
    assert len(f.telegram.downloads_held) == 2  # fetched again after the restart


@pytest.mark.parametrize(
    ("command", "confirmation"),
    [("/stop", "Stopped."), ("/new", "Started a new conversation.")],
)
async def test_a_stop_during_a_long_pdf_read_kills_the_reader_and_another_chat_is_answered(
    tmp_path: Path, command: str, confirmation: str
) -> None:
    other = DM + 1
    async with fakes(tmp_path, max_bytes=1_000_000) as f:
        async with daemon_running(f.config, ready=telegram_ready) as daemon:
            assert daemon.runtime is not None
            store = daemon_store(daemon)
            f.telegram.push_file(
                DM, "document", slow_pdf(), file_name="slow.pdf", mime_type="application/pdf"
            )
            await until(lambda: len(worker_pids()) == 1, "the PDF's reader to start")
            [reader] = worker_pids()
            [reading] = store.unfinished_inbox()
            f.model.push(stream(text("Hello there.")))
            f.telegram.push_text(other, "hello")
            await until_sent(f.telegram, other)
            assert reader in worker_pids()  # answered while the PDF is still being read
            f.telegram.push_text(DM, command)
            await until_sent(f.telegram, DM)
            # The reader (minutes of CPU for this PDF) was killed by the command.
            await until(lambda: reaped(reader), "the reader to be killed")
            assert store.inbox_state(reading.id) == "skipped"
            await idle(daemon)
        assert sent_to(f.telegram, DM) == [confirmation]
        assert sent_to(f.telegram, other) == ["Hello there."]
        assert len(f.model.requests) == 1
