"""Buttons on Telegram, end to end: the daemon with the real python-telegram-bot and anthropic
SDKs over the loopback fakes. The agent's ``[[buttons: ...]]`` directive and the message
tool's ``buttons`` field become an inline keyboard; a press comes back to the model once as
the presser's message, however often Telegram delivers it, and is answered
(``answerCallbackQuery``); a refused presser, expired buttons and a second press are told so.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from botd.inbound.router import ALREADY_ANSWERED, EXPIRED, NOT_ALLOWED, NOT_OFFERED
from tests.buttons.journal import aged
from tests.buttons.prompts import prompts
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, tool_use
from tests.fakes.telegram_api import FakeTelegramAPI, user
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)
from tests.support.waiting import until

DM = 777
GROUP = -100123
ALICE = user(DM, "Alice")
EVE = user(4343, "Eve")


async def with_buttons(telegram: FakeTelegramAPI, chat: int) -> dict[str, Any]:
    """The bot's first message in ``chat`` that has an inline keyboard."""

    def found() -> dict[str, Any] | None:
        for call in telegram.calls_to("sendMessage", ok_only=True):
            if int(call.params["chat_id"]) == chat and call.params.get("reply_markup"):
                message_id = max(m for (c, m) in telegram._sent if c == chat)
                return telegram.sent_message(chat, message_id)
        return None

    message = await until(found, "a message with buttons")
    assert message is not None
    return message


async def answered(telegram: FakeTelegramAPI, query: dict[str, Any]) -> str | None:
    await until(lambda: query["id"] in telegram.answered_queries, "the press answered")
    return telegram.answered_queries[query["id"]]


async def test_a_directive_shows_buttons_and_a_press_reaches_the_model_once(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(
            stream(text("Deploy now?\n[[buttons: Yes | No || Later]]")),
            stream(text("Deploying.")),
        )
        config = config_yaml(
            tmp_path, anthropic_yaml(model), telegram_yaml(telegram, "dm_policy: open")
        )
        async with daemon_running(config) as daemon:
            telegram.push_text(DM, "deploy?", sender=ALICE)
            message = await with_buttons(telegram, DM)
            assert message["text"] == "Deploy now?"  # the directive is no part of the text
            labels = [
                [b["text"] for b in row] for row in telegram.keyboard(DM, message["message_id"])
            ]
            assert labels == [["Yes", "No"], ["Later"]]
            assert "callback_query" in telegram.allowed_updates
            yes = telegram.keyboard(DM, message["message_id"])[0][0]["callback_data"]

            query = telegram.push_press(message, yes, sender=ALICE)
            telegram.push_update({"callback_query": query})  # Telegram delivers it again
            assert await answered(telegram, query) is None  # a silent ack
            await until(lambda: telegram.visible(DM)[-1:] == ["Deploying."], "the answer")
            # The buttons gave way to the choice made, and who made it.
            assert telegram.keyboard(DM, message["message_id"]) == [
                [{"text": "✔ Yes (Alice)", "callback_data": "botd:chosen"}]
            ]
            # Someone pressing again (the shown choice, or a copy of the old keyboard).
            again = telegram.push_press(message, yes, sender=ALICE)
            assert await answered(telegram, again) == ALREADY_ANSWERED
            assert daemon.runtime is not None
            await daemon.runtime.dispatcher.drain()
    assert prompts(model) == ["deploy?", "(pressed: Yes)"]
    assert len(telegram.answered_queries) == 2  # the redelivery was not answered twice


async def test_the_message_tool_sends_buttons(tmp_path: Path) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        call = {"action": "send", "message": "Pick a size", "buttons": [["S", "M", "L"]]}
        model.push(
            stream(tool_use("t1", "message", json.dumps(call)), stop_reason="tool_use"),
            stream(text("NO_REPLY")),
        )
        config = config_yaml(
            tmp_path, anthropic_yaml(model), telegram_yaml(telegram, "dm_policy: open")
        )
        async with daemon_running(config):
            telegram.push_text(DM, "sizes?", sender=ALICE)
            message = await with_buttons(telegram, DM)
            assert message["text"] == "Pick a size"
            keyboard = telegram.keyboard(DM, message["message_id"])
            assert [[b["text"] for b in row] for row in keyboard] == [["S", "M", "L"]]
            await until(lambda: len(model.requests) == 2, "the tool's result read")
    result = model.requests[1].body["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and not result.get("is_error")


async def test_the_message_tool_refuses_buttons_no_platform_can_show(tmp_path: Path) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        call = {"action": "send", "message": "Pick", "buttons": [["x" * 76]]}
        model.push(
            stream(tool_use("t1", "message", json.dumps(call)), stop_reason="tool_use"),
            stream(text("Sorry.")),
        )
        config = config_yaml(
            tmp_path, anthropic_yaml(model), telegram_yaml(telegram, "dm_policy: open")
        )
        async with daemon_running(config):
            telegram.push_text(DM, "pick?", sender=ALICE)
            await until(lambda: telegram.visible(DM) == ["Sorry."], "the answer")
    result = model.requests[1].body["messages"][-1]["content"][0]
    assert result["is_error"]
    assert not any(c.params.get("reply_markup") for c in telegram.calls_to("sendMessage"))


async def test_a_presser_the_policy_refuses_is_told_and_never_reaches_the_model(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(stream(text("Ship it?\n[[buttons: Ship | Wait]]")))
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            telegram_yaml(
                telegram,
                "groups:",
                f'  "{GROUP}": {{require_mention: false, allow_from: ["{DM}"]}}',
            ),
        )
        async with daemon_running(config) as daemon:
            telegram.push_text(GROUP, "ship?", sender=ALICE)
            message = await with_buttons(telegram, GROUP)
            ship = telegram.keyboard(GROUP, message["message_id"])[0][0]["callback_data"]
            query = telegram.push_press(message, ship, sender=EVE)
            assert await answered(telegram, query) == NOT_ALLOWED
            # The buttons stay for someone allowed.
            assert len(telegram.keyboard(GROUP, message["message_id"])[0]) == 2
            assert daemon.runtime is not None
            await daemon.runtime.dispatcher.drain()
    assert prompts(model) == ["[Alice (id 777)] ship?"]


async def test_old_buttons_and_buttons_from_before_a_new_session_expire(tmp_path: Path) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(stream(text("Which?\n[[buttons: A | B]]")))
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            telegram_yaml(telegram, "dm_policy: open", "buttons_expire_after: 3600"),
        )
        async with daemon_running(config) as daemon:
            telegram.push_text(DM, "which?", sender=ALICE)
            message = await with_buttons(telegram, DM)
            a = telegram.keyboard(DM, message["message_id"])[0][0]["callback_data"]
            # Two hours on, by botd's own record of when it posted them.
            await aged(tmp_path / "state", message, 7200)
            query = telegram.push_press(message, a, sender=ALICE)
            assert await answered(telegram, query) == EXPIRED
            await aged(tmp_path / "state", message, -7200)
            # A /new since: the buttons belong to the conversation that was.
            telegram.push_text(DM, "/new", sender=ALICE)
            await until(lambda: len(telegram.visible(DM)) >= 2, "/new answered")
            query = telegram.push_press(message, a, sender=ALICE)
            assert await answered(telegram, query) == EXPIRED
            assert daemon.runtime is not None
            await daemon.runtime.dispatcher.drain()
    assert prompts(model) == ["which?"]


async def test_a_press_within_the_second_after_new_is_expired(tmp_path: Path) -> None:
    """Telegram dates its messages in whole seconds: the buttons, ``/new`` and the press
    within one second of each other still tell which session the buttons belong to."""
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(stream(text("Which?\n[[buttons: A | B]]")))
        config = config_yaml(
            tmp_path, anthropic_yaml(model), telegram_yaml(telegram, "dm_policy: open")
        )
        async with daemon_running(config) as daemon:
            telegram.push_text(DM, "which?", sender=ALICE)
            message = await with_buttons(telegram, DM)
            a = telegram.keyboard(DM, message["message_id"])[0][0]["callback_data"]
            telegram.push_text(DM, "/new", sender=ALICE)
            await until(lambda: len(telegram.visible(DM)) >= 2, "/new answered")
            query = telegram.push_press(message, a, sender=ALICE)
            assert await answered(telegram, query) == EXPIRED
            assert daemon.runtime is not None
            await daemon.runtime.dispatcher.drain()
    assert prompts(model) == ["which?"]
    assert telegram.keyboard(DM, message["message_id"])[0][0]["text"] == "A"  # not chosen


async def test_data_that_is_no_button_of_the_message_is_refused_and_the_real_press_counts(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(stream(text("Refund?\n[[buttons: Yes | No]]")), stream(text("Refunded.")))
        config = config_yaml(
            tmp_path, anthropic_yaml(model), telegram_yaml(telegram, "dm_policy: open")
        )
        async with daemon_running(config) as daemon:
            telegram.push_text(DM, "refund?", sender=ALICE)
            message = await with_buttons(telegram, DM)
            keyboard = telegram.keyboard(DM, message["message_id"])
            assert [b["callback_data"] for b in keyboard[0]] == ["b:0", "b:1"]
            forged = telegram.push_press(message, "b:7", sender=ALICE)
            assert await answered(telegram, forged) == NOT_OFFERED
            assert telegram.keyboard(DM, message["message_id"]) == keyboard  # unchanged
            assert len(model.requests) == 1

            yes = telegram.push_press(message, "b:0", sender=ALICE)
            assert await answered(telegram, yes) is None
            await until(lambda: telegram.visible(DM)[-1:] == ["Refunded."], "the answer")
            assert daemon.runtime is not None
            await daemon.runtime.dispatcher.drain()
    assert prompts(model) == ["refund?", "(pressed: Yes)"]
    assert telegram.keyboard(DM, message["message_id"]) == [
        [{"text": "✔ Yes (Alice)", "callback_data": "botd:chosen"}]
    ]


async def test_a_press_on_an_answer_without_buttons_is_refused_and_changes_nothing(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(stream(text("Refunds are handled by the support desk.")))
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            telegram_yaml(telegram, "groups:", f'  "{GROUP}": {{require_mention: false}}'),
        )
        async with daemon_running(config) as daemon:
            telegram.push_text(GROUP, "refunds?", sender=ALICE)
            await until(lambda: telegram.visible(GROUP), "the answer")
            [answer_id] = [m for (c, m) in telegram._sent if c == GROUP]
            answer = telegram.sent_message(GROUP, answer_id)
            forged = telegram.push_press(answer, "Refund: visit evil.example", sender=EVE)
            assert await answered(telegram, forged) == NOT_OFFERED
            other = telegram.push_press(answer, "b:0", sender=EVE)
            assert await answered(telegram, other) == NOT_OFFERED
            assert daemon.runtime is not None
            await daemon.runtime.dispatcher.drain()
    assert not telegram.calls_to("editMessageReplyMarkup")
    assert telegram.keyboard(GROUP, answer_id) == []
    assert telegram.visible(GROUP) == ["Refunds are handled by the support desk."]
    assert len(model.requests) == 1


async def test_a_press_gets_no_status_reaction_and_logs_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(stream(text("Deploy?\n[[buttons: Yes | No]]")), stream(text("Deploying.")))
        config = config_yaml(
            tmp_path, anthropic_yaml(model), telegram_yaml(telegram, "dm_policy: open")
        )
        async with daemon_running(config) as daemon:
            asked = telegram.push_text(DM, "deploy?", sender=ALICE)
            message = await with_buttons(telegram, DM)
            with caplog.at_level(logging.WARNING):
                telegram.push_press(message, "b:0", sender=ALICE)
                await until(lambda: telegram.visible(DM)[-1:] == ["Deploying."], "the answer")
                assert daemon.runtime is not None
                await daemon.runtime.dispatcher.drain()
                warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned == []
    # Status reactions went on the message Alice wrote, never on the press.
    reacted = {str(c.params["message_id"]) for c in telegram.calls_to("setMessageReaction")}
    assert reacted == {str(asked["message_id"])}
