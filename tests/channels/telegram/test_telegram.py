"""The Telegram adapter end to end: real python-telegram-bot against the loopback fake API."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from botd.channels.base import Ack
from botd.channels.errors import ChannelError, ChannelStartError
from botd.channels.telegram.adapter import TelegramAdapter, TelegramAPIError
from botd.chat import InboundMessage, Target
from botd.store import Store
from tests.channels.telegram.harness import DM, FORUM, GROUP, TOKEN, Bot, started
from tests.fakes.telegram_api import (
    BOT_USER,
    FakeTelegramAPI,
    ScriptedError,
    cant_parse_entities,
    conflict,
    parse_html,
    retry_after,
)
from tests.support.waiting import HANG_GUARD, until


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramAPI]:
    async with FakeTelegramAPI(TOKEN) as api:
        yield api


@pytest.fixture
async def bot(fake: FakeTelegramAPI, store: Store) -> AsyncIterator[Bot]:
    running = await started(fake, store)
    yield running
    await running.adapter.stop()


async def test_a_dm_arrives_as_a_direct_message(fake: FakeTelegramAPI, bot: Bot) -> None:
    fake.push_text(DM, "hello there")
    message = await bot.next()
    assert message.channel == "telegram"
    assert message.chat_id == str(DM)
    assert message.conversation_key == f"telegram:{DM}"
    assert message.is_direct
    assert message.text == "hello there"
    assert message.sender_id == str(DM)
    assert message.sender_name == "Ada"
    assert message.thread_id is None
    first_poll = fake.calls_to("getUpdates")[0].params
    assert first_poll["offset"] == "0"
    assert first_poll["allowed_updates"] == ["message", "edited_message", "callback_query"]


async def test_an_edit_arrives_as_an_edit_of_its_message_never_as_part_of_a_paste(
    fake: FakeTelegramAPI,
) -> None:
    bot = await started(fake)
    try:
        long = "x" * 4000  # a part of a long text Telegram's app split: an album of its own
        message = fake.push_text(GROUP, long)
        first = await bot.next()
        assert first.album is not None and not first.edited
        fake.push_edit(message, long + " and more", edit_date=message["date"] + 5)
        edit = await bot.next()
        assert edit.edited and edit.text == long + " and more" and edit.album is None
        assert edit.message_id == first.message_id
        assert edit.dedupe_keys == (f"{GROUP}:{message['message_id']}:edit:{message['date'] + 5}",)
        assert edit.conversation_key == first.conversation_key
    finally:
        await bot.adapter.stop()


async def test_a_backlog_arrives_in_order_a_hundred_updates_per_poll_at_most(
    fake: FakeTelegramAPI, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed_out: list[int] = []
    poll = fake._api_getUpdates

    async def counted(params: dict[str, Any]) -> Any:
        updates = await poll(params)
        handed_out.append(len(updates))
        return updates

    monkeypatch.setattr(fake, "_api_getUpdates", counted)
    for n in range(250):
        fake.push_text(DM + n % 5, f"message {n}")
    bot = await started(fake, store)
    try:
        texts = [(await bot.next()).text for _ in range(250)]
    finally:
        await bot.adapter.stop()
    assert texts == [f"message {n}" for n in range(250)]
    # Like Telegram, one getUpdates hands out at most 100 updates: the backlog took three.
    assert [n for n in handed_out if n] == [100, 100, 50]


async def test_commands_pass_through_as_text(fake: FakeTelegramAPI, bot: Bot) -> None:
    fake.push_text(DM, "/stop")
    assert (await bot.next()).text == "/stop"


async def test_group_mentions(fake: FakeTelegramAPI, bot: Bot) -> None:
    fake.push_text(GROUP, "just chatting with @someone_else")
    fake.push_text(GROUP, "hey @botd_test_bot can you help?")
    fake.push_text(GROUP, "/status@botd_test_bot")
    plain, mentioned, command = await bot.next(), await bot.next(), await bot.next()
    assert plain.conversation_key == f"telegram:{GROUP}"
    assert not plain.is_direct
    assert not plain.mentions_bot
    assert mentioned.mentions_bot
    assert command.mentions_bot
    # The agent gets the message without the bot's own name; commands keep their form.
    assert mentioned.text == "hey can you help?"
    assert command.text == "/status@botd_test_bot"
    assert plain.text == "just chatting with @someone_else"


async def test_a_reply_to_the_bot_or_a_text_mention_counts_as_a_mention(
    fake: FakeTelegramAPI, bot: Bot
) -> None:
    [ref] = await bot.adapter.send(Target("telegram", str(GROUP)), "an answer")
    sent = fake.sent_message(GROUP, int(ref.message_id))
    fake.push_text(GROUP, "thanks!", reply_to=sent)
    fake.push_text(GROUP, "I replied to a human", reply_to=fake.push_text(GROUP, "hi"))
    mention = {"type": "text_mention", "offset": 0, "length": 4, "user": BOT_USER}
    fake.push_text(GROUP, "Botd, hello", entities=[mention])
    reply = await bot.next()
    assert reply.mentions_bot
    assert reply.reply_to_message_id == ref.message_id
    assert not (await bot.next()).mentions_bot  # "hi"
    assert not (await bot.next()).mentions_bot  # the reply to "hi"
    assert (await bot.next()).mentions_bot


async def test_forum_topics_are_sessions_and_replies_go_back_to_the_topic(
    fake: FakeTelegramAPI, bot: Bot
) -> None:
    fake.push_text(FORUM, "in a topic", is_forum=True, thread_id=42)
    fake.push_text(FORUM, "in general", is_forum=True)
    topic, general = await bot.next(), await bot.next()
    assert topic.conversation_key == f"telegram:{FORUM}:topic:42"
    assert topic.thread_id == "42"
    assert general.conversation_key == f"telegram:{FORUM}:topic:1"

    await bot.adapter.send(topic.reply_target(), "topic answer")
    await bot.adapter.send(general.reply_target(), "general answer")
    to_topic, to_general = (c.params for c in fake.calls_to("sendMessage"))
    assert to_topic["message_thread_id"] == "42"
    assert "message_thread_id" not in to_general  # Telegram rejects the General topic's id

    await bot.adapter.typing(topic.reply_target())
    await bot.adapter.typing(general.reply_target())
    actions = [c.params for c in fake.calls_to("sendChatAction")]
    assert [a["message_thread_id"] for a in actions] == ["42", "1"]


def _long_answer() -> tuple[str, list[str]]:
    """About 9,000 characters of Markdown with a code block, made of unique numbered words."""
    words = [f"w{i:04d}" for i in range(1000)]
    code = [f"line_{i:04d} = {i}" for i in range(200)]
    prose = lambda ws: " ".join(ws)  # noqa: E731
    markdown = (
        "\n\n".join(prose(words[i : i + 50]) for i in range(0, 500, 50))
        + "\n\n```python\n"
        + "\n".join(code)
        + "\n```\n\n"
        + "\n\n".join(prose(words[i : i + 50]) for i in range(500, 1000, 50))
    )
    tokens = words[:500] + [t for line in code for t in line.split(" ")] + words[500:]
    return markdown, tokens


async def test_a_long_answer_is_split_without_losing_or_repeating_text(
    fake: FakeTelegramAPI, bot: Bot
) -> None:
    markdown, tokens = _long_answer()
    assert len(markdown) > 9000
    refs = await bot.adapter.send(Target("telegram", str(DM), reply_to_id="5"), markdown)
    sends = fake.calls_to("sendMessage")
    assert len(sends) >= 3
    assert len(refs) == len(sends)
    assert all(c.status == 200 and c.params["parse_mode"] == "HTML" for c in sends)
    assert all(len(c.params["text"]) <= 4096 for c in sends)
    assert sends[0].params["reply_parameters"]["message_id"] == 5
    assert all("reply_parameters" not in c.params for c in sends[1:])
    assert any("<pre>" in c.params["text"] for c in sends)
    visible = " ".join(parse_html(c.params["text"])[0] for c in sends)
    assert re.findall(r"\S+", visible) == tokens


async def test_a_429_is_waited_out_and_delivered_once(fake: FakeTelegramAPI, bot: Bot) -> None:
    fake.fail_next("sendMessage", retry_after(1))
    refs = await bot.adapter.send(Target("telegram", str(DM)), "patience")
    assert len(refs) == 1
    assert [c.status for c in fake.calls_to("sendMessage")] == [429, 200]


async def test_a_flood_wait_pauses_only_its_own_chat(fake: FakeTelegramAPI, bot: Bot) -> None:
    fake.fail_next("sendMessage", retry_after(3))
    slow = asyncio.create_task(bot.adapter.send(Target("telegram", str(GROUP)), "to the group"))
    await fake.wait_for_call("sendMessage", 1)  # the group's first attempt got the 429
    # Another chat is not held up by the group's flood wait.
    await asyncio.wait_for(bot.adapter.send(Target("telegram", str(DM)), "to the DM"), 30)
    assert not slow.done()
    await asyncio.wait_for(slow, 30)
    delivered = [c.params["chat_id"] for c in fake.calls_to("sendMessage", ok_only=True)]
    assert delivered == [str(DM), str(GROUP)]
    assert len(fake.calls_to("sendMessage")) == 3  # one refusal, two deliveries, no repeats


async def test_refused_markup_is_resent_as_plain_text(fake: FakeTelegramAPI, bot: Bot) -> None:
    fake.fail_next("sendMessage", cant_parse_entities())
    refs = await bot.adapter.send(Target("telegram", str(DM)), "**bold** move")
    refused, plain = fake.calls_to("sendMessage")
    assert refused.status == 400
    assert refused.params["parse_mode"] == "HTML"
    assert plain.status == 200
    assert "parse_mode" not in plain.params
    assert plain.params["text"] == "bold move"
    assert len(refs) == 1


async def test_other_refusals_raise_with_telegrams_words(fake: FakeTelegramAPI, bot: Bot) -> None:
    fake.fail_next("sendMessage", ScriptedError(403, "Forbidden: bot was blocked by the user"))
    with pytest.raises(TelegramAPIError, match="bot was blocked by the user"):
        await bot.adapter.send(Target("telegram", str(DM)), "hello?")


async def test_a_restart_replays_nothing(fake: FakeTelegramAPI, store: Store) -> None:
    fake.forget_confirmed = False  # as if Telegram never learned what was read
    first = await started(fake, store)
    fake.push_text(DM, "one")
    fake.push_text(DM, "two")
    assert [(await first.next()).text for _ in range(2)] == ["one", "two"]
    await first.adapter.stop()
    assert await store.get_offset("telegram", "default") == "3"

    polls_before = len(fake.calls_to("getUpdates"))
    second = await started(fake, store)
    try:
        fake.push_text(DM, "three")
        assert (await second.next()).text == "three"
        assert fake.calls_to("getUpdates")[polls_before].params["offset"] == "3"
    finally:
        await second.adapter.stop()


async def test_a_redelivered_message_is_dropped(fake: FakeTelegramAPI, bot: Bot) -> None:
    fake.push_text(DM, "once", message_id=50)
    fake.push_text(DM, "once", message_id=50)  # same message under a new update id
    fake.push_text(DM, "after")
    assert (await bot.next()).text == "once"
    assert (await bot.next()).text == "after"


async def test_a_409_conflict_is_survived(
    fake: FakeTelegramAPI, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    fake.fail_next("getUpdates", conflict(), times=2)
    caplog.set_level(logging.WARNING, logger="botd.channels.telegram")
    running = await started(fake, store, conflict_backoff=(0.01, 0.05))
    try:
        fake.push_text(DM, "still there?")
        assert (await running.next()).text == "still there?"
        assert [c.status for c in fake.calls_to("getUpdates")][:3] == [409, 409, 200]
        assert "terminated by other getUpdates request" in caplog.text
    finally:
        await running.adapter.stop()


async def test_a_stalled_poll_is_abandoned_and_messages_flow_again(
    fake: FakeTelegramAPI, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    fake.stall_next_polls(2)
    caplog.set_level(logging.WARNING, logger="botd.channels.telegram")
    running = await started(
        fake, store, poll_timeout=1, stall_grace=0.2, conflict_backoff=(0.01, 0.05)
    )
    try:
        fake.push_text(DM, "anyone home?")
        assert (await running.next()).text == "anyone home?"
        assert fake.stalls == 0
        assert caplog.text.count("getUpdates stalled") == 2
    finally:
        await running.adapter.stop()


async def test_edit_react_and_typing_reach_telegram(fake: FakeTelegramAPI, bot: Bot) -> None:
    target = Target("telegram", str(DM))
    [ref] = await bot.adapter.send(target, "draft")
    await bot.adapter.edit(ref, "**final**")
    await bot.adapter.edit(ref, "**final**")  # "message is not modified" is no error
    edits = fake.calls_to("editMessageText")
    assert edits[0].params == {
        "chat_id": str(DM),
        "message_id": ref.message_id,
        "text": "<b>final</b>",
        "parse_mode": "HTML",
    }
    assert [c.status for c in edits] == [200, 400]
    assert fake.sent_message(DM, int(ref.message_id))["text"] == "final"

    await bot.adapter.react(ref, "👍")
    [reaction] = fake.calls_to("setMessageReaction")
    assert reaction.params["reaction"] == [{"type": "emoji", "emoji": "👍"}]
    await bot.adapter.typing(target)
    [action] = fake.calls_to("sendChatAction")
    assert action.params["action"] == "typing"
    assert "message_thread_id" not in action.params


async def test_stop_is_idempotent(fake: FakeTelegramAPI) -> None:
    running = await started(fake)
    await running.adapter.stop()
    await running.adapter.stop()
    # Not connected: a passing failure, which the delivery retries until the channel is back.
    with pytest.raises(ChannelError, match="not connected") as refused:
        await running.adapter.send(Target("telegram", str(DM)), "after stop")
    assert refused.value.retryable


async def test_a_refused_token_fails_start_cleanly(fake: FakeTelegramAPI) -> None:
    adapter = TelegramAdapter("999:WRONG", api_base_url=fake.base_url, poll_timeout=5)
    with pytest.raises(TelegramAPIError, match="Telegram start"):
        await adapter.start(Bot(adapter).sink)
    await adapter.stop()
    assert [c.method for c in fake.calls] == ["getMe"]


async def test_start_failures_are_one_line_channel_start_errors(
    fake: FakeTelegramAPI, unused_port: int
) -> None:
    refused = TelegramAdapter("999:WRONG", api_base_url=fake.base_url, poll_timeout=5)
    with pytest.raises(ChannelStartError, match="Telegram start"):
        await refused.start(Bot(refused).sink)
    unreachable = TelegramAdapter(TOKEN, api_base_url=f"http://127.0.0.1:{unused_port}")
    with pytest.raises(ChannelStartError, match="Telegram start") as caught:
        await asyncio.wait_for(unreachable.start(Bot(unreachable).sink), HANG_GUARD)
    assert "\n" not in str(caught.value)
    await unreachable.stop()


async def test_after_stop_inbound_sends_work_and_new_updates_wait_for_the_next_start(
    fake: FakeTelegramAPI, store: Store
) -> None:
    first = await started(fake, store, poll_timeout=1)
    try:
        fake.push_text(DM, "before")
        assert (await first.next()).text == "before"
        await first.adapter.stop_inbound()
        polls = len(fake.calls_to("getUpdates"))
        fake.push_text(DM, "during shutdown")
        # Replies of runs still finishing go out...
        [ref] = await first.adapter.send(Target("telegram", str(DM)), "still answering")
        assert ref.message_id
    finally:
        await first.adapter.stop()
    # ...but nothing new was taken in: polling stopped (no request once stop_inbound
    # returned), and the message waits with Telegram for the next start.
    assert len(fake.calls_to("getUpdates")) == polls
    assert first.inbound.empty()
    second = await started(fake, store, poll_timeout=1)
    try:
        assert (await second.next()).text == "during shutdown"
    finally:
        await second.adapter.stop()


async def _menu_settled(fake: FakeTelegramAPI, calls: int) -> None:
    """Wait (a hang guard) until ``calls`` menu calls were made."""

    def menu_calls() -> int:
        return len([c for c in fake.calls if c.method in ("getMyCommands", "setMyCommands")])

    await until(lambda: menu_calls() >= calls, "menu_calls() >= calls")


async def test_the_command_menu_lists_the_chat_commands_and_is_set_once(
    fake: FakeTelegramAPI,
) -> None:
    first = await started(fake)
    await _menu_settled(fake, 2)
    await first.adapter.stop()
    assert [(c["command"], c["description"]) for c in fake.my_commands][:3] == [
        ("new", "Start a new conversation (text after it: its first message)"),
        ("stop", "Cancel the answer being written and what waits"),
        ("status", "What the bot is doing in this chat"),
    ]
    assert {c["command"] for c in fake.my_commands} == {
        "new",
        "stop",
        "status",
        "model",
        "usage",
        "voice",
        "whoami",
        "help",
    }
    # A restart finds the menu right and leaves it.
    second = await started(fake)
    await _menu_settled(fake, 3)
    await second.adapter.stop()
    assert [c.method for c in fake.calls].count("setMyCommands") == 1


async def test_a_refused_menu_is_logged_and_polling_goes_on(
    fake: FakeTelegramAPI, caplog: pytest.LogCaptureFixture
) -> None:
    fake.fail_next("setMyCommands", ScriptedError(400, "Bad Request: BOT_COMMAND_INVALID"))
    running = await started(fake)
    try:
        await _menu_settled(fake, 2)
        fake.push_text(DM, "still here")
        assert (await running.next()).text == "still here"
    finally:
        await running.adapter.stop()
    # In Telegram's words, as python-telegram-bot renders them.
    assert "the command menu was not set: bot_command_invalid" in caplog.text.lower()


async def test_command_menu_false_leaves_the_botfather_menu(fake: FakeTelegramAPI) -> None:
    fake.my_commands = [{"command": "start", "description": "Set with BotFather"}]
    running = await started(fake, command_menu=False)
    fake.push_text(DM, "hello")
    await running.next()
    await running.adapter.stop()
    assert not [c for c in fake.calls if "MyCommands" in c.method]
    assert fake.my_commands == [{"command": "start", "description": "Set with BotFather"}]


async def test_updates_after_a_refused_one_wait_for_it_and_keep_their_order(
    fake: FakeTelegramAPI,
) -> None:
    """The store refuses the first of two messages of one batch (it was away a moment): the
    second is not taken before it; both come again and are taken in the order sent."""
    taken: list[str] = []
    refusals = [RuntimeError("the store is away")]

    async def sink(message: InboundMessage, *, ack: Ack | None = None) -> None:
        if message.text == "first" and refusals:
            raise refusals.pop()
        taken.append(message.text)

    fake.push_text(DM, "first")
    fake.push_text(DM, "second")
    adapter = TelegramAdapter(TOKEN, api_base_url=fake.base_url, poll_timeout=5)
    await adapter.start(sink)
    try:
        await until(lambda: len(taken) >= 2, "both messages taken")
        assert taken == ["first", "second"]
    finally:
        await adapter.stop()
