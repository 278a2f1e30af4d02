"""botd on ``store.backend: postgres`` end to end: the daemon in-process answering a
Telegram DM, and ``botd run`` SIGKILLed mid-answer and started again answering once. The
database is the tests' own throwaway server (``postgres_dsn``); the assertions are about what
the platform and the model saw and what the inbox holds, the database is otherwise read only
to know when to pull the plug. A scheduled job's run is cut and resumed the same way."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from tests.conversation.crash import DM, NOTICE, PARAGRAPHS, TOKEN, crash_config, long_answer
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.chat import chatting
from tests.support.daemon_process import HANG_GUARD, RunningDaemon, ended, reap, start_daemon

# A short lease TTL: on postgres a restarted node takes its conversations back by claiming
# them once the killed process's leases ran out.
STORE = "store:\n  backend: postgres\n  dsn: ${BOTD_DATABASE_URL}\n  lease_ttl: 2\n"


async def test_the_daemon_on_postgres_answers_a_telegram_dm(
    tmp_path: Path, postgres_dsn: str
) -> None:
    section = STORE.replace("${BOTD_DATABASE_URL}", postgres_dsn)
    async with (
        FakeTelegramAPI() as telegram,
        chatting(tmp_path, telegram, sections=[section]) as dm,
    ):
        await dm.send("hello there")
        assert await dm.reply() == "You said: hello there"
    with psycopg.connect(postgres_dsn) as conn:
        rows = conn.execute("SELECT seq, state FROM inbox").fetchall()
        sent = conn.execute("SELECT state FROM outbox").fetchall()
    assert rows == [(1, "answered")] and sent == [("sent",)]
    assert not (tmp_path / "state" / "botd.sqlite3").exists()


async def _start(config: Path, cwd: Path, dsn: str) -> RunningDaemon:
    return await start_daemon(
        config,
        cwd,
        ANTHROPIC_TEST_KEY="sk-ant-test",
        TELEGRAM_TEST_TOKEN=TOKEN,
        BOTD_DATABASE_URL=dsn,
    )


def _sent_and_pending(dsn: str) -> tuple[int, int]:
    try:
        with psycopg.connect(dsn) as conn:
            rows = conn.execute("SELECT state, count(*) FROM outbox GROUP BY state").fetchall()
    except psycopg.errors.UndefinedTable:
        return 0, 0  # not migrated yet
    counts = {str(state): int(count) for state, count in rows}
    return counts.get("sent", 0), counts.get("pending", 0)


async def _until(condition: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(HANG_GUARD):
        while not condition():
            await asyncio.sleep(0.05)  # polling another process's database: no event to await


def _texts(telegram: FakeTelegramAPI) -> list[str]:
    return [str(c.params["text"]) for c in telegram.calls_to("sendMessage", ok_only=True)]


async def test_botd_on_postgres_killed_mid_answer_answers_once_after_a_restart(
    tmp_path: Path, postgres_dsn: str
) -> None:
    prompt = "tell me the long story"
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = crash_config(tmp_path, tmp_path / "state", telegram, model, STORE)
        model.push(long_answer(delay=0.6))
        first = await _start(config, tmp_path, postgres_dsn)
        try:
            telegram.push_text(DM, prompt)

            def three_settled() -> bool:
                sent, pending = _sent_and_pending(postgres_dsn)
                return sent >= 3 and pending == 0

            await _until(three_settled, "three paragraphs posted")
            first.kill()  # SIGKILL: no shutdown code runs
            await ended(first)
        finally:
            await reap(first)
        shown_before = len(_texts(telegram))
        assert 3 <= shown_before < len(PARAGRAPHS)

        model.push(long_answer(delay=0.0))
        second = await _start(config, tmp_path, postgres_dsn)
        try:
            await _until(lambda: all(p in _texts(telegram) for p in PARAGRAPHS), "every paragraph")
            second.send_signal(signal.SIGTERM)
            assert await ended(second) == 0
        finally:
            await reap(second)
        texts = _texts(telegram)

    for paragraph in PARAGRAPHS:
        assert texts.count(paragraph) == 1, paragraph  # every paragraph, none twice
    assert texts.count(NOTICE) == 1 and texts.index(NOTICE) == shown_before
    assert len(model.requests) == 2
    assert json.dumps(model.requests[1].body["messages"]).count(prompt) == 1


def _inbox(dsn: str) -> list[tuple[str, str]]:
    """Each inbox row's conversation and state, in arrival order."""
    try:
        with psycopg.connect(dsn) as conn:
            rows = conn.execute("SELECT conversation_key, state FROM inbox ORDER BY id").fetchall()
    except psycopg.errors.UndefinedTable:
        return []  # not migrated yet
    return [(str(key), str(state)) for key, state in rows]


async def test_a_job_run_cut_by_a_kill_on_postgres_is_answered_once_and_not_fired_again(
    tmp_path: Path, postgres_dsn: str
) -> None:
    # A configured one-shot job that is due at start: its run is the long answer, cut by a
    # SIGKILL; the restart (still within the job's grace) resumes that run and fires no other.
    at = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    job = (
        "scheduler:\n  jobs:\n    - id: story\n"
        f"      at: {json.dumps(at)}\n      prompt: tell me the long story\n"
        f"      deliver_to: {{channel: telegram, chat: {DM}}}\n"
    )
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = crash_config(tmp_path, tmp_path / "state", telegram, model, STORE + job)
        model.push(long_answer(delay=0.6))
        first = await _start(config, tmp_path, postgres_dsn)
        try:

            def three_settled() -> bool:
                sent, pending = _sent_and_pending(postgres_dsn)
                return sent >= 3 and pending == 0

            await _until(three_settled, "three paragraphs of the job's answer posted")
            first.kill()  # SIGKILL: no shutdown code runs
            await ended(first)
        finally:
            await reap(first)
        shown_before = len(_texts(telegram))
        assert 3 <= shown_before < len(PARAGRAPHS)
        assert _inbox(postgres_dsn) == [("cron:story", "running")]

        model.push(long_answer(delay=0.0))
        second = await _start(config, tmp_path, postgres_dsn)
        try:
            await _until(lambda: all(p in _texts(telegram) for p in PARAGRAPHS), "every paragraph")
            await _until(lambda: _inbox(postgres_dsn)[0][1] == "answered", "the run answered")
            second.send_signal(signal.SIGTERM)
            assert await ended(second) == 0
        finally:
            await reap(second)
        texts = _texts(telegram)

    for paragraph in PARAGRAPHS:
        assert texts.count(paragraph) == 1, paragraph  # every paragraph, none twice
    assert texts.count(NOTICE) == 1 and texts.index(NOTICE) == shown_before
    assert _inbox(postgres_dsn) == [("cron:story", "answered")]  # the job fired once
    assert len(model.requests) == 2
