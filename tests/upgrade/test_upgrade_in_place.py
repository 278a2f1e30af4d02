"""A state from the previous release, upgraded in place by this one, loses nothing (issue 37).

``releases/<commit>/`` holds what the previous release left (``make_release_state``, run with
that release's checkout): on SQLite the state dir's database, on PostgreSQL a dump of the
database, each after a user was paired, was answered once, and had a long answer cut by a
SIGKILL after three paragraphs. This release starts on it (migrating the schema if it
changed), with the same config and new loopback fakes that go on from where the old ones
were, and:

- finishes the cut answer once, after the notice, with no paragraph twice;
- asks Telegram for updates from the saved offset, not from the start;
- answers the paired user (no new pairing code), with the earlier exchange in the model's
  request: the conversation, its history and the pairing are all kept.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conversation.crash import DM, NOTICE, PARAGRAPHS, TOKEN, long_answer
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_process import reap, start_daemon, stop_daemon
from tests.support.waiting import until
from tests.upgrade.make_release_state import API_KEY, REMEMBER, release_config, texts

PREVIOUS = Path(__file__).parent / "releases" / "d4a7fdf"
"""The previous release's state (the commit that made it)."""
MADE: dict[str, Any] = json.loads((PREVIOUS / "made.json").read_text(encoding="utf-8"))


def restore_dump(dsn: str) -> None:
    """The previous release's database, into the empty database ``dsn``."""
    dump = (PREVIOUS / "postgres.sql").read_text(encoding="utf-8").splitlines()
    # pg_dump's ``\restrict`` lines are psql's commands, not SQL.
    sql = "\n".join(line for line in dump if not line.startswith("\\"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.encode())


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_the_previous_releases_state_is_upgraded_in_place_with_nothing_lost(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    made = MADE[backend]
    env = {"ANTHROPIC_TEST_KEY": API_KEY, "TELEGRAM_TEST_TOKEN": TOKEN}
    if backend == "sqlite":
        shutil.copytree(PREVIOUS / "state", tmp_path / "state")
        store = "  backend: sqlite"
    else:
        dsn: str = request.getfixturevalue("postgres_dsn")
        restore_dump(dsn)
        store = "  backend: postgres\n  dsn: ${BOTD_DATABASE_URL}\n  node_id: node-a"
        env["BOTD_DATABASE_URL"] = dsn
    before: list[str] = made["posted"]
    cut_after = sum(paragraph in before for paragraph in PARAGRAPHS)
    assert 3 <= cut_after < len(PARAGRAPHS)

    async with (
        FakeTelegramAPI(TOKEN, updates_before=made["updates_taken"]) as telegram,
        FakeAnthropicAPI(api_key=API_KEY) as model,
    ):
        config = release_config(tmp_path, telegram, model, store)
        model.push(long_answer(delay=0.0), stream(text("The word was kiwi.")))
        daemon = await start_daemon(config, tmp_path, log_path=None, **env)
        try:
            await until(lambda: PARAGRAPHS[-1] in texts(telegram), "the cut answer finished")
            telegram.push_text(DM, "which word was it?")
            await until(lambda: "The word was kiwi." in texts(telegram), "the next answer")
            assert await stop_daemon(daemon) == 0
        finally:
            await reap(daemon)

    after = texts(telegram)
    # The cut answer: told once, then the paragraphs not posted before, each once.
    assert after[0] == NOTICE
    assert after[1 : 1 + len(PARAGRAPHS) - cut_after] == PARAGRAPHS[cut_after:]
    assert after[1 + len(PARAGRAPHS) - cut_after :] == ["The word was kiwi."]
    # Polling went on from the saved offset: nothing asked for again from the start.
    first_poll = telegram.calls_to("getUpdates")[0]
    assert int(first_poll.params["offset"]) == made["updates_taken"] + 1
    # The paired user's conversation, history and all: the earlier exchange was in the
    # request, and the user was not asked to pair again.
    last = json.dumps(model.requests[-1].body["messages"])
    assert REMEMBER in last and "Noted: kiwi." in last
    assert not any("pairing" in line for line in after)
