"""``delivery: stream`` end to end: the daemon in this loop, the real SDKs over the loopback
fakes. Telegram drafts the answer in a private chat and then posts it once; Slack streams it
into one message in the thread, and that message is the answer. Where the platform cannot
(a group) or refuses, the conversation falls back to the edit preview, once, logged."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.channels.slack.harness import message_event
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, tool_use
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.fakes.telegram_api import FakeTelegramAPI, ScriptedError
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    slack_yaml,
    telegram_yaml,
)
from tests.support.waiting import until

ALICE, GROUP = 111, -100222
ANSWER = "The answer grows word by word."
WORDS = ("The answer ", "grows ", "word ", "by ", "word.")


@pytest.fixture
async def model() -> AsyncIterator[FakeAnthropicAPI]:
    async with FakeAnthropicAPI(api_key="sk-ant-test") as fake:
        yield fake


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegramAPI]:
    async with FakeTelegramAPI() as fake:
        yield fake


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


def telegram_config(tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI) -> str:
    return config_yaml(
        tmp_path,
        anthropic_yaml(model),
        telegram_yaml(
            telegram,
            "poll_timeout: 1",
            "dm_policy: open",
            "group_policy: open",
            "require_mention: false",
            "delivery: stream",
        ),
    )


def fell_back(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "no native streaming" in r.getMessage()]


# --- Telegram ---------------------------------------------------------------------------------


async def test_telegram_drafts_the_answer_then_posts_it_once(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI
) -> None:
    async with daemon_running(telegram_config(tmp_path, telegram, model)):
        model.push(stream(text(*WORDS), delay=0.5))
        telegram.push_text(ALICE, "hello")
        await until(lambda: telegram.visible(ALICE) == [ANSWER], "the answer")

    drafts = telegram.drafts[ALICE]
    assert drafts and all(ANSWER.startswith(d) for d in drafts)  # the answer as it grew
    assert len(drafts) < len(WORDS) + 1  # paced, not one call per delta
    assert telegram.draft_showing(ALICE) is None  # the posted answer ended the draft
    assert len(telegram.calls_to("sendMessage", ok_only=True)) == 1
    assert telegram.calls_to("editMessageText") == []


async def test_a_telegram_group_falls_back_to_the_edit_preview_once_logged(
    tmp_path: Path,
    telegram: FakeTelegramAPI,
    model: FakeAnthropicAPI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "botd.delivery")
    async with daemon_running(telegram_config(tmp_path, telegram, model)):
        model.push(stream(text(*WORDS), delay=0.5), stream(text("Second."), delay=0.2))
        telegram.push_text(GROUP, "hello")
        await until(lambda: telegram.visible(GROUP) == [ANSWER], "the answer")
        telegram.push_text(GROUP, "again")
        await until(lambda: telegram.visible(GROUP) == [ANSWER, "Second."], "the second")

    assert telegram.calls_to("sendMessageDraft") == []  # never asked where it cannot be
    assert telegram.calls_to("editMessageText", ok_only=True)  # the edit preview instead
    assert len(fell_back(caplog)) == 1


async def test_a_refused_telegram_draft_falls_back_to_the_edit_preview_once(
    tmp_path: Path,
    telegram: FakeTelegramAPI,
    model: FakeAnthropicAPI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "botd.delivery")
    telegram.fail_next("sendMessageDraft", ScriptedError(400, "Bad Request: METHOD_NOT_ALLOWED"))
    async with daemon_running(telegram_config(tmp_path, telegram, model)):
        model.push(stream(text(*WORDS), delay=0.5), stream(text("Second ", "one."), delay=0.5))
        telegram.push_text(ALICE, "hello")
        await until(lambda: telegram.visible(ALICE) == [ANSWER], "the answer")
        telegram.push_text(ALICE, "again")
        await until(lambda: telegram.visible(ALICE) == [ANSWER, "Second one."], "the second")

    assert len(telegram.calls_to("sendMessageDraft")) == 1  # refused once, not asked again
    assert telegram.calls_to("editMessageText", ok_only=True)
    (line,) = fell_back(caplog)
    assert "method_not_allowed" in line.lower()  # in Telegram's words (as PTB gives them)


async def test_the_messaging_tool_answer_is_not_shown_again_with_drafts(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI
) -> None:
    said = "Here is the report you asked for, in full."
    call = tool_use("t1", "message", f'{{"action": "send", "message": "{said}"}}')
    async with daemon_running(telegram_config(tmp_path, telegram, model)):
        model.push(
            stream(call, stop_reason="tool_use"),
            stream(text(said), delay=0.2),
            stream(text("Noted.")),
        )
        telegram.push_text(ALICE, "send me the report")
        await until(lambda: said in telegram.visible(ALICE), "the tool's message")
        telegram.push_text(ALICE, "thanks")  # answered once the first run is over
        await until(lambda: "Noted." in telegram.visible(ALICE), "the next answer")

    # The final repeating the tool's message is dropped; the draft that showed it ended with
    # the next message posted.
    assert telegram.visible(ALICE) == [said, "Noted."]


async def test_stop_mid_draft_clears_the_telegram_draft_and_posts_nothing_unseen(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI
) -> None:
    async with daemon_running(telegram_config(tmp_path, telegram, model)):
        # Part of the answer is drafted, then the model goes quiet.
        model.push(stream(text("The first half ", "of a long answer"), hang_after=5))
        telegram.push_text(ALICE, "tell me")
        await until(lambda: telegram.draft_showing(ALICE) is not None, "the draft")
        await model.wait_silent(0, 30)
        telegram.push_text(ALICE, "/stop")
        await until(lambda: "Stopped." in telegram.visible(ALICE), "the stop's confirmation")
        drafts = len(telegram.calls_to("sendMessageDraft"))

    # Only the confirmation: the drafted half was never a message and is not posted now; the
    # message posted ended the draft, and no draft came after it.
    assert telegram.visible(ALICE) == ["Stopped."]
    assert telegram.draft_showing(ALICE) is None
    assert len(telegram.calls_to("sendMessageDraft")) == drafts
    assert telegram.calls_to("editMessageText") == []


# --- Slack ------------------------------------------------------------------------------------


def slack_config(tmp_path: Path, slack: FakeSlack, model: FakeAnthropicAPI) -> str:
    return config_yaml(
        tmp_path,
        anthropic_yaml(model),
        slack_yaml(
            slack,
            "dm_policy: open",
            "group_policy: open",
            "require_mention: false",
            "delivery: stream",
        ),
    )


async def test_slack_streams_a_dm_answer_into_one_message_in_its_thread(
    tmp_path: Path, slack: FakeSlack, model: FakeAnthropicAPI
) -> None:
    async with daemon_running(slack_config(tmp_path, slack, model)):
        await slack.wait_socket()
        model.push(stream(text(*WORDS), delay=0.5))
        await slack.send_event(event_callback(message_event("D1", "100.000001", "hello")))
        await until(lambda: slack.visible("D1") == [ANSWER], "the answer")
        await until(lambda: not slack.streaming, "the stream stopped")

    (start,) = slack.calls_to("chat.startStream")
    assert start.args["thread_ts"] == "100.000001"  # a thread on the user's message
    assert slack.calls_to("chat.appendStream")
    assert len(slack.calls_to("chat.stopStream")) == 1
    assert slack.calls_to("chat.postMessage") == []  # the streamed message is the answer
    (posted,) = slack.posted("D1")
    assert posted["thread_ts"] == "100.000001"


async def test_a_slack_channel_root_falls_back_to_the_edit_preview_once_logged(
    tmp_path: Path,
    slack: FakeSlack,
    model: FakeAnthropicAPI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "botd.delivery")
    async with daemon_running(slack_config(tmp_path, slack, model)):
        await slack.wait_socket()
        model.push(stream(text(*WORDS), delay=0.5), stream(text("Second."), delay=0.2))
        await slack.send_event(event_callback(message_event("C1", "200.000001", "hello")))
        await until(lambda: slack.visible("C1") == [ANSWER], "the answer")
        await slack.send_event(event_callback(message_event("C1", "200.000005", "again")))
        await until(lambda: slack.visible("C1") == [ANSWER, "Second."], "the second")

    assert slack.calls_to("chat.startStream") == []
    assert slack.calls_to("chat.update")
    assert len(fell_back(caplog)) == 1


async def test_a_refused_slack_stream_falls_back_to_the_edit_preview_once(
    tmp_path: Path,
    slack: FakeSlack,
    model: FakeAnthropicAPI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "botd.delivery")
    slack.fail_next("chat.startStream", "not_allowed_token_type")
    async with daemon_running(slack_config(tmp_path, slack, model)):
        await slack.wait_socket()
        model.push(stream(text(*WORDS), delay=0.5))
        await slack.send_event(event_callback(message_event("D1", "100.000001", "hello")))
        await until(lambda: slack.visible("D1") == [ANSWER], "the answer")

    assert len(slack.calls_to("chat.startStream")) == 1
    assert slack.calls_to("chat.update")
    (line,) = fell_back(caplog)
    assert "not_allowed_token_type" in line


async def test_stop_mid_stream_stops_the_slack_stream_with_what_it_showed(
    tmp_path: Path, slack: FakeSlack, model: FakeAnthropicAPI
) -> None:
    async with daemon_running(slack_config(tmp_path, slack, model)):
        await slack.wait_socket()
        # Part of the answer streams, then the model goes quiet.
        model.push(stream(text("The first half ", "of a long answer"), hang_after=5))
        await slack.send_event(event_callback(message_event("D1", "100.000001", "tell me")))
        await until(lambda: bool(slack.streaming), "the stream started")
        await model.wait_silent(0, 30)
        await slack.send_event(event_callback(message_event("D1", "100.000009", "/stop")))
        await until(lambda: "Stopped." in slack.visible("D1"), "the stop's confirmation")
        await until(lambda: not slack.streaming, "the stream stopped")

    streamed, stopped = slack.visible("D1")
    assert streamed.startswith("The first half")  # what the stream showed, kept
    assert stopped == "Stopped."
    assert len(slack.calls_to("chat.stopStream")) == 1


async def test_a_group_streams_while_the_channel_delivers_blocks(
    tmp_path: Path, slack: FakeSlack, model: FakeAnthropicAPI
) -> None:
    # The channel's own mode is blocks; the group C1 sets ``delivery: stream``. Answers
    # in C1 go to a thread on the message answered, where a stream can be.
    config = config_yaml(
        tmp_path,
        anthropic_yaml(model),
        slack_yaml(
            slack,
            "dm_policy: open",
            "group_policy: open",
            "require_mention: false",
            "reply_to_mode: all",
            "groups: {C1: {delivery: stream, require_mention: false}}",
        ),
    )
    async with daemon_running(config):
        await slack.wait_socket()
        model.push(stream(text(*WORDS), delay=0.5), stream(text(*WORDS), delay=0.5))
        await slack.send_event(event_callback(message_event("C1", "300.000001", "hello")))
        await until(lambda: slack.visible("C1") == [ANSWER], "the group's answer")
        await until(lambda: not slack.streaming, "the stream stopped")
        await slack.send_event(event_callback(message_event("D1", "100.000001", "hello")))
        await until(lambda: slack.visible("D1") == [ANSWER], "the DM's answer")

    (start,) = slack.calls_to("chat.startStream")  # the group's answer streamed, in its thread
    assert (start.args["channel"], start.args["thread_ts"]) == ("C1", "300.000001")
    assert start.args["recipient_user_id"] == "U1"
    (posted,) = slack.calls_to("chat.postMessage")  # the DM's, as a block of its own
    assert posted.args["channel"] == "D1"
    assert slack.calls_to("chat.update") == []
