"""PDFs are read in worker processes with a budget: real workers, real PDFs.

A read past its time is one line and its worker is gone; a worker past its CPU limit is
ended by the kernel; a cancelled read kills its worker at once; a worker killed from outside
is one line; no more than ``READ_SLOTS``
workers run at once, and DNS lookups still answer while they do; a long PDF is read only
until there is enough text; one chat's queued PDFs leave a slot for another chat's, and a
fetched page is parsed while PDFs fill every file slot; a page of 780,000 one-character text
operations is read whole (how fast, and how long a page waits: ``bench/reading.py``).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal

import pytest

from botd.chat import Attachment
from botd.events import TextContent
from botd.media import Resolved
from botd.media.documents import DOCUMENT_CHAR_LIMIT
from botd.media.sandbox import READ_SLOTS, Budget, ReadFailed, Sandbox
from tests.media.files import dense_text_pdf, minimal_pdf, pdf, showing, slow_pdf
from tests.media.reading import message, reaped, resolver, worker_pids
from tests.support.waiting import HANG_GUARD, until

SLOW = Attachment("document", "slow", "slow.pdf", "application/pdf")


async def test_a_pdf_reads_in_a_worker() -> None:
    media = resolver({"p": minimal_pdf("Quarterly revenue grew")})
    resolved = await media.resolve(message(Attachment("document", "p", "r.pdf")))
    assert resolved == Resolved(blocks=[TextContent(text="[file: r.pdf]\nQuarterly revenue grew")])
    assert worker_pids() == set()


async def test_a_long_pdf_is_read_only_until_there_is_enough_text() -> None:
    pages = [showing(f"Page {n:03d} " + "lorem ipsum " * 80) for n in range(1, 301)]
    media = resolver({"p": pdf(pages)})
    resolved = await media.resolve(message(Attachment("document", "p", "long.pdf")))
    [block] = resolved.blocks
    assert isinstance(block, TextContent)
    body, note = block.text.rsplit("\n", 1)
    assert body.startswith("[file: long.pdf]\nPage 001 lorem ipsum")
    assert len(body) == len("[file: long.pdf]\n") + DOCUMENT_CHAR_LIMIT
    found = re.fullmatch(
        rf"\[… cut: only the first {DOCUMENT_CHAR_LIMIT} characters are shown, "
        r"from pages 1–(\d+) of 300\]",
        note,
    )
    assert found is not None, note
    read = int(found[1])  # just past the limit: each page has about 1000 characters
    assert 40 <= read <= 42


async def test_a_page_of_780_000_text_operations_is_read_whole() -> None:
    data, shown = dense_text_pdf(780_000)
    read = await Sandbox().pdf_text(data, Budget.of(HANG_GUARD))
    assert (read.pages_read, read.pages) == (1, 1)
    assert "".join(read.text.split()) == shown  # every character, in order (lines between)


async def test_a_pdf_past_its_time_is_one_line_and_its_worker_is_gone() -> None:
    media = resolver({"slow": slow_pdf()}, read_timeout=0.5)
    reading = asyncio.create_task(media.resolve(message(SLOW)))
    await until(lambda: bool(worker_pids()), "the reading worker")
    [pid] = worker_pids()
    resolved = await asyncio.wait_for(reading, HANG_GUARD)
    assert resolved.blocks == []
    assert resolved.problems == ["I could not read slow.pdf: reading it took longer than 0.5 s."]
    assert resolved.notes == [
        TextContent(text="[slow.pdf could not be read: reading it took longer than 0.5 s]")
    ]
    assert reaped(pid)


async def test_a_worker_past_its_cpu_limit_is_ended_by_the_kernel() -> None:
    """The CPU limit is the worker's own (it holds even when botd cannot kill it): with the
    wall-clock deadline far away, the kernel ends the worker after a second of CPU."""
    with pytest.raises(ReadFailed, match=r"^reading it needed more than 1 s of processing$"):
        await Sandbox().pdf_text(slow_pdf(), Budget(wall=HANG_GUARD * 4, cpu=1))
    assert worker_pids() == set()


async def test_cancelling_a_read_kills_its_worker_at_once() -> None:
    media = resolver({"slow": slow_pdf()})  # the default budget: far longer than this test
    reading = asyncio.create_task(media.resolve(message(SLOW)))
    await until(lambda: bool(worker_pids()), "the reading worker")
    [pid] = worker_pids()
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert reaped(pid)


async def test_a_worker_killed_from_outside_is_one_line_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    media = resolver({"slow": slow_pdf()})
    reading = asyncio.create_task(media.resolve(message(SLOW)))
    await until(lambda: bool(worker_pids()), "the reading worker")
    [pid] = worker_pids()
    os.kill(pid, signal.SIGKILL)  # as the kernel's out-of-memory killer would
    resolved = await asyncio.wait_for(reading, HANG_GUARD)
    assert resolved.problems == ["I could not read slow.pdf: the reader stopped unexpectedly."]
    assert f"the pdf reading worker failed (exit status -{signal.SIGKILL})" in caplog.text
    assert reaped(pid)


async def test_reads_beyond_the_slots_wait_for_one() -> None:
    count = READ_SLOTS + 3
    media = resolver({"slow": slow_pdf()}, read_timeout=0.5)
    seen: set[int] = set()
    most = 0

    async def watch() -> None:
        nonlocal most
        while True:
            running = worker_pids()
            seen.update(running)
            most = max(most, len(running))
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    try:
        results = await asyncio.wait_for(
            # Each from a chat of its own: one conversation never holds every slot.
            asyncio.gather(*(media.resolve(message(SLOW, chat=str(n))) for n in range(count))),
            HANG_GUARD,
        )
    finally:
        watcher.cancel()
    assert [r.problems for r in results] == [
        ["I could not read slow.pdf: reading it took longer than 0.5 s."]
    ] * count
    assert most == READ_SLOTS
    assert len(seen) == count  # each read had a worker of its own, never more than the slots
    assert all(reaped(pid) for pid in seen)


async def test_dns_lookups_answer_while_every_slot_reads() -> None:
    """More reads than the default thread pool has threads (DNS lookups run there): while
    they are all unfinished and the slots are full, ``getaddrinfo`` still answers."""
    count = min(32, (os.cpu_count() or 1) + 4) + 1  # asyncio's default pool size, and one
    media = resolver({"slow": slow_pdf()})
    reads = [asyncio.create_task(media.resolve(message(SLOW, chat=str(n)))) for n in range(count)]
    try:
        await until(lambda: len(worker_pids()) == READ_SLOTS, "the slots to fill")
        loop = asyncio.get_running_loop()
        addresses = await asyncio.wait_for(loop.getaddrinfo("localhost", 80), HANG_GUARD)
        assert addresses
        assert not any(read.done() for read in reads)
        assert len(worker_pids()) == READ_SLOTS
    finally:
        for read in reads:
            read.cancel()
        await asyncio.gather(*reads, return_exceptions=True)
    assert worker_pids() == set()


async def test_one_chats_queued_pdfs_leave_a_slot_for_another_chats() -> None:
    media = resolver({"slow": slow_pdf(), "p": minimal_pdf("Hello from chat B")})
    queued = [asyncio.create_task(media.resolve(message(SLOW, chat="A"))) for _ in range(6)]
    try:
        await until(lambda: len(worker_pids()) == 1, "chat A's first reading")
        other = message(Attachment("document", "p", "b.pdf"), chat="B")
        resolved = await asyncio.wait_for(media.resolve(other), HANG_GUARD)
        assert resolved.blocks == [TextContent(text="[file: b.pdf]\nHello from chat B")]
        assert not any(read.done() for read in queued)  # A's six are still held or waiting
    finally:
        for read in queued:
            read.cancel()
        await asyncio.gather(*queued, return_exceptions=True)
    assert worker_pids() == set()


async def test_a_page_is_parsed_while_pdfs_fill_every_file_slot() -> None:
    sandbox = Sandbox()
    budget = Budget.of(HANG_GUARD)
    reads = [
        asyncio.create_task(sandbox.pdf_text(slow_pdf(), budget, conversation=f"telegram:{chat}"))
        for chat in ["A"] * 6 + ["C"]
    ]
    try:
        await until(lambda: len(worker_pids()) == READ_SLOTS, "the file slots to fill")
        page = b"<html><head><title>News</title></head><body><p>Fresh</p></body></html>"
        parsed = await asyncio.wait_for(
            sandbox.page_markdown(page, None, budget, conversation="telegram:B"), HANG_GUARD
        )
        assert parsed == ("News", "Fresh")
        assert sandbox.files.waiting() == 5  # A's other five, behind A's first and C's
        assert not any(read.done() for read in reads)
    finally:
        for read in reads:
            read.cancel()
        await asyncio.gather(*reads, return_exceptions=True)
    assert worker_pids() == set()
