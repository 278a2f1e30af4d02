"""``botd run`` killed (SIGKILL) while its ACP agent answers, then started again: the
interrupted prompt is sent to the agent again (in the same agent session, loaded) and the
answer is posted once, after the one notice. botd runs as a child process with the real
python-telegram-bot against the loopback Bot API; Claude Code's ACP adapter asks the
loopback Anthropic fake. Assertions are on what the chat and the model saw.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

from tests.agent.acp.harness import AGENT_KEY, AgentModel, agent_yaml, said, turn_streams
from tests.conversation.crash import DM, NOTICE, PARAGRAPHS, TOKEN, long_answer
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_process import RunningDaemon, ended, reap, start_daemon
from tests.support.waiting import until


def config(tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI, entry: Path) -> Path:
    path = tmp_path / "botd.yaml"
    path.write_text(
        f"state_dir: {json.dumps(str(tmp_path / 'state'))}\n"
        "health: {enabled: false}\n"
        "shutdown_grace: 1\n" + agent_yaml(entry, model, tmp_path / "home") + "channels:\n"
        "  telegram:\n"
        "    token: ${TELEGRAM_TEST_TOKEN}\n"
        f"    api_base_url: {json.dumps(telegram.base_url)}\n"
        "    dm_policy: open\n",
        encoding="utf-8",
    )
    return path


def sent_count(state: Path) -> int:
    """Pieces botd confirmed sent, once none is between written and confirmed (read beside
    the running daemon, as the crash tests do, only to know when to pull the plug)."""
    db = state / "botd.sqlite3"
    if not db.exists():
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT state, count(*) FROM outbox GROUP BY state").fetchall()
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()
    counts = {str(state): int(count) for state, count in rows}
    return counts.get("sent", 0) if counts.get("pending", 0) == 0 else 0


def texts(telegram: FakeTelegramAPI) -> list[str]:
    return [str(c.params["text"]) for c in telegram.calls_to("sendMessage", ok_only=True)]


async def start(path: Path, tmp_path: Path) -> RunningDaemon:
    return await start_daemon(path, tmp_path, TELEGRAM_TEST_TOKEN=TOKEN)


async def test_sigkill_mid_answer_then_restart_answers_once(
    tmp_path: Path, claude_code_acp: Path
) -> None:
    prompt = "tell me the long story"
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key=AGENT_KEY) as model:
        agent = AgentModel(model, long_answer(delay=0.6), long_answer(delay=0.0))
        path = config(tmp_path, telegram, model, claude_code_acp)
        first = await start(path, tmp_path)
        try:
            telegram.push_text(DM, prompt)
            await until(lambda: sent_count(tmp_path / "state") >= 3, "three paragraphs posted")
            first.kill()  # SIGKILL: no shutdown code runs
            await ended(first)
        finally:
            await reap(first)
        shown_before = len(texts(telegram))
        assert 3 <= shown_before < len(PARAGRAPHS)

        second = await start(path, tmp_path)
        try:
            await until(lambda: all(p in texts(telegram) for p in PARAGRAPHS), "every paragraph")
            second.send_signal(signal.SIGTERM)
            assert await ended(second) == 0
        finally:
            await reap(second)
        shown = texts(telegram)
        served = turn_streams(model)

    for paragraph in PARAGRAPHS:
        assert shown.count(paragraph) == 1, paragraph  # every paragraph, none twice
    assert shown.count(NOTICE) == 1
    assert shown.index(NOTICE) == shown_before  # told before the answer goes on
    # The agent was asked twice, the second time with the interrupted prompt sent again.
    assert len(agent.asked) == 2 == len(served)
    assert prompt in json.dumps(agent.asked[1]["messages"][-1])
    assert prompt in said(agent.asked[1])
