"""A NUL (U+0000) from a chat, from the model or from a tool, through a running botd on each
store backend: PostgreSQL refuses a NUL in any text column, SQLite keeps one. On both the
message is answered once, every later message after it, in order, and what the chat and the
model see has U+FFFD where the NUL was (the text every store keeps).

The daemon runs in-process with the real python-telegram-bot and anthropic SDKs over the
loopback fakes, whose JSON escapes the NUL (``\\u0000``) as a platform's or a model's would.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from aiohttp import web

from botd.inbound.kept_context import CONTEXT_HEADER
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, tool_use
from tests.fakes.loopback import serve
from tests.fakes.telegram_api import BOT_USERNAME, FakeTelegramAPI, user
from tests.support.chat import Chat, chatting
from tests.support.waiting import until

NUL = "\x00"
GROUP = -100777
ALICE, BOB = 111, 222


@dataclass(frozen=True)
class Backend:
    section: str
    """The config's ``store:`` section ("": the default, SQLite in the state dir)."""
    dsn: str | None = None
    """The PostgreSQL database (None: SQLite)."""


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each store backend (PostgreSQL: a database of the test's own)."""
    if request.param == "sqlite":
        return Backend("")
    dsn: str = request.getfixturevalue("migrated_postgres_dsn")
    return Backend(f"store:\n  backend: postgres\n  dsn: {json.dumps(dsn)}\n", dsn)


@asynccontextmanager
async def botd(
    tmp_path: Path, backend: Backend, *, agent: str = ""
) -> AsyncIterator[tuple[Chat, FakeAnthropicAPI]]:
    """botd with Telegram (open DMs and groups) and the anthropic SDK over the fakes: the
    DM with it, and the model it asks."""
    async with (
        FakeTelegramAPI() as telegram,
        FakeAnthropicAPI(api_key="sk-ant-test") as model,
        chatting(
            tmp_path,
            telegram,
            model=model,
            telegram_options=("dm_policy: open", "group_policy: open"),
            sections=[section for section in (backend.section, agent) if section],
        ) as dm,
    ):
        yield dm, model


def _prompts(model: FakeAnthropicAPI) -> list[str]:
    """Every request's messages as JSON text (non-ASCII as is: U+FFFD reads as itself)."""
    return [json.dumps(r.body["messages"], ensure_ascii=False) for r in model.requests]


def _conversation_epochs(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT epoch FROM leases WHERE name LIKE 'conversation:%'").fetchall()
    return [int(row[0]) for row in rows]


async def test_a_nul_in_a_group_line_not_for_the_bot_holds_up_no_later_message(
    tmp_path: Path, backend: Backend
) -> None:
    async with botd(tmp_path, backend) as (dm, model):
        telegram = dm.telegram
        model.push(stream(text("Hi Bob.")), stream(text("Noon it is.")))
        # Kept as context for the group's next prompt; the bot is not addressed.
        telegram.push_text(GROUP, f"lunch{NUL} at noon?", sender=user(ALICE, "Al\x00ice"))
        await dm.send("hello")  # another user's DM, after it
        assert await dm.reply() == "Hi Bob."
        telegram.push_text(GROUP, f"@{BOT_USERNAME} so when?", sender=user(BOB, "Bob"))
        await until(lambda: telegram.visible(GROUP), "the answer in the group")
        assert telegram.visible(GROUP) == ["Noon it is."]
    assert len(model.requests) == 2
    group_prompt = _prompts(model)[1]
    assert CONTEXT_HEADER in group_prompt
    assert f"[Al\ufffdice (id {ALICE})] lunch\ufffd at noon?" in group_prompt
    assert "\\u0000" not in group_prompt


async def test_a_nul_in_a_dm_is_answered_once(tmp_path: Path, backend: Backend) -> None:
    async with botd(tmp_path, backend) as (dm, model):
        model.push(stream(text("Got it.")), stream(text("Again.")))
        await dm.send(f"bad{NUL}text")
        assert await dm.reply() == "Got it."
        await dm.send("still there?")
        assert await dm.reply() == "Again."
        assert dm.unread() == []
    assert len(model.requests) == 2
    assert "bad\ufffdtext" in _prompts(model)[0]
    assert all("\\u0000" not in prompt for prompt in _prompts(model))


async def test_a_model_reply_holding_a_nul_is_posted_once_as_u_fffd(
    tmp_path: Path, backend: Backend
) -> None:
    async with botd(tmp_path, backend) as (dm, model):
        model.push(stream(text(f"Here{NUL} it is.")), stream(text("Next answer.")))
        await dm.send("show me")
        assert await dm.reply() == "Here\ufffd it is."
        await dm.send("and then?")
        assert await dm.reply() == "Next answer."
        assert dm.unread() == []
        if backend.dsn is not None:
            # The conversation's lease was claimed once and never given up.
            assert _conversation_epochs(backend.dsn) == [1]
    assert len(model.requests) == 2  # asked once per message
    # The model's own turn comes back to it as the store keeps it.
    assert "Here\ufffd it is." in _prompts(model)[1]


async def test_a_tool_result_holding_a_nul_reaches_the_model_as_u_fffd(
    tmp_path: Path, backend: Backend
) -> None:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text=f"first{NUL}second", content_type="text/plain")

    app = web.Application()
    app.router.add_get("/notes", page)
    runner, port = await serve(app)
    agent = 'agent:\n  tools: [web_fetch]\n  web_fetch: {allow_hosts: ["127.0.0.1"]}\n'
    try:
        async with botd(tmp_path, backend, agent=agent) as (dm, model):
            url = f"http://127.0.0.1:{port}/notes"
            call = tool_use("w1", "web_fetch", json.dumps({"url": url}))
            model.push(
                stream(call, stop_reason="tool_use"),
                stream(text("Read it.")),
                stream(text("Still here.")),
            )
            await dm.send("read the notes")
            assert await dm.reply() == "Read it."
            await dm.send("and now?")
            assert await dm.reply() == "Still here."
    finally:
        await runner.cleanup()
    assert len(model.requests) == 3
    after_tool, later = _prompts(model)[1:]
    assert "first\ufffdsecond" in after_tool
    assert "first\ufffdsecond" in later  # the transcript read back keeps it so
    assert all("\\u0000" not in prompt for prompt in _prompts(model))
