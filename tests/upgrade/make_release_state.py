"""Make the state a release leaves behind, for the upgrade tests (``test_upgrade_in_place``).

Run it with a release's own checkout and environment (the daemon it starts is that release's
``botd run``), on both backends:

    python -m tests.upgrade.make_release_state tests/upgrade/releases/<name>

It writes ``state/`` (SQLite: the state dir as the kill left it, the log checkpointed),
``postgres.sql`` (a plain ``pg_dump`` of the database, INSERT statements, no owners) and
``made.json`` (what the test needs to know of the
run: the last Telegram update id the daemon took, the pairing code's user, the texts).

On each backend the daemon runs against the loopback Telegram and Anthropic fakes, with
``dm_policy: pairing``:

1. a user writes and is given a pairing code, approved with ``botd pairing approve``;
2. the user asks the bot to remember a word, and is answered;
3. the user asks for a long answer, and the daemon is killed (SIGKILL) once three of its
   paragraphs were posted and recorded as sent: a run in flight, its inbox row unfinished.

Every row is written by that release's own code, as a user's use of it would leave them.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg

from tests.conversation.crash import DM, PARAGRAPHS, TOKEN, long_answer
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_process import daemon_env, ended, reap, run_botd, start_daemon
from tests.support.pg_server import postgres_bin_dir, running_postgres
from tests.support.waiting import until

API_KEY = "sk-ant-test"
REMEMBER = "please remember the word kiwi"
REMEMBERED = "Noted: kiwi."
LONG = "tell me the long story"


def release_config(
    home: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI, store: str
) -> Path:
    """The config the release ran with (and the upgrade test runs with again): ``store`` is
    the ``store:`` section's body."""
    config = home / "botd.yaml"
    config.write_text(
        f"""state_dir: {json.dumps(str(home / "state"))}
health: {{enabled: false}}
shutdown_grace: 1
model:
  provider: anthropic
  name: claude-test
  api_key: ${{ANTHROPIC_TEST_KEY}}
  base_url: {json.dumps(model.base_url)}
  max_retry_wait: 1
agent:
  block_streaming: {{min_chars: 10, max_chars: 200}}
store:
{store}
channels:
  telegram:
    token: ${{TELEGRAM_TEST_TOKEN}}
    api_base_url: {json.dumps(telegram.base_url)}
    dm_policy: pairing
    command_menu: false
""",
        encoding="utf-8",
    )
    return config


def settled(home: Path, env: dict[str, str], shown: list[str]) -> bool:
    """Whether every post Telegram shows (``shown``) is recorded as sent in the store, read
    beside the running daemon: a post written and not yet confirmed (``pending``) may wait
    for Telegram's pace, but must not be one Telegram has."""
    query = "SELECT text, state FROM outbox"
    rows: list[tuple[object, ...]]
    try:
        if "BOTD_DATABASE_URL" in env:
            with psycopg.connect(env["BOTD_DATABASE_URL"]) as conn:
                rows = conn.execute(query).fetchall()
        else:
            database = home / "state" / "botd.sqlite3"
            reader = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
            try:
                rows = reader.execute(query).fetchall()
            finally:
                reader.close()
    except (sqlite3.OperationalError, psycopg.errors.UndefinedTable):
        return False  # not created yet
    sent = {str(text) for text, state in rows if state == "sent"}
    return all(text in sent for text in shown if text.startswith("Paragraph"))


def texts(telegram: FakeTelegramAPI) -> list[str]:
    return [str(c.params["text"]) for c in telegram.calls_to("sendMessage", ok_only=True)]


async def use_then_kill(home: Path, store: str, env: dict[str, str]) -> dict[str, object]:
    """Steps 1–3 of the module docstring on a fresh state in ``home``; what the test needs."""
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key=API_KEY) as model:
        config = release_config(home, telegram, model, store)
        env = {"ANTHROPIC_TEST_KEY": API_KEY, "TELEGRAM_TEST_TOKEN": TOKEN, **env}
        daemon = await start_daemon(config, home, log_path=None, **env)
        try:
            telegram.push_text(DM, "hello")
            await until(lambda: any("botd pairing approve" in t for t in texts(telegram)), "code")
            code = re.search(r"botd pairing approve telegram (\w+)\)", texts(telegram)[-1])
            assert code is not None, texts(telegram)
            approved = run_botd(
                "pairing",
                "approve",
                "telegram",
                code.group(1),
                "--config",
                str(config),
                env=daemon_env(**env),
            )
            assert approved.returncode == 0, approved.stderr
            model.push(stream(text(REMEMBERED)))
            telegram.push_text(DM, REMEMBER)
            await until(lambda: REMEMBERED in texts(telegram), "the word remembered")
            model.push(long_answer(delay=0.6))
            telegram.push_text(DM, LONG)
            await until(
                lambda: PARAGRAPHS[2] in texts(telegram) and settled(home, env, texts(telegram)),
                "three paragraphs posted",
            )
            daemon.kill()
            await ended(daemon)
        finally:
            await reap(daemon)
        return {"updates_taken": 3, "posted": texts(telegram)}


async def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    made: dict[str, object] = {}
    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)
    (work / "sqlite").mkdir(parents=True)
    made["sqlite"] = await use_then_kill(work / "sqlite", "  backend: sqlite", {})
    # The state dir as the kill left it (the lock file of a process that is gone), the
    # database's write-ahead log checkpointed into it, as SQLite does at the next open: the
    # same rows, in one file a tenth of the size.
    shutil.rmtree(out / "state", ignore_errors=True)
    shutil.copytree(work / "sqlite" / "state", out / "state")
    database = sqlite3.connect(out / "state" / "botd.sqlite3")
    database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    database.execute("PRAGMA journal_mode=DELETE")
    database.close()

    with running_postgres() as server:
        dsn = server.new_database()
        (work / "postgres").mkdir()
        store = "  backend: postgres\n  dsn: ${BOTD_DATABASE_URL}\n  node_id: node-a"
        made["postgres"] = await use_then_kill(work / "postgres", store, {"BOTD_DATABASE_URL": dsn})
        dump = subprocess.run(
            [
                str(postgres_bin_dir() / "pg_dump"),
                "--inserts",
                "--no-owner",
                "--no-privileges",
                dsn,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        (out / "postgres.sql").write_text(dump.stdout, encoding="utf-8")
    shutil.rmtree(work)
    (out / "made.json").write_text(json.dumps(made, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
