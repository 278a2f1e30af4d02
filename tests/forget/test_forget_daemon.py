"""``/forget me`` end to end: the real daemon, Telegram's SDK over the loopback Bot API, the
Anthropic SDK over its fake. Alice and Bob each talk to the bot in a DM and in a group, and
Alice has it remember something; her ``/forget me`` is answered with a button that only she
can confirm (Bob's forged press of it changes nothing); her press is answered with the counts
removed, and the database, read directly, holds no row naming her while Bob's rows stay; her
workspace is gone. Her next message starts afresh. Bob's typed ``/forget me confirm`` does
the same at once."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

from botd.app import App
from botd.workspace import workspace_dir
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, tool_use
from tests.fakes.telegram_api import FakeTelegramAPI, user
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)
from tests.support.waiting import guarded, until

ALICE, BOB = 9090901, 9090902
GROUP = -9090903


def _config(tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI) -> str:
    agent = "agent:\n  system_prompt: You are botd.\n  tools: [message, remember]\n"
    channel = telegram_yaml(
        telegram,
        "poll_timeout: 1",
        "dm_policy: open",
        "require_mention: false",
        "groups:",
        f'  "{GROUP}": {{}}',
    )
    return config_yaml(tmp_path, anthropic_yaml(model), agent, channel)


async def _say(daemon: App, telegram: FakeTelegramAPI, chat: int, said: str, sender: int) -> str:
    before = len(telegram.visible(chat))
    kind = "private" if chat > 0 else "supergroup"
    name = "Alice" if sender == ALICE else "Bob"
    telegram.push_text(chat, said, sender=user(sender, name), chat_type=kind)
    await until(lambda: len(telegram.visible(chat)) > before, f"an answer to {said!r}")
    assert daemon.runtime is not None
    await guarded(daemon.runtime.dispatcher.drain(), f"the run of {said!r} to end")
    return telegram.visible(chat)[-1]


def naming(rows: list[str], person: int) -> list[str]:
    """The rows that name ``person``'s id (as a whole number, not inside a time)."""
    pattern = re.compile(rf"(?<![\d.]){person}(?!\d)")
    return [row for row in rows if pattern.search(row)]


def rows_of(database: Path) -> dict[str, list[str]]:
    conn = sqlite3.connect(database)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: [repr(r) for r in conn.execute(f'SELECT * FROM "{t}"')] for t in tables}
    finally:
        conn.close()


async def test_forget_me_is_confirmed_by_its_asker_and_leaves_no_row_of_theirs(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI
) -> None:
    state = tmp_path / "state"
    async with daemon_running(_config(tmp_path, telegram, model)) as bot:
        remember = tool_use("t1", "remember", json.dumps({"text": "tea"}))
        model.push(stream(remember, stop_reason="tool_use"))
        model.push(stream(text("Noted.")))
        await _say(bot, telegram, ALICE, "remember I like tea", ALICE)
        for chat, sender in ((BOB, BOB), (GROUP, ALICE), (GROUP, BOB)):
            model.push(stream(text("Hello.")))
            await _say(bot, telegram, chat, "hello there", sender)
        workspace = workspace_dir(state, f"telegram:{ALICE}")
        workspace.mkdir(parents=True)
        (workspace / "notes.txt").write_text("hers")

        asked = await _say(bot, telegram, ALICE, "/forget me", ALICE)
        assert asked.startswith("This removes what I keep about you here")
        [message_id] = [m for (c, m) in telegram._sent if c == ALICE][-1:]
        posted = telegram.sent_message(ALICE, message_id)
        [[forget, keep]] = telegram.keyboard(ALICE, message_id)
        assert (forget["text"], keep["text"]) == ("Forget me", "Keep")

        forged = telegram.push_press(posted, forget["callback_data"], sender=user(BOB, "Bob"))
        await until(lambda: forged["id"] in telegram.answered_queries, "the forged press")
        assert telegram.answered_queries[forged["id"]] == (
            "Only the person who asked can confirm this."
        )
        assert naming(rows_of(state / "botd.sqlite3")["memories"], ALICE)

        press = telegram.push_press(posted, forget["callback_data"], sender=user(ALICE, "Alice"))
        await until(lambda: press["id"] in telegram.answered_queries, "Alice's press")
        said = telegram.answered_queries[press["id"]]
        assert said is not None and said.startswith("Done: removed ")
        assert "memories 1" in said and "workspaces 1" in said and "tea" not in said

        tables = rows_of(state / "botd.sqlite3")
        assert {t: naming(rows, ALICE) for t, rows in tables.items() if naming(rows, ALICE)} == {}
        assert naming(tables["messages"], BOB) and naming(tables["inbox"], BOB)
        assert not workspace.exists()

        # Her next message starts a conversation afresh: nothing of before is sent.
        first = len(model.requests)
        model.push(stream(text("Hello again.")))
        assert await _say(bot, telegram, ALICE, "hi", ALICE) == "Hello again."
        assert "remember I like tea" not in json.dumps(model.requests[first].body)

        # Typed, where a platform has no buttons (or without waiting for them): at once.
        done = await _say(bot, telegram, BOB, "/forget me confirm", BOB)
        assert done.startswith("Done: removed ") and "hello" not in done
        tables = rows_of(state / "botd.sqlite3")
        assert {t: naming(rows, BOB) for t, rows in tables.items() if naming(rows, BOB)} == {}
