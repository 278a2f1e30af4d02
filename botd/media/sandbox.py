"""Reading files in worker processes: a few at a time, each within a budget.

A PDF's text, an image's pixels and a web page's markdown are made by
``python -m botd.media.worker`` (see there),
not in botd's process: parsing and decoding are CPU work that holds the GIL for seconds,
and on the default thread pool they would make DNS lookups (``loop.getaddrinfo``) and other
tools wait behind them. ``Sandbox`` runs such a job so that

* files users send (PDFs, images) and fetched pages (``web_fetch``'s HTML) have a lane each,
  with slots of its own: a page is never parsed after documents queued before it;
* in a lane, at most ``slots`` workers run at once, at most all but one of them for one
  conversation, and waiting conversations get the freed slots in turn (``slots.FairSlots``):
  one conversation's queued files never hold up another's; further jobs wait for a slot
  (nothing uses the default thread pool);
* a worker gets ``Budget.wall`` seconds from its start and is killed past them;
* the worker limits its own CPU time and memory (``Budget.cpu``, ``Budget.memory``), which
  bounds it even when botd is gone;
* a cancelled job kills its worker at once and waits until it is reaped, so that a reading
  stopped by ``/stop`` burns no more CPU.

Whatever keeps a job from its answer raises ``ReadFailed`` with one phrase for the user.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import signal
import sys
from contextlib import suppress
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any

from .documents import PdfSupportMissing, PdfText
from .images import FittedImage
from .slots import FairSlots
from .worker import EXIT_NO_MEMORY

log = logging.getLogger(__name__)

READ_SLOTS = 2
"""Workers reading files at once: reading is CPU work, and botd shares its cores with the
rest. One conversation holds at most all but one of them."""
PAGE_SLOTS = 2
"""Workers parsing fetched pages at once, besides the files' (most pages take a fraction of
a second; a hostile one cannot hold up another conversation's)."""
COMMAND_SLOTS = 4
"""Commands the ``exec`` tool runs at once (``agent.exec.max_concurrent``): each is bound by
its own CPU and memory budget, and one conversation holds at most all but one of them."""
READ_MEMORY = 1024 * 1024 * 1024
"""The address space a worker may use (1 GiB): room for a 50-megapixel image decoded whole."""


class ReadFailed(Exception):
    """The file could not be read; the message is one short phrase for the user."""


@dataclass(frozen=True)
class Budget:
    """What one reading may take."""

    wall: float
    """Seconds from the worker's start until it is killed."""
    cpu: int
    """Seconds of CPU time the worker may use (whole seconds: the kernel's unit)."""
    memory: int = READ_MEMORY

    @classmethod
    def of(cls, seconds: float) -> Budget:
        """``seconds`` of wall-clock time, and as much CPU time: the CPU limit only binds a
        worker botd can no longer kill (one worker uses one core at most)."""
        return cls(seconds, max(1, math.ceil(seconds)))


class Sandbox:
    """Runs reading jobs in worker processes: files in ``slots`` at once, pages in
    ``page_slots``, each shared fairly between conversations (see the module). It also
    holds the lane the ``exec`` tool's commands take (``commands``, ``command_slots`` at
    once, as fairly shared), which runs them itself in bubblewrap.

    ``conversation`` (each job's) is the key of the conversation the job reads for; jobs
    with none share the key ``""``."""

    def __init__(
        self,
        slots: int = READ_SLOTS,
        page_slots: int = PAGE_SLOTS,
        command_slots: int = COMMAND_SLOTS,
    ) -> None:
        self.files = FairSlots(slots)
        self.pages = FairSlots(page_slots)
        self.commands = FairSlots(command_slots)

    async def pdf_text(self, data: bytes, budget: Budget, *, conversation: str = "") -> PdfText:
        """The text of a PDF (``documents.pdf_text``), read in a worker."""
        if find_spec("pypdfium2") is None:
            raise PdfSupportMissing("PDF support is not installed: pip install 'botd[pdf]'")
        header, payload = await self._run(self.files, conversation, "pdf", data, budget)
        return PdfText(payload.decode(), int(header["pages_read"]), int(header["pages"]))

    async def fit_image(
        self, data: bytes, budget: Budget, *, conversation: str = ""
    ) -> FittedImage:
        """An image the model takes (``images.fit_image``), made in a worker."""
        header, payload = await self._run(self.files, conversation, "image", data, budget)
        return FittedImage(
            str(header["mime_type"]), payload, int(header["width"]), int(header["height"])
        )

    async def page_markdown(
        self, body: bytes, charset: str | None, budget: Budget, *, conversation: str = ""
    ) -> tuple[str, str]:
        """The title and markdown text of an HTML page (``pages.page_markdown``), made in a
        worker (in the pages' lane)."""
        header, payload = await self._run(
            self.pages, conversation, "html", body, budget, charset or ""
        )
        return str(header["title"]), payload.decode()

    async def _run(
        self,
        lane: FairSlots,
        conversation: str,
        job: str,
        data: bytes,
        budget: Budget,
        *option: str,
    ) -> tuple[dict[str, Any], bytes]:
        async with lane.slot(conversation):
            worker = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "botd.media.worker",
                job,
                str(budget.cpu),
                str(budget.memory),
                *option,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                async with asyncio.timeout(budget.wall):
                    out, err = await worker.communicate(data)
            except TimeoutError:
                raise ReadFailed(f"reading it took longer than {budget.wall:g} s") from None
            finally:  # a deadline, a cancellation, any error: the worker does not outlive it
                if worker.returncode is None:
                    with suppress(ProcessLookupError):
                        worker.kill()
                    await worker.wait()
        return _answer(job, worker.returncode, out, err, budget)


def _answer(
    job: str, status: int | None, out: bytes, err: bytes, budget: Budget
) -> tuple[dict[str, Any], bytes]:
    """The header and payload a worker wrote, or why there are none."""
    if status == -signal.SIGXCPU:
        raise ReadFailed(f"reading it needed more than {budget.cpu} s of processing")
    if status == EXIT_NO_MEMORY:
        raise ReadFailed(f"reading it needed more than {budget.memory // 2**20} MB of memory")
    line, _, payload = out.partition(b"\n")
    try:
        header = json.loads(line) if status == 0 else None
    except ValueError:
        header = None
    if not isinstance(header, dict):
        log.warning("the %s reading worker failed (exit status %s): %s", job, status, _tail(err))
        raise ReadFailed("the reader stopped unexpectedly")
    if "missing" in header:
        raise PdfSupportMissing("PDF support is not installed: pip install 'botd[pdf]'")
    if "unreadable" in header:
        log.info("a file was not readable (%s): %s", job, header.get("detail"))
        raise ReadFailed(str(header["unreadable"]))
    return header, payload


def _tail(err: bytes) -> str:
    """The last line a worker wrote to stderr (its error), for the log."""
    lines = err.decode(errors="replace").strip().splitlines()
    return lines[-1][:500] if lines else "nothing on stderr"


__all__ = ["PAGE_SLOTS", "READ_MEMORY", "READ_SLOTS", "Budget", "ReadFailed", "Sandbox"]
