"""DiscordAdapter end to end: the real discord.py client against the loopback fake.

Messages the adapter must ignore are followed by a sentinel message; discord.py handles
gateway events in order and the adapter does not await before handing a message to the sink,
so when the sentinel reaches the sink the ignored ones have been decided.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import discord
import pytest
from discord.gateway import DiscordWebSocket

from botd.channels.discord.adapter import DiscordAdapter, DiscordStartError
from botd.channels.errors import ChannelError, ChannelStartError
from botd.chat import MessageRef, Target
from botd.store import Store
from tests.channels.discord.harness import TOKEN, Sink, make_adapter
from tests.channels.routed import through_router
from tests.fakes.discord_api import (
    BOT_ID,
    BOT_USER,
    CHANNEL_ID,
    DM_CHANNEL_ID,
    MESSAGE_CONTENT_INTENT,
    OTHER_BOT_ID,
    THREAD_ID,
    USER_ID,
    FakeDiscordAPI,
    RecordedRequest,
    user,
)
from tests.support.waiting import HANG_GUARD


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscordAPI]:
    async with FakeDiscordAPI() as server:
        yield server


@pytest.fixture
async def running(fake: FakeDiscordAPI, store: Store) -> AsyncIterator[tuple[DiscordAdapter, Sink]]:
    sink = Sink()
    adapter = make_adapter(fake)
    await asyncio.wait_for(adapter.start(through_router(store, sink, "discord")), HANG_GUARD)
    yield adapter, sink
    await asyncio.wait_for(adapter.stop(), HANG_GUARD)


def alice() -> dict[str, Any]:
    return user(USER_ID, "alice")


# --- connection ------------------------------------------------------------------------------


async def test_identify_requests_the_message_content_intent(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI
) -> None:
    [identify] = fake.identifies
    assert identify["token"] == TOKEN
    intents = discord.Intents._from_value(identify["intents"])
    assert identify["intents"] & MESSAGE_CONTENT_INTENT
    assert intents.guilds and intents.guild_messages and intents.dm_messages
    assert any(r.path.endswith("/users/@me") for r in fake.requests)  # REST came here too


async def test_the_urls_are_the_adapters_own_and_stop_is_idempotent(
    fake: FakeDiscordAPI, store: Store
) -> None:
    """The fake's URLs are the adapter's alone: discord.py's process-wide defaults stay
    Discord's while it runs (another bot in the process would go there), before and after."""
    base, gateway = discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    assert base.startswith("https://discord.com/api/")
    adapter = make_adapter(fake)
    await asyncio.wait_for(adapter.start(Sink()), HANG_GUARD)
    assert fake.identifies  # its gateway session is the fake's
    assert (base, gateway) == (discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
    await adapter.stop()
    await adapter.stop()
    assert (base, gateway) == (discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)


async def test_missing_content_intent_flag_logs_a_warning(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="botd.channels.discord")
    async with FakeDiscordAPI(application_flags=0) as fake:
        adapter = make_adapter(fake)
        await asyncio.wait_for(adapter.start(Sink()), HANG_GUARD)
        await adapter.stop()
    assert "Message Content Intent" in caplog.text


async def test_empty_content_mentioning_the_bot_logs_a_warning(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="botd.channels.discord")
    _, sink = running
    await fake.dispatch_message(fake.message("", mentions=(BOT_USER,)))
    assert (await sink.next()).mentions_bot
    assert "Message Content Intent" in caplog.text


async def test_disallowed_intents_close_is_a_clear_startup_error(store: Store) -> None:
    async with FakeDiscordAPI(identify_close_code=4014) as fake:
        adapter = make_adapter(fake)
        with pytest.raises(DiscordStartError, match="Message Content Intent"):
            await asyncio.wait_for(adapter.start(Sink()), HANG_GUARD)
        await adapter.stop()


async def test_an_unreachable_discord_is_a_one_line_startup_error(unused_port: int) -> None:
    adapter = DiscordAdapter(
        TOKEN,
        api_base_url=f"http://127.0.0.1:{unused_port}/api/v10",
        gateway_url=f"ws://127.0.0.1:{unused_port}/gateway/",
        ready_timeout=HANG_GUARD,
    )
    with pytest.raises(ChannelStartError, match="Discord") as caught:
        await asyncio.wait_for(adapter.start(Sink()), HANG_GUARD)
    assert isinstance(caught.value, DiscordStartError)
    assert "\n" not in str(caught.value)
    await adapter.stop()


# --- inbound ---------------------------------------------------------------------------------


async def test_a_dm_gets_the_per_user_dm_key(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI
) -> None:
    _, sink = running
    payload = fake.message("hello", channel_id=DM_CHANNEL_ID, guild=False)
    await fake.dispatch_message(payload)
    got = await sink.next()
    assert got.conversation_key == f"discord:dm:{USER_ID}"
    assert got.chat_id == str(DM_CHANNEL_ID)
    assert got.is_direct and got.thread_id is None
    assert (got.text, got.sender_id, got.message_id) == ("hello", str(USER_ID), payload["id"])
    assert got.sender_name == "alice"
    assert got.reply_target() == Target("discord", str(DM_CHANNEL_ID))


async def test_a_lone_surrogate_arrives_replaced_and_is_accepted(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI
) -> None:
    # The fake's JSON escapes it ("\ud800"), so the SDK decodes half a surrogate pair; the
    # sink is behind the router, which stores the message before handing it on.
    _, sink = running
    await fake.dispatch_message(fake.message("hi \ud800", channel_id=DM_CHANNEL_ID, guild=False))
    assert (await sink.next()).text == "hi \ufffd"


async def test_guild_messages_report_whether_they_mention_the_bot(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI
) -> None:
    _, sink = running
    await fake.dispatch_message(fake.message("just chatting"))
    await fake.dispatch_message(fake.message(f"<@{BOT_ID}> help me", mentions=(BOT_USER,)))
    plain, mention = await sink.next(), await sink.next()
    for got in (plain, mention):
        assert got.conversation_key == f"discord:{CHANNEL_ID}"
        assert got.chat_id == str(CHANNEL_ID)
        assert not got.is_direct and got.thread_id is None
    assert not plain.mentions_bot
    assert mention.mentions_bot
    assert mention.text == "help me"


async def test_a_reply_to_the_bot_counts_as_a_mention(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI
) -> None:
    _, sink = running
    ours = fake.message("an earlier answer", author=BOT_USER)
    await fake.dispatch_message(fake.message("follow-up", reply_to=ours))
    got = await sink.next()
    assert got.mentions_bot
    assert got.reply_to_message_id == ours["id"]


async def test_a_thread_message_gets_its_own_key(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI
) -> None:
    _, sink = running
    await fake.dispatch_message(fake.message("in the thread", channel_id=THREAD_ID))
    got = await sink.next()
    assert got.conversation_key == f"discord:{THREAD_ID}"
    # In its channel (whose settings hold in it), as its own thread.
    assert (got.chat_id, got.thread_id) == (str(CHANNEL_ID), str(THREAD_ID))


async def test_own_and_bot_messages_are_ignored(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI
) -> None:
    _, sink = running
    await fake.dispatch_message(fake.message("echo of myself", author=BOT_USER))
    await fake.dispatch_message(fake.message("beep", author=user(OTHER_BOT_ID, "r2", bot=True)))
    await fake.dispatch_message(fake.message("sentinel"))
    assert (await sink.next()).text == "sentinel"
    assert sink.queue.empty()


async def test_only_a_persons_edit_of_a_text_is_handed_on_as_an_edit(
    fake: FakeDiscordAPI,
) -> None:
    sink = Sink()
    adapter = make_adapter(fake)
    await asyncio.wait_for(adapter.start(sink), HANG_GUARD)
    try:
        said = fake.message("see https://example.com", channel_id=THREAD_ID)
        await fake.dispatch_message(said)
        assert (await sink.next()).text == "see https://example.com"
        # Discord adds the link's preview: an update with no edit time, the text as it was.
        await fake.dispatch("MESSAGE_UPDATE", {**said, "embeds": []})
        own = fake.message("draft", author=BOT_USER)
        await fake.dispatch_edit(own, "final", at="2026-01-01T00:00:01+00:00")  # its own
        beep = fake.message("beep", author=user(OTHER_BOT_ID, "r2", bot=True))
        await fake.dispatch_edit(beep, "boop", at="2026-01-01T00:00:02+00:00")
        await fake.dispatch_edit(said, "see https://example.org", at="2026-01-01T00:00:03+00:00")
        edit = await sink.next()
        assert edit.edited and edit.text == "see https://example.org"
        assert (edit.message_id, edit.conversation_key) == (said["id"], f"discord:{THREAD_ID}")
        assert edit.dedupe_keys == (f"{said['id']}:edit:1767225603.000",)
        assert sink.queue.empty()
    finally:
        await adapter.stop()


async def test_other_bots_are_accepted_with_allow_bots(fake: FakeDiscordAPI, store: Store) -> None:
    sink = Sink()
    adapter = make_adapter(fake, allow_bots=True)
    await asyncio.wait_for(adapter.start(sink), HANG_GUARD)
    try:
        await fake.dispatch_message(fake.message("echo of myself", author=BOT_USER))
        await fake.dispatch_message(fake.message("beep", author=user(OTHER_BOT_ID, "r2", bot=True)))
        got = await sink.next()
        assert (got.text, got.sender_id) == ("beep", str(OTHER_BOT_ID))
        await fake.dispatch_message(fake.message("sentinel"))
        assert (await sink.next()).text == "sentinel"
    finally:
        await adapter.stop()


async def test_a_replayed_message_id_is_delivered_once(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI
) -> None:
    _, sink = running
    payload = fake.message("once")
    await fake.dispatch_message(payload)
    await fake.dispatch_message(payload)
    await fake.dispatch_message(fake.message("sentinel"))
    assert [(await sink.next()).text, (await sink.next()).text] == ["once", "sentinel"]


async def test_a_dropped_gateway_reconnects_and_keeps_delivering(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI
) -> None:
    _, sink = running
    await fake.dispatch_message(fake.message("before"))
    assert (await sink.next()).text == "before"
    await asyncio.wait_for(fake.drop_connection(), HANG_GUARD)
    await fake.dispatch_message(fake.message("after"))
    assert (await sink.next()).text == "after"
    assert len(fake.resumes) + len(fake.identifies) == 2


async def test_a_restart_with_the_same_store_redelivers_nothing(
    fake: FakeDiscordAPI, store: Store
) -> None:
    first_sink = Sink()
    first = make_adapter(fake)
    await asyncio.wait_for(first.start(through_router(store, first_sink, "discord")), HANG_GUARD)
    old = fake.message("handled before the restart")
    await fake.dispatch_message(old)
    assert (await first_sink.next()).text == old["content"]
    await first.stop()

    second_sink = Sink()
    second = make_adapter(fake)
    await asyncio.wait_for(second.start(through_router(store, second_sink, "discord")), HANG_GUARD)
    try:
        await fake.dispatch_message(old)
        await fake.dispatch_message(fake.message("new"))
        assert (await second_sink.next()).text == "new"
        assert second_sink.queue.empty()
    finally:
        await second.stop()


# --- outbound --------------------------------------------------------------------------------


def is_message_post(request: RecordedRequest) -> bool:
    return request.method == "POST" and request.path.endswith("/messages")


async def test_a_long_answer_is_split_under_both_limits_without_loss(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI
) -> None:
    adapter, _ = running
    lines = [f"line {i:03d} " + "lorem ipsum dolor sit amet " * 2 for i in range(150)]
    markdown = "\n".join(lines)
    assert len(markdown) >= 9000
    target = Target("discord", str(CHANNEL_ID))
    refs = await asyncio.wait_for(adapter.send(target, markdown), HANG_GUARD)
    posts = fake.message_posts()
    assert len(posts) == len(refs) > 1
    assert all(p.path == f"/channels/{CHANNEL_ID}/messages" for p in posts)
    texts = [p.body["content"] for p in posts]
    assert all(len(t) <= 2000 and len(t.split("\n")) <= 17 for t in texts)
    received = [line.strip() for t in texts for line in t.split("\n") if line.strip()]
    assert received == [line.strip() for line in lines]
    assert len({r.message_id for r in refs}) == len(refs)
    assert all(r.target == target for r in refs)


async def test_an_edit_that_outgrows_one_message_continues_in_new_ones(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI
) -> None:
    adapter, _ = running
    target = Target("discord", str(CHANNEL_ID))
    ref = MessageRef(target, "777")
    words = [f"w{i:04d}" for i in range(600)]
    markdown = "\n".join(" ".join(words[i : i + 6]) for i in range(0, len(words), 6))
    assert len(markdown) > 2000 and markdown.count("\n") > 17

    refs = await asyncio.wait_for(adapter.edit(ref, markdown), HANG_GUARD)

    [patch] = [r for r in fake.requests if r.method == "PATCH"]
    assert patch.path == f"/channels/{CHANNEL_ID}/messages/777"
    posts = fake.message_posts()
    texts = [patch.body["content"], *(p.body["content"] for p in posts)]
    assert all(len(t) <= 2000 and len(t.split("\n")) <= 17 for t in texts)
    assert " ".join(texts).split() == words  # every word once, in order
    assert refs[0] == ref
    assert len(refs) == 1 + len(posts) > 1
    assert all(r.target == target for r in refs)
    assert len({r.message_id for r in refs}) == len(refs)


async def test_a_refused_post_raises_a_channel_error_in_discords_words(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI
) -> None:
    adapter, _ = running
    fake.refuse_next_post(403, 50013, "Missing Permissions")
    with pytest.raises(ChannelError, match="403 Missing Permissions"):
        await asyncio.wait_for(adapter.send(Target("discord", str(CHANNEL_ID)), "hi"), HANG_GUARD)
    assert fake.message_posts() == []


async def test_every_post_limits_allowed_mentions(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI
) -> None:
    adapter, _ = running
    markdown = "@everyone look\n" * 40
    await asyncio.wait_for(adapter.send(Target("discord", str(CHANNEL_ID)), markdown), HANG_GUARD)
    posts = fake.message_posts()
    assert len(posts) > 1
    for post in posts:
        allowed = post.body["allowed_mentions"]
        assert set(allowed["parse"]) == {"users"}
        assert not allowed.get("replied_user", False)


async def test_a_reply_references_only_the_first_chunk(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI
) -> None:
    adapter, _ = running
    target = Target("discord", str(THREAD_ID), thread_id=str(THREAD_ID), reply_to_id="42")
    await asyncio.wait_for(adapter.send(target, "x\n" * 40), HANG_GUARD)
    first, *rest = fake.message_posts()
    assert first.path == f"/channels/{THREAD_ID}/messages"
    assert int(first.body["message_reference"]["message_id"]) == 42
    assert rest and all("message_reference" not in p.body for p in rest)


async def test_a_429_is_waited_out_and_posted_once(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI
) -> None:
    adapter, _ = running
    fake.rate_limit_next_post(retry_after=0.01)
    refs = await asyncio.wait_for(
        adapter.send(Target("discord", str(CHANNEL_ID)), "hello"), HANG_GUARD
    )
    assert len(fake.rate_limited) == 1
    [post] = fake.message_posts()
    assert post.body["content"] == "hello"
    assert len(refs) == 1


async def test_edit_react_and_typing(
    running: tuple[DiscordAdapter, Sink], fake: FakeDiscordAPI
) -> None:
    adapter, _ = running
    target = Target("discord", str(CHANNEL_ID))
    ref = MessageRef(target, "777")
    await asyncio.wait_for(adapter.edit(ref, "**changed**"), HANG_GUARD)
    await asyncio.wait_for(adapter.react(ref, "👍"), HANG_GUARD)
    await asyncio.wait_for(adapter.typing(target), HANG_GUARD)
    calls = [(r.method, r.path) for r in fake.requests if r.path.startswith("/channels/")]
    assert calls == [
        ("PATCH", f"/channels/{CHANNEL_ID}/messages/777"),
        ("PUT", f"/channels/{CHANNEL_ID}/messages/777/reactions/👍/@me"),
        ("POST", f"/channels/{CHANNEL_ID}/typing"),
    ]
    patch = fake.requests[-3]
    assert "changed" in patch.body["content"]
    assert set(patch.body["allowed_mentions"]["parse"]) == {"users"}


@asynccontextmanager
async def threading_bot(
    fake: FakeDiscordAPI, store: Store, **options: Any
) -> AsyncIterator[tuple[DiscordAdapter, Sink]]:
    sink = Sink()
    adapter = make_adapter(fake, auto_thread=True, **options)
    await asyncio.wait_for(adapter.start(through_router(store, sink, "discord")), HANG_GUARD)
    try:
        yield adapter, sink
    finally:
        await asyncio.wait_for(adapter.stop(), HANG_GUARD)


def _mentioning(fake: FakeDiscordAPI, text: str, channel_id: int = CHANNEL_ID) -> dict[str, Any]:
    return fake.message(f"<@{BOT_ID}> {text}", channel_id=channel_id, mentions=(BOT_USER,))


async def test_auto_thread_answers_a_mention_in_a_thread_started_on_it(
    fake: FakeDiscordAPI, store: Store
) -> None:
    async with threading_bot(fake, store) as (adapter, sink):
        asked = _mentioning(fake, "why is the build red?\nlog follows")
        await fake.dispatch_message(asked)
        got = await sink.next()
        [(thread_id, started_on)] = fake.threads_started.items()
        assert started_on == asked["id"]
        assert got.conversation_key == f"discord:{thread_id}"
        assert (got.chat_id, got.thread_id) == (str(CHANNEL_ID), thread_id)
        await adapter.send(got.reply_target(), "Looking.")
        # The thread's later messages need no mention: the bot started it.
        await fake.dispatch_message(fake.message("and now?", channel_id=int(thread_id)))
        later = await sink.next()
    [start] = [r for r in fake.requests if r.path.endswith("/threads")]
    assert start.body["name"] == "why is the build red?"
    assert fake.message_posts()[-1].path.endswith(f"/channels/{thread_id}/messages")
    assert later.mentions_bot and later.conversation_key == f"discord:{thread_id}"
    assert len(fake.threads_started) == 1  # nothing started for a message in a thread


async def test_auto_thread_leaves_dms_plain_messages_and_refused_senders_alone(
    fake: FakeDiscordAPI, store: Store
) -> None:
    async with threading_bot(fake, store, admits=lambda m: m.sender_id != "666") as (_, sink):
        await fake.dispatch_message(fake.message("just chatting"))
        await fake.dispatch_message(
            fake.message("dm", channel_id=DM_CHANNEL_ID, guild=False, mentions=(BOT_USER,))
        )
        stranger = _mentioning(fake, "let me in")
        stranger["author"] = user(666, "mallory")
        await fake.dispatch_message(stranger)
        for _ in range(3):
            assert (await sink.next()).thread_id is None
    assert fake.threads_started == {}


async def test_a_refused_thread_is_logged_and_the_mention_answered_in_the_channel(
    fake: FakeDiscordAPI, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    fake.refuse_threads = (403, 50013, "Missing Permissions")
    async with threading_bot(fake, store) as (_, sink):
        await fake.dispatch_message(_mentioning(fake, "help"))
        got = await sink.next()
    assert got.conversation_key == f"discord:{CHANNEL_ID}" and got.thread_id is None
    assert "no thread started" in caplog.text and "403 Missing Permissions" in caplog.text
