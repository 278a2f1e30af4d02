"""The parts of media-in on their own: the inbox keeps attachments, the capped download,
the resolver's decisions, the user turn it builds, and the image cap of the history."""

from __future__ import annotations

import base64
import logging
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web

from botd.channels.downloads import fetch_capped
from botd.chat import Attachment, DownloadError, InboundMessage, Quote, TooLarge
from botd.config.schema import MediaSection
from botd.conversation.prompt import media_user_turn, user_turn
from botd.events import ImageContent, Message, TextContent
from botd.media import MediaResolver
from botd.media.history import EARLIER_IMAGE, with_recent_images
from botd.store.sqlite.inbox import inbound_from_json, inbound_json
from tests.fakes.loopback import serve
from tests.media.files import JPEG, PNG, ZIP, minimal_pdf


def _message(text: str = "", *attachments: Attachment) -> InboundMessage:
    """A direct message (chat 777 is its sender's), so its turn carries no speaker label."""
    return InboundMessage(
        "telegram", "777", "777", text, "1", "telegram:777", attachments=attachments, is_direct=True
    )


def test_the_inbox_keeps_a_message_s_attachments() -> None:
    photo = Attachment("image", "file-1", "photo.jpg", "image/jpeg", 1234)
    voice = Attachment("voice", "file-2", mime_type="audio/ogg")
    message = _message("caption", photo, voice)
    again = inbound_from_json(inbound_json(message), inbox_id=5)
    assert again.attachments == (photo, voice)
    assert again.text == "caption" and again.inbox_id == 5
    # A row written before attachments existed still reads.
    assert inbound_from_json(inbound_json(_message("plain"))).attachments == ()


# --- the capped download ------------------------------------------------------------------------


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()  # no Content-Length: the size shows only while reading
        await response.prepare(request)
        for _ in range(100):
            await response.write(b"x" * 1000)
        await response.write_eof()
        return response

    async def lying(request: web.Request) -> web.Response:
        return web.Response(body=b"y" * 5000, headers={"Content-Length": "5000"})

    async def broken(request: web.Request) -> web.Response:
        return web.Response(status=503, text="down")

    app = web.Application()
    app.router.add_get("/chunked", chunked)
    app.router.add_get("/big", lying)
    app.router.add_get("/broken", broken)
    runner, port = await serve(app)
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_the_download_stops_reading_past_the_limit(server: str) -> None:
    with pytest.raises(TooLarge):
        await fetch_capped(f"{server}/chunked", 10_000)
    body, _ = await fetch_capped(f"{server}/chunked", 100_000)
    assert len(body) == 100_000


async def test_a_declared_length_over_the_limit_is_refused(server: str) -> None:
    with pytest.raises(TooLarge) as caught:
        await fetch_capped(f"{server}/big", 1000)
    assert caught.value.size == 5000


async def test_a_5xx_or_no_server_is_a_download_error(server: str) -> None:
    with pytest.raises(DownloadError, match="HTTP 503"):
        await fetch_capped(f"{server}/broken", 1000)
    with pytest.raises(DownloadError):
        await fetch_capped("http://127.0.0.1:9/none", 1000)


# --- the resolver -------------------------------------------------------------------------------


def _resolver(files: dict[str, bytes], **settings: Any) -> MediaResolver:
    async def download(message: InboundMessage, attachment: Attachment, limit: int) -> bytes:
        return files[attachment.ref]

    section = MediaSection(**settings)
    return MediaResolver(lambda: section, download)


async def test_a_batch_gets_each_message_s_files_before_its_text() -> None:
    media = _resolver({"a": PNG, "b": b"hello"})
    batch = [
        _message("first"),
        _message("look", Attachment("image", "a")),
        _message("", Attachment("document", "b", "hi.md")),
    ]
    turn, problems = await media_user_turn(batch, media)
    assert problems == []
    assert turn is not None and isinstance(turn.content, list)
    first, image, rest = turn.content
    assert first == TextContent(text="first")
    assert isinstance(image, ImageContent) and base64.b64decode(image.data) == PNG
    assert rest == TextContent(text="look\n\n[file: hi.md]\nhello")


async def test_a_file_without_a_caption_replying_to_a_message_has_the_quote_first() -> None:
    media = _resolver({"a": PNG})
    quoted = Quote("Bob (id 7)", "send me the chart")
    photo = replace(_message("", Attachment("image", "a")), quoted=quoted)
    turn, problems = await media_user_turn([photo], media)
    assert problems == [] and turn is not None and isinstance(turn.content, list)
    head, image = turn.content
    assert head == TextContent(text="[In reply to Bob (id 7):]\n> send me the chart")
    assert isinstance(image, ImageContent)


async def test_text_only_batches_are_the_turn_they_always_were() -> None:
    batch = [_message("a"), _message("b")]
    turn, problems = await media_user_turn(batch, _resolver({}))
    assert turn == user_turn(batch) and problems == []


async def test_an_image_declared_but_not_readable_is_refused() -> None:
    media = _resolver({"h": b"\x00\x00\x00\x18ftypheic"})
    turn, problems = await media_user_turn(
        [_message("", Attachment("image", "h", "x.heic", "image/heic"))], media
    )
    assert turn is None
    assert problems == ["I could not read x.heic: only JPEG, PNG, GIF and WebP images can be read."]


async def test_a_video_is_refused_without_a_download() -> None:
    media = _resolver({})  # a download would fail with KeyError
    turn, problems = await media_user_turn(
        [_message("see", Attachment("video", "v", "clip.mp4", "video/mp4"))], media
    )
    assert turn is not None and problems == [
        "I could not read clip.mp4: videos are not supported (video/mp4)."
    ]
    assert isinstance(turn.content, list)
    assert "[clip.mp4 could not be read:" in turn.content[0].text  # type: ignore[union-attr]


async def test_a_long_document_is_cut_and_says_so() -> None:
    media = _resolver({"t": b"a" * 50_000})
    turn, _ = await media_user_turn([_message("", Attachment("document", "t", "a.txt"))], media)
    assert turn is not None and isinstance(turn.content, list)
    text = turn.content[0].text  # type: ignore[union-attr]
    assert text.endswith("[… cut: 10000 more characters not shown]")


async def test_an_unexpected_failure_is_one_line_not_a_crash(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(message: InboundMessage, attachment: Attachment, limit: int) -> bytes:
        raise RuntimeError("bug")

    media = MediaResolver(MediaSection, broken)
    turn, problems = await media_user_turn(
        [_message("", Attachment("document", "x", "x.txt"))], media
    )
    assert turn is None
    assert problems == ["I could not read x.txt: something went wrong."]


async def test_a_pdf_without_the_extra_is_one_line_and_the_log_names_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pypdfium2", None)  # what an import finds when it is missing
    media = _resolver({"p": minimal_pdf("Hello")})
    with caplog.at_level(logging.WARNING):
        turn, problems = await media_user_turn(
            [_message("", Attachment("document", "p", "r.pdf", "application/pdf"))], media
        )
    assert turn is None
    assert problems == ["I could not read r.pdf: PDF reading is not installed here."]
    assert "pip install 'botd[pdf]'" in caplog.text


async def test_a_binary_file_of_unknown_type_is_unsupported() -> None:
    media = _resolver({"z": ZIP})
    _, problems = await media_user_turn([_message("", Attachment("document", "z", "a"))], media)
    assert problems == ["I could not read a: this type of file is not supported (unknown)."]


# --- images in the history ----------------------------------------------------------------------


def _image_turn(n: int) -> Message:
    data = base64.b64encode(JPEG + bytes([n])).decode()
    return Message(
        role="user",
        content=[ImageContent(mime_type="image/jpeg", data=data), TextContent(text=f"#{n}")],
    )


def test_only_the_newest_images_are_sent_again() -> None:
    history = [_image_turn(n) for n in range(6)]
    kept = with_recent_images(history, keep=4)
    shown = [isinstance(m.content[0], ImageContent) for m in kept]  # type: ignore[index]
    assert shown == [False, False, True, True, True, True]
    assert kept[0].content[0] == TextContent(text=EARLIER_IMAGE)  # type: ignore[index]
    assert kept[0].content[1] == TextContent(text="#0")  # type: ignore[index]
    assert kept[5] is history[5]  # unchanged messages are not copied
    assert isinstance(history[0].content[0], ImageContent)  # type: ignore[index]


# --- config and the Slack token guard -----------------------------------------------------------


def test_media_config_defaults_and_the_transcription_key_is_a_secret() -> None:
    from botd.config import parse_config, secret_values

    assert parse_config("", {}).media == MediaSection()
    assert MediaSection().max_bytes == 20 * 1024 * 1024
    config = parse_config("media:\n  transcription:\n    api_key: sk-tr-123\n", {})
    assert config.media.transcription is not None
    assert config.media.transcription.model == "whisper-1"
    assert "sk-tr-123" in secret_values(config)


async def test_slack_sends_its_token_only_to_slack_s_file_hosts() -> None:
    from botd.channels.slack.inbound_media import slack_download

    elsewhere = Attachment("image", "http://127.0.0.1:9/steal", "x.png")
    with pytest.raises(DownloadError, match="not on Slack's file server"):
        await slack_download(elsewhere, 1000, bot_token="xoxb-secret", api_hosts=["slack.com"])
