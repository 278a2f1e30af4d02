"""The files of editors' prompts, kept in the state dir as long as the message naming them.

An image, an audio clip or an embedded binary resource of a ``session/prompt`` is written to
``<state_dir>/acp/prompt-files/<ref>`` (the directory 0700, each file 0600, synced) before
the message is handed to the router, and the message's attachment names it by that ``ref``:
the durable inbox keeps the reference, never the bytes, as it keeps a Telegram photo's
``file_id``, and the run reads the file when it starts (``AcpAdapter.download``), after a
restart too. A file is removed once it is older than the inbox keeps a finished message
(``DEFAULT_INBOUND_RETENTION_SECONDS``, see ``botd.store.pruner``), when the channel starts
and then daily: it lives as long as the message that names it.

Without a state dir (``channels.acp.socket`` set and no state dir: tests, tools), the files
are kept in memory until read, and a restart loses them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from ...chat import DownloadError, TooLarge
from ...store import DEFAULT_INBOUND_RETENTION_SECONDS
from ...store.pruner import PRUNE_INTERVAL_SECONDS

log = logging.getLogger(__name__)

__all__ = ["PromptFiles"]

_REF = re.compile(r"acp-file-[0-9a-f]{32}")
"""What a ref this module made looks like (nothing else is read as a path)."""


class PromptFiles:
    """See the module docstring."""

    def __init__(self, directory: Path | None, *, clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        self._clock = clock
        self._in_memory: dict[str, bytes] = {}

    async def keep(self, data: bytes) -> str:
        """Write ``data`` (durably, before the message naming it is accepted); its ref."""
        ref = f"acp-file-{uuid.uuid4().hex}"
        if self.directory is None:
            self._in_memory[ref] = data
        else:
            await asyncio.to_thread(self._write, self.directory, ref, data)
        return ref

    async def read(self, ref: str, max_bytes: int) -> bytes:
        """The bytes of ``ref``; ``TooLarge`` over ``max_bytes``, ``DownloadError`` when gone."""
        if self.directory is None:
            data = self._in_memory.pop(ref, None)
        elif _REF.fullmatch(ref):
            data = await asyncio.to_thread(self._read, self.directory / ref, max_bytes)
        else:
            data = None
        if data is None:
            raise DownloadError("the file is gone (removed, or sent before botd restarted)")
        if len(data) > max_bytes:
            raise TooLarge(len(data), max_bytes)
        return data

    def prune(self, older_than: float) -> int:
        """Remove the files older than ``older_than`` seconds; how many were removed."""
        if self.directory is None or not self.directory.is_dir():
            return 0
        cut = self._clock() - older_than
        removed = 0
        for path in self.directory.iterdir():
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_mtime < cut:
                    path.unlink()
                    removed += 1
        return removed

    async def pruning(self) -> None:
        """Remove the files older than a finished message is kept, now and then daily
        (a task the adapter owns)."""
        while True:
            try:
                removed = await asyncio.to_thread(self.prune, DEFAULT_INBOUND_RETENTION_SECONDS)
            except OSError as exc:
                log.warning("acp: removing old prompt files failed: %s", exc)
            else:
                if removed:
                    log.info("acp: %d old prompt file(s) removed", removed)
            await asyncio.sleep(PRUNE_INTERVAL_SECONDS)

    @staticmethod
    def _write(directory: Path, ref: str, data: bytes) -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = directory / f".{ref}.partial"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb", closefd=False) as file:
                file.write(data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, directory / ref)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    @staticmethod
    def _read(path: Path, max_bytes: int) -> bytes | None:
        try:
            with path.open("rb") as file:
                size = os.fstat(file.fileno()).st_size
                if size > max_bytes:
                    raise TooLarge(size, max_bytes)
                return file.read()
        except FileNotFoundError:
            return None
