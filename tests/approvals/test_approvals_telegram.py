"""Approvals over Telegram, end to end: botd in-process with the real python-telegram-bot
against the loopback Bot API and the real anthropic SDK against the fake Messages API; the
model calls a gated tool (``schedule``), the request is posted in the DM, a press decides it."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from botd.approvals import NOT_AN_APPROVER
from botd.chat import InboundMessage
from tests.approvals.harness import (
    RAN,
    approvals_yaml,
    model_calls_the_tool,
    press,
    press_message,
    requests_kept,
    tool_result,
)
from tests.chat import DM, Chat, chatting
from tests.daemon_inprocess import ANTHROPIC_KEY
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.waiting import until


@asynccontextmanager
async def dm(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI, *lines: str
) -> AsyncIterator[Chat]:
    async with chatting(tmp_path, telegram, model=model, sections=[approvals_yaml(*lines)]) as c:
        yield c


def value(tmp_path: Path, verb: str) -> str:
    (request,) = requests_kept(tmp_path / "state")
    return f"approval:{request['token']}:{verb}"


async def asked(chat: Chat) -> str:
    """The request, once posted (the run waits on it)."""
    await until(lambda: len(chat.shown()) > chat.read, "the request to approve in the DM")
    chat.read += 1
    return chat.shown()[chat.read - 1]


def by(sender: int, name: str, tmp_path: Path, verb: str, callback: str = "cb1") -> InboundMessage:
    """A press of the request's ``verb`` button by ``sender``."""
    return press_message("telegram", str(DM), str(sender), name, value(tmp_path, verb), callback)


async def test_approved_the_tool_runs_and_the_model_reads_its_result(tmp_path: Path) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        async with dm(tmp_path, telegram, model) as chat:
            await chat.send("what is scheduled?")
            request = await asked(chat)
            assert request.startswith('Approve schedule(action="list")?')
            assert len(model.requests) == 1  # the run waits: the tool has not run
            assert await press(chat.daemon, by(DM, "Alice", tmp_path, "approve")) == "Approved."
            assert await chat.reply() == "All done."
            assert tool_result(model) == RAN
            assert chat.shown()[0].startswith(
                'Approve schedule(action="list")?\nApproved by Alice.'
            )


async def test_denied_the_model_is_told_who_denied_it_and_the_tool_does_not_run(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        async with dm(tmp_path, telegram, model) as chat:
            await chat.send("what is scheduled?")
            await asked(chat)
            assert await press(chat.daemon, by(DM, "Bob", tmp_path, "deny")) == "Denied."
            assert await chat.reply() == "All done."
            is_error, said = tool_result(model)
            assert is_error and "denied by Bob" in said
            assert chat.shown()[0].endswith("Denied by Bob.")
            # The same press again (a redelivery the router let through) changes nothing.
            again = await press(chat.daemon, by(DM, "Bob", tmp_path, "approve", "cb2"))
            assert again == "Already denied by Bob."


async def test_not_decided_in_time_the_model_is_told_and_the_request_says_expired(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        async with dm(tmp_path, telegram, model, "timeout: 1") as chat:
            await chat.send("what is scheduled?")
            await asked(chat)
            assert await chat.reply() == "All done."
            is_error, said = tool_result(model)
            assert is_error and "not approved in time" in said
            assert chat.shown()[0].endswith("Expired: not approved in time.")
            late = await press(chat.daemon, by(DM, "Alice", tmp_path, "approve"))
            assert late == "This request has expired."


async def test_a_press_by_someone_not_an_approver_changes_nothing(tmp_path: Path) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        async with dm(tmp_path, telegram, model, "approvers: [4242]") as chat:
            await chat.send("what is scheduled?")
            await asked(chat)
            refused = await press(chat.daemon, by(DM, "Mallory", tmp_path, "approve"))
            assert refused == NOT_AN_APPROVER
            (request,) = requests_kept(tmp_path / "state")
            assert request["state"] == "pending"
            assert len(model.requests) == 1
            approved = await press(chat.daemon, by(4242, "Alice", tmp_path, "approve", "cb2"))
            assert approved == "Approved."
            assert await chat.reply() == "All done."
            assert tool_result(model) == RAN


async def test_a_request_pending_across_a_restart_is_not_asked_again_and_then_counts(
    tmp_path: Path,
) -> None:
    """botd stops while the run waits; the next botd resumes the run with the same call,
    finds its request (no second one is posted) and the press decides it."""
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        async with dm(tmp_path, telegram, model) as chat:
            await chat.send("what is scheduled?")
            await asked(chat)
        assert [r["state"] for r in requests_kept(tmp_path / "state")] == ["pending"]
        async with dm(tmp_path, telegram, model) as chat:
            assert await press(chat.daemon, by(DM, "Alice", tmp_path, "approve")) == "Approved."
            assert await chat.reply() == "All done."
            assert len(chat.shown()) == 2  # the request (decided) and the answer
            assert chat.shown()[0].endswith("Approved by Alice.")
            assert tool_result(model) == RAN


async def test_a_request_that_expired_while_botd_was_down_tells_the_model_so(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        async with dm(tmp_path, telegram, model) as chat:
            await chat.send("what is scheduled?")
            await asked(chat)
        # Its time runs out while botd is down.
        with sqlite3.connect(tmp_path / "state" / "botd.sqlite3") as conn:
            conn.execute("UPDATE approvals SET deadline = deadline - 3600")
        async with dm(tmp_path, telegram, model) as chat:
            assert await chat.reply() == "All done."
            is_error, said = tool_result(model)
            assert is_error and "not approved in time" in said
            assert len(chat.shown()) == 2
            assert chat.shown()[0].endswith("Expired: not approved in time.")
