"""The Slack adapter with the real slack-bolt client against a loopback fake, in both modes."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest

from botd.channels.errors import ChannelStartError
from botd.channels.slack.adapter import SlackAdapter
from botd.channels.slack.errors import SlackError
from botd.chat import InboundMessage, MessageRef, Target
from botd.store.sqlite import SqliteStore
from tests.channels.routed import through_router
from tests.channels.slack.harness import SECRET, Inbox, message_event, post_http, slack_adapter
from tests.fakes.slack_api import (
    BOT_USER_ID,
    FakeSlack,
    event_callback,
    message_changed,
    signed_headers,
)
from tests.support.waiting import HANG_GUARD, until


class SpyStore(SqliteStore):
    """A real store that also lists every inbound id it was asked about."""

    asked: list[str]

    async def seen_inbound(self, channel: str, *keys: str) -> bool:
        self.asked.extend(keys)
        return await super().seen_inbound(channel, *keys)

    async def accept_inbound(
        self,
        channel: str,
        keys: Sequence[str],
        message: InboundMessage,
        *,
        consume_chatter: tuple[str, int] | None = None,
        unless_chatter_kept: bool = False,
        chatter_read_by: str | None = None,
    ) -> int | None:
        self.asked.extend(keys)
        return await super().accept_inbound(
            channel,
            keys,
            message,
            consume_chatter=consume_chatter,
            unless_chatter_kept=unless_chatter_kept,
            chatter_read_by=chatter_read_by,
        )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SpyStore]:
    spy = SpyStore(tmp_path / "botd.db")
    spy.asked = []
    yield spy
    spy.close()


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


@pytest.fixture
async def socket_bot(fake: FakeSlack, store: SpyStore) -> AsyncIterator[tuple[SlackAdapter, Inbox]]:
    adapter = slack_adapter(fake)
    inbox = Inbox()
    await asyncio.wait_for(adapter.start(through_router(store, inbox, "slack")), HANG_GUARD)
    yield adapter, inbox
    await adapter.stop()


@pytest.fixture
async def http_bot(fake: FakeSlack, store: SpyStore) -> AsyncIterator[tuple[SlackAdapter, Inbox]]:
    adapter = slack_adapter(fake, mode="http", http_port=0)
    inbox = Inbox()
    await adapter.start(through_router(store, inbox, "slack"))
    yield adapter, inbox
    await adapter.stop()


def repeats_dropped(caplog: pytest.LogCaptureFixture) -> int:
    """How many deliveries the adapter recognised as a twin or retry and dropped."""
    return caplog.text.count("already handled")


def _mention(channel: str, ts: str, text: str, **extra: Any) -> dict[str, Any]:
    event = {"type": "app_mention", "channel": channel, "user": "U1", "text": text, "ts": ts}
    event.update(extra)
    return event


# --- Socket Mode ------------------------------------------------------------------------------


async def test_socket_dm_reaches_the_sink_and_is_answered(
    fake: FakeSlack, socket_bot: tuple[SlackAdapter, Inbox]
) -> None:
    adapter, inbox = socket_bot
    envelope = await fake.send_event(event_callback(message_event("D1", "100.000001", "hi there")))
    await until(lambda: len(inbox.messages) == 1, "the DM")
    message = inbox.messages[0]
    assert message.conversation_key == "slack:D1"
    assert message.is_direct and message.thread_id is None
    assert (message.chat_id, message.sender_id, message.text) == ("D1", "U1", "hi there")
    await until(lambda: envelope in fake.acks, "the ack")
    assert fake.calls_to("apps.connections.open")[0].token == "xapp-test"

    refs = await adapter.send(adapter.reply_target(message), "hello *you*")
    posts = fake.calls_to("chat.postMessage")
    assert len(posts) == 1 and posts[0].args["channel"] == "D1"
    assert "thread_ts" not in posts[0].args
    assert posts[0].token == "xoxb-test"
    assert refs == [MessageRef(Target("slack", "D1"), "1700000000.000001")]


async def test_a_lone_surrogate_arrives_replaced_and_is_accepted(
    fake: FakeSlack, socket_bot: tuple[SlackAdapter, Inbox]
) -> None:
    # The fake's JSON escapes it ("\ud800"), so the SDK decodes half a surrogate pair.
    _adapter, inbox = socket_bot
    envelope = await fake.send_event(event_callback(message_event("D1", "100.000009", "hi \ud800")))
    await until(lambda: len(inbox.messages) == 1, "the DM")
    assert inbox.messages[0].text == "hi \ufffd"
    await until(lambda: envelope in fake.acks, "the ack")  # the router stored it


async def test_socket_channel_mentions(
    fake: FakeSlack, socket_bot: tuple[SlackAdapter, Inbox]
) -> None:
    _, inbox = socket_bot
    await fake.send_event(event_callback(message_event("C1", "200.000001", "just chatting")))
    await until(lambda: len(inbox.messages) == 1, "the plain message")
    await fake.send_event(event_callback(_mention("C1", "200.000002", f"<@{BOT_USER_ID}> hi")))
    await until(lambda: len(inbox.messages) == 2, "the mention")
    plain, mention = inbox.messages
    assert not plain.mentions_bot and not plain.is_direct
    assert mention.mentions_bot and mention.conversation_key == "slack:C1"
    assert mention.text == "hi"  # the bot's own mention is not passed to the agent


async def test_socket_twins_and_a_retried_envelope_reach_the_sink_once(
    fake: FakeSlack,
    store: SpyStore,
    socket_bot: tuple[SlackAdapter, Inbox],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="botd.channels.slack")
    _, inbox = socket_bot
    text = f"<@{BOT_USER_ID}> do it"
    message = event_callback(message_event("C1", "300.000001", text), event_id="EvMSG")
    mention = event_callback(_mention("C1", "300.000001", text), event_id="EvMENTION")
    await fake.send_event(message)
    await fake.send_event(mention)
    await fake.send_event(message, retry_attempt=1)
    # Every delivery is checked before anything else: the twin and the retry are dropped.
    await until(lambda: repeats_dropped(caplog) == 2, "the twin and the retry to be checked")
    await until(lambda: len(inbox.messages) >= 1, "the message")
    assert len(inbox.messages) == 1
    assert inbox.messages[0].mentions_bot
    # The one that went on carries both ids, and the router recorded them in the store.
    keys = inbox.messages[0].dedupe_keys
    assert "C1:300.000001" in keys and {"EvMSG", "EvMENTION"} & set(keys)
    assert all(key in store.asked for key in keys)
    await until(lambda: len(fake.acks) == 3, "three acks")


async def test_a_restart_with_the_same_store_replays_nothing(
    fake: FakeSlack, store: SpyStore
) -> None:
    body = event_callback(message_event("D1", "400.000001", "once"), event_id="EvONCE")
    first, first_inbox = slack_adapter(fake), Inbox()
    await asyncio.wait_for(first.start(through_router(store, first_inbox, "slack")), HANG_GUARD)
    await fake.send_event(body)
    await until(lambda: len(first_inbox.messages) == 1, "the first delivery")
    await first.stop()
    await first.stop()  # idempotent

    second, second_inbox = slack_adapter(fake), Inbox()
    await asyncio.wait_for(second.start(through_router(store, second_inbox, "slack")), HANG_GUARD)
    try:
        await fake.send_event(body, retry_attempt=1)
        await until(lambda: store.asked.count("EvONCE") == 2, "the replay to be checked")
        assert second_inbox.messages == []
    finally:
        await second.stop()


async def test_a_thread_message_gets_the_thread_key_and_reply(
    fake: FakeSlack, socket_bot: tuple[SlackAdapter, Inbox]
) -> None:
    adapter, inbox = socket_bot
    event = message_event("C1", "500.000009", f"<@{BOT_USER_ID}> in thread", thread_ts="500.000001")
    await fake.send_event(event_callback(event))
    await until(lambda: len(inbox.messages) == 1, "the thread message")
    message = inbox.messages[0]
    assert message.conversation_key == "slack:C1:thread:500.000001"
    assert message.thread_id == "500.000001" and message.mentions_bot
    [ref] = await adapter.send(adapter.reply_target(message), "in the thread")
    assert fake.calls_to("chat.postMessage")[0].args["thread_ts"] == "500.000001"
    assert ref.target.thread_id == "500.000001"


async def test_other_message_subtypes_and_own_messages_are_ignored(
    fake: FakeSlack, socket_bot: tuple[SlackAdapter, Inbox]
) -> None:
    _, inbox = socket_bot
    edited = message_event("C1", "550.000002", "edited", subtype="message_changed")
    own = message_event("C1", "550.000003", "me", user=BOT_USER_ID, bot_id="BBOT")
    reaction = {"type": "reaction_added", "user": "U1", "reaction": "eyes"}
    envelopes = [await fake.send_event(event_callback(e)) for e in (edited, own, reaction)]
    await fake.send_event(event_callback(message_event("C1", "550.000004", "last")))
    await until(lambda: len(inbox.messages) >= 1, "the last message")
    await until(lambda: all(e in fake.acks for e in envelopes), "acks for ignored events")
    assert [m.text for m in inbox.messages] == ["last"]


async def test_only_a_persons_edit_of_a_text_is_handed_on_as_an_edit(fake: FakeSlack) -> None:
    adapter, inbox = slack_adapter(fake), Inbox()
    await asyncio.wait_for(adapter.start(inbox), HANG_GUARD)
    try:
        said = message_event("C1", "560.000001", "see https://example.com", thread_ts="550.000001")
        # Slack adds the link's preview: a change without an `edited` mark.
        unfurled = message_changed(said, said["text"], edited_ts="560.000002")
        del unfurled["message"]["edited"]
        own = message_event("C1", "560.000003", "draft", user=BOT_USER_ID)
        changes = [
            unfurled,
            message_changed(own, "final", edited_ts="560.000004"),  # the bot's own preview
            message_changed(said, said["text"], edited_ts="560.000005"),  # same text
            message_changed(
                said, "This message was deleted.", edited_ts="560.000007", subtype="tombstone"
            ),
            message_changed(said, "see https://example.org", edited_ts="560.000006"),
        ]
        envelopes = [await fake.send_event(event_callback(e)) for e in changes]
        await until(lambda: all(e in fake.acks for e in envelopes), "acks")
        [edit] = inbox.messages
        assert edit.edited and edit.text == "see https://example.org"
        assert edit.message_id == "560.000001" and edit.thread_id == "550.000001"
        assert edit.conversation_key == "slack:C1:thread:550.000001"
        assert edit.dedupe_keys[-1] == "C1:560.000001:edit:560.000006"
        assert edit.context == ""  # no thread fetch for an edit
        assert fake.calls_to("conversations.replies") == []
    finally:
        await adapter.stop()


async def test_a_dropped_socket_reconnects_and_messages_flow(
    fake: FakeSlack, socket_bot: tuple[SlackAdapter, Inbox]
) -> None:
    _, inbox = socket_bot
    await fake.wait_socket()
    await fake.drop_socket()
    await until(lambda: fake.connections == 2, "a second connection")
    assert len(fake.calls_to("apps.connections.open")) == 2
    await fake.send_event(event_callback(message_event("D1", "600.000001", "after the drop")))
    await until(lambda: len(inbox.messages) == 1, "a message after reconnecting")
    assert inbox.messages[0].text == "after the drop"


# --- HTTP Events API --------------------------------------------------------------------------


async def test_http_dm_mentions_and_retries(
    fake: FakeSlack,
    store: SpyStore,
    http_bot: tuple[SlackAdapter, Inbox],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="botd.channels.slack")
    adapter, inbox = http_bot
    status, _ = await post_http(adapter, event_callback(message_event("D7", "700.000001", "hello")))
    assert status == 200
    await until(lambda: len(inbox.messages) == 1, "the DM")
    assert inbox.messages[0].conversation_key == "slack:D7" and inbox.messages[0].is_direct

    text = f"<@{BOT_USER_ID}> ping"
    message = event_callback(message_event("C7", "700.000002", text), event_id="EvHTTPMSG")
    mention = event_callback(_mention("C7", "700.000002", text), event_id="EvHTTPMENTION")
    for body, headers in (
        (mention, {}),
        (message, {}),
        (mention, {"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}),
    ):
        status, _ = await post_http(adapter, body, **headers)
        assert status == 200
    await until(lambda: repeats_dropped(caplog) == 2, "the twin and the retry to be checked")
    await until(lambda: len(inbox.messages) >= 2, "the mention")
    assert len(inbox.messages) == 2
    assert inbox.messages[1].mentions_bot and inbox.messages[1].conversation_key == "slack:C7"


async def test_http_slash_command_is_a_chat_command_of_its_channel(
    http_bot: tuple[SlackAdapter, Inbox],
) -> None:
    adapter, inbox = http_bot
    form = urlencode(
        {
            "command": "/botd",
            "text": "stop",
            "channel_id": "C7",
            "user_id": "U1",
            "user_name": "ann",
            "trigger_id": "13345224609.738474920.8088930838d88f008e0",
            "response_url": "https://hooks.slack.invalid/commands/1",
        }
    ).encode()
    headers = {
        **signed_headers(SECRET, form),
        "Content-Type": "application/x-www-form-urlencoded",
    }
    url = f"http://127.0.0.1:{adapter.http_port}/slack/events"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=form, headers=headers) as response,
    ):
        assert response.status == 200
    [message] = inbox.messages  # taken before the ack
    assert message.text == "/stop" and message.mentions_bot and not message.is_direct
    assert message.conversation_key == "slack:C7" and message.sender_name == "ann"
    assert message.target is not None and message.target.thread_id is None


async def test_http_rejects_a_bad_signature_and_acks_other_events(
    http_bot: tuple[SlackAdapter, Inbox],
) -> None:
    adapter, inbox = http_bot
    body = event_callback(message_event("D8", "800.000001", "forged"))
    status, _ = await post_http(adapter, body, secret="wrong")
    assert status == 401
    raw = json.dumps(body).encode()
    stale = signed_headers(SECRET, raw, timestamp=int(time.time()) - 600)
    url = f"http://127.0.0.1:{adapter.http_port}/slack/events"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=raw, headers=stale) as response,
    ):
        assert response.status == 401
    status, _ = await post_http(adapter, event_callback({"type": "pin_added", "user": "U1"}))
    assert status == 200
    status, text = await post_http(adapter, {"type": "url_verification", "challenge": "abc"})
    assert status == 200 and "abc" in text
    assert inbox.messages == []


# --- outbound ---------------------------------------------------------------------------------


def _inbound(channel: str, ts: str, thread_ts: str | None = None) -> InboundMessage:
    key = f"slack:{channel}" if thread_ts is None else f"slack:{channel}:thread:{thread_ts}"
    return InboundMessage("slack", channel, "U1", "hi", ts, key, thread_id=thread_ts)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("off", [None, None]), ("first", ["900.000001", None]), ("all", ["900.000001"] * 2)],
)
async def test_reply_to_mode_targets(
    fake: FakeSlack, mode: str, expected: list[str | None]
) -> None:
    adapter = slack_adapter(fake, reply_to_mode=mode)
    target = adapter.reply_target(_inbound("C9", "900.000001"))
    await adapter.send(target, "one")
    await adapter.send(target, "two")
    assert [c.args.get("thread_ts") for c in fake.calls_to("chat.postMessage")] == expected


@pytest.mark.parametrize("mode", ["off", "first", "all"])
async def test_a_message_in_a_thread_is_always_answered_there(fake: FakeSlack, mode: str) -> None:
    adapter = slack_adapter(fake, reply_to_mode=mode)
    target = adapter.reply_target(_inbound("C9", "901.000005", thread_ts="901.000001"))
    await adapter.send(target, "one")
    await adapter.send(target, "two")
    threads = [c.args.get("thread_ts") for c in fake.calls_to("chat.postMessage")]
    assert threads == ["901.000001", "901.000001"]


async def test_a_long_answer_is_split_without_loss(fake: FakeSlack) -> None:
    adapter = slack_adapter(fake)
    prose = [f"Paragraph {n:03d} says something plain and unremarkable here." for n in range(80)]
    code = [f"value_{n:03d} = compute({n}) + offset" for n in range(130)]
    markdown = "\n\n".join(prose) + "\n\n```\n" + "\n".join(code) + "\n```\n"
    assert len(markdown) > 9000
    refs = await adapter.send(Target("slack", "C1"), markdown)
    texts = [c.args["text"] for c in fake.calls_to("chat.postMessage")]
    assert len(texts) >= 3 and len(refs) == len(texts)
    assert all(len(text) <= 4000 for text in texts)
    assert len({ref.message_id for ref in refs}) == len(refs)

    def words(text: str) -> list[str]:
        return [w for w in text.replace("```", " ").split()]

    assert words("\n".join(texts)) == words(markdown)


async def test_a_429_is_waited_out_and_posted_once(fake: FakeSlack) -> None:
    adapter = slack_adapter(fake)
    waits: list[float] = []

    async def record(delay: float) -> None:
        waits.append(delay)

    adapter.api.sleep = record
    fake.fail_next("chat.postMessage", "ratelimited", status=429, retry_after=7)
    refs = await adapter.send(Target("slack", "C1"), "patience")
    assert waits == [7.0]
    assert len(fake.calls_to("chat.postMessage")) == 2  # one refused, one posted
    assert len(refs) == 1


async def test_slack_refusals_raise_with_slacks_error(fake: FakeSlack) -> None:
    adapter = slack_adapter(fake)
    fake.fail_next("chat.postMessage", "channel_not_found")
    with pytest.raises(SlackError) as caught:
        await adapter.send(Target("slack", "CX"), "hello?")
    assert caught.value.error == "channel_not_found"
    assert len(fake.calls_to("chat.postMessage")) == 1  # never retried


async def test_edit_react_and_typing(fake: FakeSlack) -> None:
    adapter = slack_adapter(fake)
    ref = MessageRef(Target("slack", "C1", thread_id="1.000001"), "1.000002")
    await adapter.edit(ref, "changed")
    [update] = fake.calls_to("chat.update")
    assert (update.args["channel"], update.args["ts"]) == ("C1", "1.000002")
    assert "changed" in update.args["text"]

    await adapter.react(ref, "👀")
    fake.fail_next("reactions.add", "already_reacted")
    await adapter.react(ref, ":eyes:")
    reactions = fake.calls_to("reactions.add")
    assert [(r.args["name"], r.args["timestamp"]) for r in reactions] == [("eyes", "1.000002")] * 2

    await adapter.typing(Target("slack", "C1"))
    assert fake.calls_to("assistant.threads.setStatus") == []
    fake.fail_next("assistant.threads.setStatus", "not_allowed")
    await adapter.typing(ref.target)  # best effort: a refusal is only logged
    await adapter.typing(ref.target)
    statuses = fake.calls_to("assistant.threads.setStatus")
    assert [s.args["thread_ts"] for s in statuses] == ["1.000001"] * 2
    assert statuses[1].args["status"] == "is typing…"


async def test_start_fails_on_a_refused_token_and_settings_are_checked(fake: FakeSlack) -> None:
    adapter = slack_adapter(fake)
    fake.fail_next("auth.test", "invalid_auth")
    with pytest.raises(SlackError, match="invalid_auth"):
        await adapter.start(Inbox())
    await adapter.stop()
    with pytest.raises(ValueError, match="app-level token"):
        SlackAdapter(bot_token="xoxb-test")
    with pytest.raises(ValueError, match="signing secret"):
        SlackAdapter(bot_token="xoxb-test", mode="http")


@pytest.mark.parametrize(
    ("mode", "thread", "reply_to"),
    [("off", None, None), ("all", "950.000001", None), ("first", None, "950.000001")],
)
async def test_inbound_messages_carry_the_reply_target_of_the_mode(
    fake: FakeSlack, store: SpyStore, mode: str, thread: str | None, reply_to: str | None
) -> None:
    adapter = slack_adapter(fake, reply_to_mode=mode)
    inbox = Inbox()
    await asyncio.wait_for(adapter.start(inbox), HANG_GUARD)
    try:
        await fake.send_event(event_callback(_mention("C5", "950.000001", f"<@{BOT_USER_ID}> go")))
        await until(lambda: len(inbox.messages) == 1, "the mention")
        target = inbox.messages[0].reply_target()
        assert (target.thread_id, target.reply_to_id) == (thread, reply_to)
    finally:
        await adapter.stop()


async def test_working_on_a_channel_message_shows_no_typing_status(
    fake: FakeSlack, socket_bot: tuple[SlackAdapter, Inbox]
) -> None:
    # A channel message's status is its reaction (botd.conversation.reactions); the typing
    # indicator, which Slack has only in threads, leaves it alone.
    adapter, inbox = socket_bot
    await fake.send_event(event_callback(_mention("C6", "960.000001", f"<@{BOT_USER_ID}> work")))
    await until(lambda: len(inbox.messages) == 1, "the mention")
    await adapter.typing(inbox.messages[0].reply_target())
    assert fake.calls_to("reactions.add") == []
    assert fake.calls_to("assistant.threads.setStatus") == []


async def test_an_unreachable_slack_fails_start_with_one_line(unused_port: int) -> None:
    adapter = SlackAdapter(
        bot_token="xoxb-test",
        app_token="xapp-test",
        api_base_url=f"http://127.0.0.1:{unused_port}/api/",
    )
    with pytest.raises(ChannelStartError, match="cannot reach Slack") as caught:
        await asyncio.wait_for(adapter.start(Inbox()), HANG_GUARD)
    assert isinstance(caught.value, SlackError)
    assert "\n" not in str(caught.value)
    await adapter.stop()
