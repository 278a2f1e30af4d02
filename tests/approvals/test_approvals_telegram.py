"""Approvals over Telegram, end to end: botd in-process with the real python-telegram-bot
against the loopback Bot API and the real anthropic SDK against the fake Messages API; the
model calls a gated tool (``schedule``), the request is posted with an inline keyboard, and a
press of one of its buttons (a ``callback_query`` update, answered with
``answerCallbackQuery``) decides it."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from botd.approvals import NOT_AN_APPROVER, NOT_AN_OWNER
from botd.inbound.router import NOT_ALLOWED, NOT_OFFERED
from tests.approvals.harness import (
    CALL_ID,
    RAN,
    approvals_yaml,
    model_calls_the_tool,
    request_posted,
    states,
    tool_result,
)
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, tool_use
from tests.fakes.telegram_api import FakeTelegramAPI, user
from tests.support.chat import DM, Chat, chatting
from tests.support.daemon_inprocess import ANTHROPIC_KEY
from tests.support.waiting import until

ALICE = user(DM, "Alice")
GROUP = -100123
MALLORY = user(4343, "Mallory")
"""In the group, allowed to talk to the bot, not an approver."""
EVE = user(5555, "Eve")
"""In the group, not allowed to talk to the bot."""


@asynccontextmanager
async def botd(
    tmp_path: Path,
    telegram: FakeTelegramAPI,
    model: FakeAnthropicAPI,
    *lines: str,
    telegram_options: Sequence[str] = ("dm_policy: open",),
) -> AsyncIterator[Chat]:
    async with chatting(
        tmp_path,
        telegram,
        model=model,
        telegram_options=telegram_options,
        sections=[approvals_yaml(*lines)],
    ) as chat:
        yield chat


class Request:
    """The bot's message asking to approve the call, in ``chat_id``, as Telegram shows it."""

    def __init__(self, telegram: FakeTelegramAPI, chat_id: int, message_id: int) -> None:
        self.telegram, self.chat_id, self.message_id = telegram, chat_id, message_id
        self.posted = dict(telegram.sent_message(chat_id, message_id))
        """The message as posted (a client not yet refreshed still shows its buttons)."""
        self.data = {
            button["text"]: button["callback_data"]
            for row in telegram.keyboard(chat_id, message_id)
            for button in row
        }
        """Each button's callback data by its label, as posted."""

    @property
    def text(self) -> str:
        return str(self.telegram.sent_message(self.chat_id, self.message_id)["text"])

    @property
    def keyboard(self) -> list[list[dict[str, Any]]]:
        return self.telegram.keyboard(self.chat_id, self.message_id)

    def press(self, label: str, sender: dict[str, Any]) -> dict[str, Any]:
        """``sender`` presses the button ``label`` (as posted); the callback query."""
        return self.telegram.push_press(self.posted, self.data[label], sender=sender)

    async def answer(self, query: dict[str, Any]) -> str | None:
        """What the press was answered (``answerCallbackQuery``'s text), once answered."""
        answered = self.telegram.answered_queries
        await until(lambda: query["id"] in answered, f"press {query['id']} answered")
        return answered[query["id"]]


async def asked(tmp_path: Path, telegram: FakeTelegramAPI, chat_id: int = DM) -> Request:
    """The request, once posted (the run waits on it)."""
    message_id = await until(lambda: request_posted(tmp_path / "state"), "the request posted")
    assert message_id is not None
    request = Request(telegram, chat_id, int(message_id))
    assert list(request.data) == ["Approve", "Deny"]
    return request


async def answers_to(telegram: FakeTelegramAPI, query: dict[str, Any], count: int) -> list[Any]:
    """The texts of the ``count`` calls to ``answerCallbackQuery`` botd made for ``query``
    (a second answer to one query is refused, but the call is seen), once made."""

    def made() -> list[Any]:
        calls = telegram.calls_to("answerCallbackQuery")
        return [c.params.get("text") for c in calls if c.params["callback_query_id"] == query["id"]]

    await until(lambda: len(made()) >= count, f"{count} answers to press {query['id']}")
    return made()


async def test_approved_the_tool_runs_and_the_request_shows_who_without_buttons(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        async with botd(tmp_path, telegram, model) as chat:
            await chat.send("what is scheduled?")
            request = await asked(tmp_path, telegram)
            assert request.text == 'Approve schedule(action="list")?'
            assert len(model.requests) == 1  # the run waits: the tool has not run
            query = request.press("Approve", ALICE)
            telegram.push_update({"callback_query": query})  # Telegram delivers it again
            assert await request.answer(query) == "Approved."
            chat.read += 1  # the request
            assert await chat.reply() == "All done."
            assert tool_result(model) == RAN
            assert request.text == 'Approve schedule(action="list")?\nApproved by Alice.'
            assert request.keyboard == []
            # The redelivery was acknowledged silently: it reached no handler.
            assert await answers_to(telegram, query, 2) == ["Approved.", None]
            assert states(tmp_path / "state") == ["approved"]


async def test_denied_the_model_is_told_who_denied_it_and_a_stale_press_changes_nothing(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        async with botd(tmp_path, telegram, model) as chat:
            await chat.send("what is scheduled?")
            request = await asked(tmp_path, telegram)
            assert await request.answer(request.press("Deny", ALICE)) == "Denied."
            chat.read += 1
            assert await chat.reply() == "All done."
            is_error, said = tool_result(model)
            assert is_error and "denied by Alice" in said
            assert request.text.endswith("\nDenied by Alice.")
            assert request.keyboard == []
            # A client still showing the old keyboard presses Approve.
            late = request.press("Approve", ALICE)
            assert await request.answer(late) == "Already denied by Alice."
            assert states(tmp_path / "state") == ["denied"]
            assert len(model.requests) == 2


async def test_not_decided_in_time_the_model_is_told_and_the_request_says_expired(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        async with botd(tmp_path, telegram, model, "timeout: 1") as chat:
            await chat.send("what is scheduled?")
            request = await asked(tmp_path, telegram)
            chat.read += 1
            assert await chat.reply() == "All done."
            is_error, said = tool_result(model)
            assert is_error and "not approved in time" in said
            assert request.text.endswith("\nExpired: not approved in time.")
            assert request.keyboard == []
            late = request.press("Approve", ALICE)
            assert await request.answer(late) == "This request has expired."
            assert states(tmp_path / "state") == ["expired"]


async def test_in_a_group_only_an_approver_decides(tmp_path: Path) -> None:
    """Someone the group's ``allow_from`` leaves out is refused by the access policy, a
    member who is no approver is told so; neither changes anything; the approver decides."""
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        options = [
            "groups:",
            f'  "{GROUP}": {{require_mention: false, allow_from: ["{DM}", "4343"]}}',
        ]
        async with botd(
            tmp_path, telegram, model, f'approvers: ["{DM}"]', telegram_options=options
        ):
            telegram.push_text(GROUP, "what is scheduled?", sender=ALICE)
            request = await asked(tmp_path, telegram, GROUP)
            assert await request.answer(request.press("Approve", EVE)) == NOT_ALLOWED
            assert await request.answer(request.press("Approve", MALLORY)) == NOT_AN_APPROVER
            assert await request.answer(request.press("Deny", MALLORY)) == NOT_AN_APPROVER
            assert states(tmp_path / "state") == ["pending"]
            assert len(model.requests) == 1
            assert [b["text"] for b in request.keyboard[0]] == ["Approve", "Deny"]
            assert await request.answer(request.press("Approve", ALICE)) == "Approved."
            await until(lambda: "All done." in telegram.visible(GROUP), "the answer")
            assert tool_result(model) == RAN
            assert request.text.endswith("\nApproved by Alice.")
            assert request.keyboard == []


async def test_a_request_pending_across_a_restart_is_not_asked_again_and_then_counts(
    tmp_path: Path,
) -> None:
    """botd stops while the run waits; the next botd resumes the run with the same call,
    finds its request (no second one is posted) and a press of its buttons decides it."""
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        async with botd(tmp_path, telegram, model) as chat:
            await chat.send("what is scheduled?")
            request = await asked(tmp_path, telegram)
        assert states(tmp_path / "state") == ["pending"]
        async with botd(tmp_path, telegram, model) as chat:
            assert await request.answer(request.press("Approve", ALICE)) == "Approved."
            assert await chat.reply() == "All done."
            assert len(chat.shown()) == 2  # the request (decided) and the answer
            assert request.text.endswith("\nApproved by Alice.")
            assert request.keyboard == []
            assert tool_result(model) == RAN


async def test_a_request_that_expired_while_botd_was_down_tells_the_model_so(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        async with botd(tmp_path, telegram, model) as chat:
            await chat.send("what is scheduled?")
            request = await asked(tmp_path, telegram)
        # Its time runs out while botd is down.
        with sqlite3.connect(tmp_path / "state" / "botd.sqlite3") as conn:
            conn.execute("UPDATE approvals SET deadline = deadline - 3600")
        async with botd(tmp_path, telegram, model) as chat:
            assert await chat.reply() == "All done."
            is_error, said = tool_result(model)
            assert is_error and "not approved in time" in said
            assert len(chat.shown()) == 2
            assert request.text.endswith("\nExpired: not approved in time.")
            assert request.keyboard == []


async def test_a_request_pressed_from_another_chat_decides_nothing(tmp_path: Path) -> None:
    """Eve may DM the bot but is not on the group's ``allow_from``; she copies the group
    request's Approve data and presses it on the bot's answer in her own DM: refused there,
    the request stays pending and the tool does not run, until Alice approves in the group."""
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model.push(
            stream(tool_use(CALL_ID, "schedule", '{"action": "list"}'), stop_reason="tool_use"),
            stream(text("Hello Eve.")),
            stream(text("All done.")),
        )
        options = [
            "dm_policy: open",
            "groups:",
            f'  "{GROUP}": {{require_mention: false, allow_from: ["{DM}"]}}',
        ]
        async with botd(tmp_path, telegram, model, telegram_options=options):
            telegram.push_text(GROUP, "what is scheduled?", sender=ALICE)
            request = await asked(tmp_path, telegram, GROUP)
            eve_dm = int(EVE["id"])
            telegram.push_text(eve_dm, "hi", sender=EVE)
            await until(lambda: telegram.visible(eve_dm) == ["Hello Eve."], "Eve's answer")
            [answer_id] = [m for (c, m) in telegram._sent if c == eve_dm]
            answer = telegram.sent_message(eve_dm, answer_id)
            forged = telegram.push_press(answer, request.data["Approve"], sender=EVE)
            assert await request.answer(forged) == NOT_OFFERED
            assert states(tmp_path / "state") == ["pending"]
            assert len(model.requests) == 2  # the group's run still waits
            assert [b["text"] for b in request.keyboard[0]] == ["Approve", "Deny"]
            assert request.text == 'Approve schedule(action="list")?'
            assert await request.answer(request.press("Approve", ALICE)) == "Approved."
            await until(lambda: "All done." in telegram.visible(GROUP), "the answer")
            assert tool_result(model) == RAN
            assert request.text.endswith("\nApproved by Alice.")


async def test_without_approvers_the_channel_s_owners_decide(tmp_path: Path) -> None:
    """``approvers`` unset and the channel has owners: a member's press is told only the
    owners decide, and changes nothing; the owner's press decides."""
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        options = [f'owners: ["{DM}"]', "groups:", f'  "{GROUP}": {{require_mention: false}}']
        async with botd(tmp_path, telegram, model, telegram_options=options):
            telegram.push_text(GROUP, "what is scheduled?", sender=MALLORY)
            request = await asked(tmp_path, telegram, GROUP)
            assert await request.answer(request.press("Approve", MALLORY)) == NOT_AN_OWNER
            assert states(tmp_path / "state") == ["pending"]
            assert await request.answer(request.press("Approve", ALICE)) == "Approved."
            await until(lambda: "All done." in telegram.visible(GROUP), "the answer")
