"""What the reading tests share: a resolver over files held in memory, and a look at the
reading workers (``python -m botd.media.worker``) this test process has started."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from botd.chat import Attachment, InboundMessage
from botd.config.schema import MediaSection
from botd.media import MediaResolver


def message(*attachments: Attachment, chat: str = "777") -> InboundMessage:
    """A direct message in ``chat`` (its conversation: ``telegram:<chat>``) with these files."""
    return InboundMessage(
        "telegram", chat, chat, "", "1", f"telegram:{chat}", attachments=attachments, is_direct=True
    )


def resolver(files: dict[str, bytes], **settings: Any) -> MediaResolver:
    """A resolver whose downloads are ``files`` by attachment ref, with these media settings."""

    async def download(message: InboundMessage, attachment: Attachment, limit: int) -> bytes:
        return files[attachment.ref]

    section = MediaSection(**settings)
    return MediaResolver(lambda: section, download)


def worker_pids() -> set[int]:
    """The reading workers started by this process that are running now."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and b"botd.media.worker" in command:
            found.add(int(entry.name))
    return found


def reaped(pid: int) -> bool:
    """Whether the process ``pid`` is gone entirely: ended, and not left as a zombie."""
    return not Path(f"/proc/{pid}").exists()
