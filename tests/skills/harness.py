"""What the skills tests share: the documented example skill, and a skill folder written for a
test."""

from __future__ import annotations

from pathlib import Path

from botd.chat import InboundMessage

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "skills"
"""The directory of the example skill the docs show (``release-notes``)."""


def write_skill(root: Path, folder: str, front: str, body: str = "Do the thing.\n") -> Path:
    """A skill folder ``folder`` under ``root`` whose SKILL.md has front matter ``front``."""
    skill = root / folder
    skill.mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text(f"---\n{front}---\n{body}", encoding="utf-8")
    return skill


def in_group(text: str, chat: str, n: int, topic: str | None = None) -> InboundMessage:
    """Message ``n`` saying ``text`` in Telegram group ``chat`` (in its forum topic ``topic``)."""
    key = f"telegram:{chat}" + ("" if topic is None else f":topic:{topic}")
    return InboundMessage(
        channel="telegram",
        chat_id=chat,
        thread_id=topic,
        sender_id="42",
        sender_name="Ann",
        text=text,
        message_id=f"{chat}-{n}",
        conversation_key=key,
    )
