"""``botd forget --channel --user`` on a stopped botd's SQLite state dir: it removes the
user's rows and their conversations' files, prints counts and never content, and leaves
another user's; it refuses a state dir a running botd holds, and a channel the config does
not have, in one line each."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from botd.chat import InboundMessage
from botd.cli import main
from botd.events import Message
from botd.ops.statelock import StateLock
from botd.store import MemoryOwner
from botd.store.sqlite import SqliteStore
from botd.workspace import workspace_dir

ALICE, BOB = "7070701", "7070702"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "botd.yaml"
    path.write_text(
        f"state_dir: {json.dumps(str(tmp_path / 'state'))}\n"
        "model:\n  provider: anthropic\n  api_key: ${ANTHROPIC_API_KEY}\n"
        "channels:\n  telegram:\n    token: ${TELEGRAM_TOKEN}\n",
        encoding="utf-8",
    )
    return path


async def _seed(state: Path) -> dict[str, str]:
    """A DM each for Alice and Bob (an answered message, a transcript, a memory); the
    session id of each."""
    sessions = {}
    with SqliteStore.open(state) as store:
        for user in (ALICE, BOB):
            key = f"telegram:{user}"
            said = InboundMessage(
                channel="telegram",
                chat_id=user,
                sender_id=user,
                text="my secret plan",
                message_id=f"{user}-1",
                conversation_key=key,
                is_direct=True,
            )
            inbox = await store.accept_inbound("telegram", (f"{user}-1",), said)
            assert inbox is not None
            session = await store.open_session(key)
            store.append_messages_soon(
                session.session_id, [Message(role="user", content="my secret plan")]
            )
            store.finish_inbox([inbox], "answered")
            await store.remember(MemoryOwner("telegram", "user", user), user, "tea", max_items=5)
            sessions[user] = session.session_id
    return sessions


def _rows(database: Path, user: str) -> int:
    conn = sqlite3.connect(database)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return sum(
            1
            for table in tables
            for row in conn.execute(f'SELECT * FROM "{table}"')
            if user in repr(row)
        )
    finally:
        conn.close()


def test_forget_removes_a_users_rows_and_files_and_prints_counts_only(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    sessions = asyncio.run(_seed(state))
    (state / "events").mkdir()
    recording = state / "events" / f"{sessions[ALICE]}-0001.jsonl"
    recording.write_text("{}\n")
    workspace = workspace_dir(state, f"telegram:{ALICE}")
    workspace.mkdir(parents=True)
    (workspace / "plan.txt").write_text("my secret plan")

    assert main(["forget", "--config", str(config), "--channel", "telegram", "--user", ALICE]) == 0

    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"forgot user {ALICE} on telegram ({state}):"
    assert "  memories: 1" in out and "  recordings: 1" in out and "  workspaces: 1" in out
    assert "secret" not in out and "tea" not in out
    assert _rows(state / "botd.sqlite3", ALICE) == 0
    assert _rows(state / "botd.sqlite3", BOB) > 0
    assert not recording.exists() and not workspace.exists()
    # Again: nothing left to remove.
    assert main(["forget", "--config", str(config), "--channel", "telegram", "--user", ALICE]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["  nothing was kept"]


def test_forget_refuses_a_running_botds_state_dir_and_an_unknown_channel(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    asyncio.run(_seed(state))
    lock = StateLock(state)
    lock.acquire()
    try:
        argv = ["forget", "--config", str(config), "--channel", "telegram", "--user", ALICE]
        assert main(argv) == 2
    finally:
        lock.release()
    [line] = capsys.readouterr().err.splitlines()
    assert "in use by a running botd" in line and "stop it first" in line
    assert _rows(state / "botd.sqlite3", ALICE) > 0

    argv = ["forget", "--config", str(config), "--channel", "slack", "--user", ALICE]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == "botd: unknown channel 'slack'; configured: telegram"


def test_a_conversation_named_goes_too_and_one_of_another_channel_is_refused(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"

    async def old_dm() -> None:
        with SqliteStore.open(state) as store:  # a DM whose inbox rows were pruned
            session = await store.open_session("telegram:dm-of-long-ago")
            store.append_messages_soon(session.session_id, [Message(role="user", content="x")])

    asyncio.run(old_dm())
    argv = ["forget", "--config", str(config), "--channel", "telegram", "--user", ALICE]
    assert main([*argv, "--conversation", "slack:D1"]) == 2
    assert "is not a conversation of telegram" in capsys.readouterr().err
    assert main([*argv, "--conversation", "telegram:dm-of-long-ago"]) == 0
    assert "  sessions: 1" in capsys.readouterr().out
