"""botd's record of the buttons under its messages, read and changed beside a running daemon
(as an operator could): how old the buttons of a message are, to botd."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from tests.support.waiting import until


def _shift(state_dir: Path, chat_id: str, message_id: str, seconds: float) -> int:
    with sqlite3.connect(state_dir / "botd.sqlite3") as conn:
        return conn.execute(
            "UPDATE button_messages SET posted_at = posted_at - ? "
            "WHERE chat_id = ? AND message_id = ?",
            (seconds, chat_id, message_id),
        ).rowcount


async def aged(state_dir: Path, message: dict[str, Any], seconds: float) -> None:
    """Make botd's record of the buttons under the Telegram ``message`` ``seconds`` older
    (once the record is written: it is committed with the daemon's next group commit)."""
    chat_id, message_id = str(message["chat"]["id"]), str(message["message_id"])
    await until(lambda: _shift(state_dir, chat_id, message_id, seconds), "the buttons recorded")
