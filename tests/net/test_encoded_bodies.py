"""Compressed bodies from a hostile server: whatever botd downloads for a chat (a page or a
``MEDIA:`` URL through ``botd.net.fetch``, a file someone sent through ``fetch_capped``) is decoded
with bounded work.

A gzip bomb (1 GiB of zeros in about 1 MB) is given up at the cap, and the memory allocated
meanwhile stays within a few MB of the cap; stacked encodings (``gzip, gzip``) are refused
before any of it is read; one layer of gzip or deflate reads as before; an encoding botd does
not decode, and a broken or cut-short stream, are one-line errors; a large body gives the
event loop a turn for every MiB it expands to, so other chats are served meanwhile. All of it
over a loopback file server with the real httpx client.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import pytest

from botd.channels.downloads import fetch_capped
from botd.chat import DownloadError, TooLarge
from botd.net.fetch import Fetched, FetchFailed, fetch
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.files import FileServer
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.compressed import MIB, gzip_bomb, gzip_of_zeros, peak_allocated, stacked_bomb
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
    HANG_GUARD,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)

CAP = MIB
ROOM = 8 * MIB
"""What may be allocated beyond the cap while a bomb is read (buffers, the fake server's)."""
LOOPBACK = ["127.0.0.1"]
PAGE = b"<html><body><h1>Hello</h1>" + b"<p>plain words</p>" * 200 + b"</body></html>"


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


def _files() -> tuple[dict[str, tuple[str, bytes]], dict[str, str]]:
    """The server's files (name -> media type, bytes) and the encodings they are sent with."""
    served = {
        "bomb": (gzip_bomb(), "gzip"),
        "stacked": (stacked_bomb(), "gzip, gzip"),
        "stacked-x": (stacked_bomb(), "x-gzip,gzip"),
        "page.gz": (gzip.compress(PAGE), "gzip"),
        "page.x-gzip": (gzip.compress(PAGE), "x-gzip"),
        "page.zlib": (zlib.compress(PAGE), "deflate"),
        "page.deflate": (_raw_deflate(PAGE), "deflate"),
        "page.members": (gzip.compress(PAGE[:100]) + gzip.compress(PAGE[100:]), "gzip"),
        "page.identity": (PAGE, "identity"),
        "page.br": (b"\x1b\x0f\x00\xf8%\x82\x02\xb1@\x02", "br"),
        "page.zstd": (b"(\xb5/\xfd\x00X\x11\x00\x00hello", "zstd"),
        "page.compress": (b"\x1f\x9d\x90h\x00", "compress"),
        "broken": (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\xff" * 200, "gzip"),
        "cut": (gzip_of_zeros(1)[:400], "gzip"),
        "empty-members": (gzip.compress(b"") * 100_000, "gzip"),
        "zeros": (gzip_of_zeros(32), "gzip"),
    }
    files = {name: ("text/html", body) for name, (body, _) in served.items()}
    return files, {name: encoding for name, (_, encoding) in served.items()}


@pytest.fixture
async def server() -> AsyncIterator[FileServer]:
    files, encodings = _files()
    async with FileServer(files, encodings) as running:
        yield running


async def _failure_and_peak(work: Coroutine[Any, Any, object]) -> tuple[Exception, int]:
    """What ``work`` raised, and the most memory allocated at once while it ran."""
    with peak_allocated() as peak:
        try:
            await work
        except Exception as exc:
            return exc, peak()
    raise AssertionError("the download did not fail")


# --- pages and MEDIA: URLs (botd.net.fetch) -----------------------------------------------------


async def test_a_gzip_bomb_is_given_up_at_the_cap_within_bounded_memory(
    server: FileServer,
) -> None:
    failure, peak = await _failure_and_peak(
        fetch(server.url("bomb"), allow_hosts=LOOPBACK, max_bytes=CAP)
    )
    assert isinstance(failure, FetchFailed)
    assert str(failure) == "the file at 127.0.0.1 is larger than 1,048,576 bytes"
    assert peak < CAP + ROOM


@pytest.mark.parametrize(
    ("name", "shown"), [("stacked", "(gzip, gzip)"), ("stacked-x", "(x-gzip, gzip)")]
)
async def test_stacked_encodings_are_refused_within_bounded_memory(
    server: FileServer, name: str, shown: str
) -> None:
    failure, peak = await _failure_and_peak(
        fetch(server.url(name), allow_hosts=LOOPBACK, max_bytes=CAP)
    )
    assert isinstance(failure, FetchFailed)
    message = str(failure)
    assert message.startswith("cannot read the file at 127.0.0.1: it came with stacked content")
    assert shown in message and "\n" not in message
    assert peak < CAP + ROOM


@pytest.mark.parametrize(
    "name",
    ["page.gz", "page.x-gzip", "page.zlib", "page.deflate", "page.members", "page.identity"],
)
async def test_one_layer_of_gzip_or_deflate_is_decoded(server: FileServer, name: str) -> None:
    page = await fetch(server.url(name), allow_hosts=LOOPBACK, max_bytes=CAP)
    assert page.body == PAGE
    body, content_type = await fetch_capped(server.url(name), CAP)
    assert body == PAGE and content_type.startswith("text/html")
    # Only what botd decodes is asked for.
    assert server.accept_encodings == ["gzip, deflate", "gzip, deflate"]


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress"])
async def test_an_encoding_botd_does_not_decode_is_one_line(
    server: FileServer, encoding: str
) -> None:
    expected = f"it came in the '{encoding}' content encoding, which botd does not decode"
    with pytest.raises(FetchFailed) as failed:
        await fetch(server.url(f"page.{encoding}"), allow_hosts=LOOPBACK, max_bytes=CAP)
    assert str(failed.value) == f"cannot read the file at 127.0.0.1: {expected}"
    with pytest.raises(DownloadError) as download_failed:
        await fetch_capped(server.url(f"page.{encoding}"), CAP)
    assert str(download_failed.value) == expected


@pytest.mark.parametrize(
    ("name", "why"), [("broken", "its gzip data is broken"), ("cut", "its gzip data is cut short")]
)
async def test_a_broken_or_cut_short_gzip_stream_is_one_line(
    server: FileServer, name: str, why: str
) -> None:
    with pytest.raises(FetchFailed) as failed:
        await fetch(server.url(name), allow_hosts=LOOPBACK, max_bytes=2 * MIB)
    assert str(failed.value) == f"cannot read the file at 127.0.0.1: {why}"
    with pytest.raises(DownloadError) as download_failed:
        await fetch_capped(server.url(name), 2 * MIB)
    assert str(download_failed.value) == why


async def test_endless_empty_gzip_members_count_against_the_cap(server: FileServer) -> None:
    # 2 MB of gzip members holding nothing: it never expands, but it is no way past the cap.
    with pytest.raises(FetchFailed, match="larger than 1,048,576 bytes"):
        await fetch(server.url("empty-members"), allow_hosts=LOOPBACK, max_bytes=CAP)
    with pytest.raises(TooLarge):
        await fetch_capped(server.url("empty-members"), CAP)


async def _turns_while(work: Coroutine[Any, Any, object]) -> tuple[object, int]:
    """What ``work`` returned, and how many turns the event loop gave another coroutine
    meanwhile."""
    turns = 0
    done = asyncio.Event()

    async def count_turns() -> None:
        nonlocal turns
        while not done.is_set():
            turns += 1
            await asyncio.sleep(0)

    counting = asyncio.create_task(count_turns())
    try:
        return await work, turns
    finally:
        done.set()
        await counting


async def test_a_large_body_gives_the_loop_a_turn_for_every_mib_it_expands_to(
    server: FileServer,
) -> None:
    """No chat waits while a body is decoded: 32 KB of gzip expands to 32 MiB, and the event
    loop gets a turn at least once per MiB of it."""
    page, turns = await _turns_while(
        fetch(server.url("zeros"), allow_hosts=LOOPBACK, max_bytes=40 * MIB)
    )
    assert isinstance(page, Fetched) and page.body == bytes(32 * MIB)
    assert turns >= 32
    downloaded, turns = await _turns_while(fetch_capped(server.url("zeros"), 40 * MIB))
    assert isinstance(downloaded, tuple) and downloaded[0] == bytes(32 * MIB)
    assert turns >= 32


# --- inbound files (fetch_capped) ---------------------------------------------------------------


async def test_a_gzip_bomb_sent_as_a_file_is_too_big_within_bounded_memory(
    server: FileServer,
) -> None:
    failure, peak = await _failure_and_peak(fetch_capped(server.url("bomb"), CAP))
    assert isinstance(failure, TooLarge)
    assert str(failure) == "it is too big (the limit is 1 MB)"
    assert peak < CAP + ROOM


async def test_a_file_with_stacked_encodings_is_refused_without_its_url(
    server: FileServer,
) -> None:
    failure, peak = await _failure_and_peak(
        fetch_capped(server.url("stacked") + "?token=secret-123", CAP)
    )
    assert isinstance(failure, DownloadError) and not isinstance(failure, TooLarge)
    message = str(failure)
    assert message == "it came with stacked content encodings (gzip, gzip), which botd refuses"
    assert peak < CAP + ROOM


# --- MEDIA: in a reply, end to end --------------------------------------------------------------


async def test_a_media_url_serving_a_gzip_bomb_is_posted_as_its_link(
    tmp_path: Path, server: FileServer
) -> None:
    """The reply's ``MEDIA:`` URL (through ``botd.delivery.media.load``) is given up at the
    cap, with no more memory than a few MB past it while botd answers; the link is posted with
    the text instead, once, and the chat goes on."""
    async with (
        FakeTelegramAPI() as telegram,
        FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model,
    ):
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            telegram_yaml(telegram, "dm_policy: open"),
            "agent:\n  web_fetch:\n    allow_hosts: [127.0.0.1]\n",
            f"media:\n  max_bytes: {CAP}\n",
        )
        ready = lambda d: d.runtime is not None and "telegram" in d.runtime.adapters  # noqa: E731
        async with daemon_running(config, ready=ready):
            url = server.url("bomb")
            model.push(stream(text(f"Here it is.\nMEDIA: {url}")), stream(text("Still here.")))
            with peak_allocated() as peak:
                telegram.push_text(777, "send me the file")
                await telegram.wait_for_call("sendMessage", 1, timeout=HANG_GUARD)
                assert peak() < CAP + ROOM
            telegram.push_text(777, "are you there?")
            await telegram.wait_for_call("sendMessage", 2, timeout=HANG_GUARD)
    assert telegram.uploads == []
    sent = [str(call.params["text"]) for call in telegram.calls_to("sendMessage", ok_only=True)]
    assert sent == [f"Here it is.\n\n{url}", "Still here."]
    assert server.requests == ["bomb"]
    assert json.dumps(sent).count(url) == 1
