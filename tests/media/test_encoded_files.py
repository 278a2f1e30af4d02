"""A file sent on Telegram whose download is a compression bomb, end to end: the real
python-telegram-bot SDK inside botd fetches it from the loopback Telegram fake, which serves
it with a ``Content-Encoding``.

One layer of gzip (1 GiB of zeros in about 1 MB) is given up at ``media.max_bytes`` with no
more memory than a few MB past it; two layers (``gzip, gzip``) are refused before any of it
is read. Each gets its one "could not read" line, and the conversation goes on.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from tests.fakes.anthropic_api import stream, text
from tests.media.telegram_botd import DM, botd
from tests.support.compressed import MIB, gzip_bomb, peak_allocated, stacked_bomb
from tests.support.daemon_inprocess import HANG_GUARD

LIMIT = 2_000_000  # over the bomb's compressed size, so the download is tried
ROOM = 8 * MIB


async def test_compressed_bombs_get_one_line_each_and_the_chat_goes_on(tmp_path: Path) -> None:
    async with botd(tmp_path, max_bytes=LIMIT) as b:
        with peak_allocated() as peak:
            b.telegram.push_file(
                DM,
                "document",
                gzip_bomb(),
                file_name="zeros.txt",
                mime_type="text/plain",
                content_encoding="gzip",
            )
            await b.telegram.wait_for_call("sendMessage", 1, timeout=HANG_GUARD)
            b.telegram.push_file(
                DM,
                "document",
                stacked_bomb(),
                file_name="layers.txt",
                mime_type="text/plain",
                content_encoding="gzip, gzip",
            )
            await b.telegram.wait_for_call("sendMessage", 2, timeout=HANG_GUARD)
            assert peak() < LIMIT + ROOM
        b.model.push(stream(text("Still here.")))
        b.telegram.push_text(DM, "are you there?")
        await b.telegram.wait_for_call("sendMessage", 3, timeout=HANG_GUARD)
        await b.idle()
    too_big, stacked, answer = b.sent()
    assert too_big == "I could not read zeros.txt: it is too big (the limit is 1.9 MB)."
    assert stacked == (
        "I could not read layers.txt: it came with stacked content encodings (gzip, gzip), "
        "which botd refuses."
    )
    assert answer == "Still here."
    assert len(b.telegram.file_downloads) == 2
    assert len(b.model.requests) == 1  # files with no caption: the lines were the answers


async def test_a_gzipped_text_file_still_reaches_the_model(tmp_path: Path) -> None:
    async with botd(tmp_path) as b:
        b.model.push(stream(text("Read it.")))
        notes = b"line one\nline two\n" * 50
        b.telegram.push_file(
            DM,
            "document",
            gzip.compress(notes),
            file_name="notes.txt",
            mime_type="text/plain",
            content_encoding="gzip",
        )
        await b.telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        await b.idle()
    assert b.sent() == ["Read it."]
    content = b.user_content()
    assert "[file: notes.txt]" in "\n".join(block["text"] for block in content)
    assert "line two" in "\n".join(block["text"] for block in content)
