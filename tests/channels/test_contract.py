"""One contract, three platforms: the whole stack end to end against the loopback fakes.

Each test drives platform fake -> real SDK -> adapter -> Router -> Conversations (scripted
model) -> ChannelDelivery -> adapter -> real SDK -> fake, and is written once: a small
per-platform driver pushes inbound messages and reads back what the bot posted.

Synchronisation: the adapter hands each inbound message to a wrapper around the router that
records the router's decision; a test waits (under a generous hang guard) until the decisions
it expects are in, then ``Conversations.drain()`` waits for the runs, whose deliveries are
awaited, so every post has reached the fake by then.
"""

from __future__ import annotations

import asyncio
import html
import itertools
import re
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from botd.agent.loop import LoopConfig
from botd.agent.providers.scripted import ScriptedProvider, ScriptedTurn
from botd.agent.tools.base import Tool
from botd.agent.tools.message.tool import MessageTool
from botd.channels.base import Ack, ChannelAdapter
from botd.channels.discord.adapter import DiscordAdapter
from botd.channels.slack.adapter import SlackAdapter
from botd.channels.telegram.adapter import TelegramAdapter
from botd.chat import InboundMessage, MessageRef, Target
from botd.cluster.fencing import RunScope
from botd.conversation import Conversations, SessionSettings
from botd.delivery import ChannelDelivery, RetrySettings
from botd.inbound.access import AccessPolicy, Decision, GroupRule
from botd.inbound.router import Router
from botd.store.sqlite import SqliteStore
from botd.subscriber import SubscriberConfig
from tests.fakes import discord_api, slack_api, telegram_api
from tests.fakes.discord_api import FakeDiscordAPI
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.waiting import HANG_GUARD

PLATFORMS = ("telegram", "slack", "discord")


@dataclass(frozen=True)
class Post:
    """A message the bot posted, as the platform received it."""

    chat: str
    thread: str | None
    text: str


class Driver(Protocol):
    """What a contract test needs from a platform (fake + adapter factory)."""

    name: str
    limit: int
    line_limit: int | None
    groups: tuple[str, ...]
    """Group/channel ids on the allowlist (require_mention)."""
    dm_chat: str
    group_chat: str

    def adapter(self, store: SqliteStore) -> ChannelAdapter: ...

    async def push_dm(self, text: str) -> str:
        """Push a DM; returns the id the router records in the store for it."""
        ...

    async def push_group(self, text: str, *, mention: bool) -> str: ...

    async def push_thread(self, text: str) -> tuple[str, tuple[str, str | None]]:
        """Push a mention in a thread/topic; returns its id and where answers must go."""
        ...

    async def replay(self, handle: str) -> None:
        """Deliver an earlier message again, as the platform does after a restart."""
        ...

    async def edit(self, handle: str, text: str) -> None:
        """Its sender edits an earlier message to ``text``; the platform sends the edit."""
        ...

    def posted(self) -> list[Post]:
        """Successful posts, in order."""
        ...

    def attempts(self) -> int:
        """Post requests made, refused ones included."""
        ...

    def edited(self) -> list[str]:
        """The texts of successful edits, in order."""
        ...

    def fail_next_post_with_429(self) -> None: ...

    def fail_next_posts_with_503_then_reset(self) -> None:
        """The next post is answered 503, the one after loses its connection unanswered."""
        ...

    def shown_in_dm(self) -> list[str]:
        """The bot's messages in the DM chat as they show now (after edits and deletes)."""
        ...

    def visible(self, text: str) -> str:
        """The posted text as a reader sees it (markup and fence markers removed)."""
        ...

    def balanced(self, text: str) -> bool:
        """Whether one posted message's code formatting is balanced."""
        ...


def _fence_words(text: str) -> str:
    return " ".join(w for w in text.split() if not w.startswith("```"))


# --- Telegram ---------------------------------------------------------------------------------

TG_TOKEN = "123456:TEST-TOKEN"
TG_DM, TG_GROUP, TG_FORUM, TG_TOPIC = 777, -100123, -100500, 42


class TelegramDriver:
    name = "telegram"
    limit = 4096
    line_limit: int | None = None
    groups: tuple[str, ...] = (str(TG_GROUP), str(TG_FORUM))
    dm_chat = str(TG_DM)
    group_chat = str(TG_GROUP)

    def __init__(self, fake: FakeTelegramAPI) -> None:
        self.fake = fake
        # As if Telegram never learned what was read: only the adapter's offset and dedupe
        # keep a restart from replaying.
        fake.forget_confirmed = False
        self._texts: dict[str, tuple[int, str, int | None]] = {}
        self._messages: dict[str, dict[str, Any]] = {}
        self._edits = itertools.count(1)

    def adapter(self, store: SqliteStore) -> ChannelAdapter:
        return TelegramAdapter(
            TG_TOKEN, offsets=store, api_base_url=self.fake.base_url, poll_timeout=5
        )

    def _push(self, chat: int, text: str, thread: int | None = None) -> str:
        forum = chat == TG_FORUM
        message = self.fake.push_text(chat, text, is_forum=forum, thread_id=thread)
        handle = f"{chat}:{message['message_id']}"
        self._texts[handle] = (chat, text, thread)
        self._messages[handle] = message
        return handle

    async def push_dm(self, text: str) -> str:
        return self._push(TG_DM, text)

    async def push_group(self, text: str, *, mention: bool) -> str:
        return self._push(TG_GROUP, f"@{telegram_api.BOT_USERNAME} {text}" if mention else text)

    async def push_thread(self, text: str) -> tuple[str, tuple[str, str | None]]:
        handle = self._push(TG_FORUM, f"@{telegram_api.BOT_USERNAME} {text}", TG_TOPIC)
        return handle, (str(TG_FORUM), str(TG_TOPIC))

    async def replay(self, handle: str) -> None:
        chat, text, thread = self._texts[handle]
        message_id = int(handle.rsplit(":", 1)[1])
        forum = chat == TG_FORUM
        self.fake.push_text(chat, text, is_forum=forum, thread_id=thread, message_id=message_id)

    async def edit(self, handle: str, text: str) -> None:
        message = self._messages[handle]
        self.fake.push_edit(message, text, edit_date=message["date"] + next(self._edits))

    def posted(self) -> list[Post]:
        return [
            Post(
                str(c.params["chat_id"]),
                str(c.params["message_thread_id"]) if "message_thread_id" in c.params else None,
                str(c.params["text"]),
            )
            for c in self.fake.calls_to("sendMessage", ok_only=True)
        ]

    def attempts(self) -> int:
        return len(self.fake.calls_to("sendMessage"))

    def edited(self) -> list[str]:
        return [str(c.params["text"]) for c in self.fake.calls_to("editMessageText", ok_only=True)]

    def fail_next_post_with_429(self) -> None:
        self.fake.fail_next("sendMessage", telegram_api.retry_after(1))

    def fail_next_posts_with_503_then_reset(self) -> None:
        self.fake.fail_next("sendMessage", telegram_api.server_error(503))
        self.fake.reset_next("sendMessage")

    def shown_in_dm(self) -> list[str]:
        return self.fake.visible(TG_DM)

    def visible(self, text: str) -> str:
        return telegram_api.parse_html(text)[0]

    def balanced(self, text: str) -> bool:
        _, error = telegram_api.parse_html(text)
        return error is None and text.count("<pre") == text.count("</pre>")


# --- Slack (Socket Mode) ----------------------------------------------------------------------


class SlackDriver:
    name = "slack"
    limit = 4000
    line_limit: int | None = None
    groups: tuple[str, ...] = ("C1",)
    dm_chat = "D1"
    group_chat = "C1"
    THREAD_TS = "500.000001"

    def __init__(self, fake: FakeSlack) -> None:
        self.fake = fake
        self._ts = itertools.count(1)
        self._bodies: dict[str, dict[str, Any]] = {}
        self._refused: set[int] = set()

    def adapter(self, store: SqliteStore) -> ChannelAdapter:
        return SlackAdapter(
            bot_token="xoxb-test",
            app_token="xapp-test",
            api_base_url=self.fake.base_url,
        )

    async def _push(self, channel: str, text: str, *, twin: bool = False, **extra: Any) -> str:
        ts = f"{1000 + next(self._ts)}.000100"
        event = {"type": "message", "channel": channel, "user": "U1", "text": text, "ts": ts}
        event["channel_type"] = "im" if channel.startswith("D") else "channel"
        event.update(extra)
        body = slack_api.event_callback(event)
        self._bodies[body["event_id"]] = body
        await self.fake.send_event(body)
        if twin:  # Slack delivers a channel mention twice: a message and an app_mention
            mention = {k: v for k, v in event.items() if k != "channel_type"}
            await self.fake.send_event(slack_api.event_callback({**mention, "type": "app_mention"}))
        return str(body["event_id"])

    async def push_dm(self, text: str) -> str:
        return await self._push("D1", text)

    async def push_group(self, text: str, *, mention: bool) -> str:
        if mention:
            return await self._push("C1", f"<@{slack_api.BOT_USER_ID}> {text}", twin=True)
        return await self._push("C1", text)

    async def push_thread(self, text: str) -> tuple[str, tuple[str, str | None]]:
        handle = await self._push(
            "C1", f"<@{slack_api.BOT_USER_ID}> {text}", twin=True, thread_ts=self.THREAD_TS
        )
        return handle, ("C1", self.THREAD_TS)

    async def replay(self, handle: str) -> None:
        await self.fake.send_event(self._bodies[handle], retry_attempt=1)

    async def edit(self, handle: str, text: str) -> None:
        original = self._bodies[handle]["event"]
        edited_ts = f"{1000 + next(self._ts)}.000100"
        event = slack_api.message_changed(original, text, edited_ts=edited_ts)
        await self.fake.send_event(slack_api.event_callback(event))

    def posted(self) -> list[Post]:
        calls = self.fake.calls_to("chat.postMessage")
        return [
            Post(str(c.args["channel"]), c.args.get("thread_ts") or None, str(c.args["text"]))
            for i, c in enumerate(calls)
            if i not in self._refused
        ]

    def attempts(self) -> int:
        return len(self.fake.calls_to("chat.postMessage"))

    def edited(self) -> list[str]:
        return [str(c.args["text"]) for c in self.fake.calls_to("chat.update")]

    def fail_next_post_with_429(self) -> None:
        self._refused.add(len(self.fake.calls_to("chat.postMessage")))
        self.fake.fail_next("chat.postMessage", "ratelimited", status=429, retry_after=1)

    def fail_next_posts_with_503_then_reset(self) -> None:
        sent = len(self.fake.calls_to("chat.postMessage"))
        self._refused.update((sent, sent + 1))
        self.fake.fail_next("chat.postMessage", "service_unavailable", status=503)
        self.fake.reset_next("chat.postMessage")

    def shown_in_dm(self) -> list[str]:
        return self.fake.visible(self.dm_chat)

    def visible(self, text: str) -> str:
        return html.unescape(_fence_words(text))

    def balanced(self, text: str) -> bool:
        return text.count("```") % 2 == 0


# --- Discord ----------------------------------------------------------------------------------


class DiscordDriver:
    name = "discord"
    limit = 2000
    line_limit: int | None = 17
    # Only the channel: its threads are under its entry (before, each thread needed its own).
    groups: tuple[str, ...] = (str(discord_api.CHANNEL_ID),)
    dm_chat = str(discord_api.DM_CHANNEL_ID)
    group_chat = str(discord_api.CHANNEL_ID)

    def __init__(self, fake: FakeDiscordAPI) -> None:
        self.fake = fake
        self._payloads: dict[str, dict[str, Any]] = {}

    def adapter(self, store: SqliteStore) -> ChannelAdapter:
        return DiscordAdapter(
            "fake-discord-token",
            api_base_url=self.fake.base_url,
            gateway_url=self.fake.gateway_url,
            guild_ready_timeout=0.05,
            ready_timeout=HANG_GUARD,
        )

    async def _push(self, payload: dict[str, Any]) -> str:
        self._payloads[payload["id"]] = payload
        await asyncio.wait_for(self.fake.dispatch_message(payload), HANG_GUARD)
        return str(payload["id"])

    def _mention(self, text: str, channel_id: int) -> dict[str, Any]:
        content = f"<@{discord_api.BOT_ID}> {text}"
        return self.fake.message(content, channel_id=channel_id, mentions=(discord_api.BOT_USER,))

    async def push_dm(self, text: str) -> str:
        return await self._push(
            self.fake.message(text, channel_id=discord_api.DM_CHANNEL_ID, guild=False)
        )

    async def push_group(self, text: str, *, mention: bool) -> str:
        if mention:
            return await self._push(self._mention(text, discord_api.CHANNEL_ID))
        return await self._push(self.fake.message(text, channel_id=discord_api.CHANNEL_ID))

    async def push_thread(self, text: str) -> tuple[str, tuple[str, str | None]]:
        handle = await self._push(self._mention(text, discord_api.THREAD_ID))
        return handle, (str(discord_api.THREAD_ID), None)

    async def replay(self, handle: str) -> None:
        await asyncio.wait_for(self.fake.dispatch_message(self._payloads[handle]), HANG_GUARD)

    async def edit(self, handle: str, text: str) -> None:
        at = f"2026-01-01T00:00:{len(self._payloads):02d}+00:00"
        await asyncio.wait_for(
            self.fake.dispatch_edit(self._payloads[handle], text, at=at), HANG_GUARD
        )

    def posted(self) -> list[Post]:
        return [
            Post(p.path.split("/")[2], None, str(p.body["content"]))
            for p in self.fake.message_posts()
        ]

    def attempts(self) -> int:
        return len(self.fake.message_posts()) + len(self.fake.rate_limited)

    def edited(self) -> list[str]:
        return [str(r.body["content"]) for r in self.fake.requests if r.method == "PATCH"]

    def fail_next_post_with_429(self) -> None:
        self.fake.rate_limit_next_post(retry_after=0.01)

    def fail_next_posts_with_503_then_reset(self) -> None:
        self.fake.fail_next("POST", 503)
        self.fake.reset_next("POST")

    def shown_in_dm(self) -> list[str]:
        return self.fake.visible(int(self.dm_chat))

    def visible(self, text: str) -> str:
        return _fence_words(text)

    def balanced(self, text: str) -> bool:
        return text.count("```") % 2 == 0


# --- fixtures ---------------------------------------------------------------------------------


class SpyStore(SqliteStore):
    """A real store that also lists every inbound id it was asked about."""

    asked: list[str]
    _asked_more: asyncio.Event

    async def seen_inbound(self, channel: str, *keys: str) -> bool:
        self.asked.extend(keys)
        self._asked_more.set()
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
        self._asked_more.set()
        return await super().accept_inbound(
            channel,
            keys,
            message,
            consume_chatter=consume_chatter,
            unless_chatter_kept=unless_chatter_kept,
            chatter_read_by=chatter_read_by,
        )

    async def wait_asked(self, message_id: str, times: int) -> None:
        """Wait until ``message_id`` was looked up ``times`` times in all (hang-guarded)."""
        async with asyncio.timeout(HANG_GUARD):
            while self.asked.count(message_id) < times:
                self._asked_more.clear()
                await self._asked_more.wait()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SpyStore]:
    (tmp_path / "state").mkdir()
    spy = SpyStore(tmp_path / "state" / "botd.db")
    spy.asked = []
    spy._asked_more = asyncio.Event()
    yield spy
    spy.close()


@pytest.fixture(params=PLATFORMS)
async def driver(request: pytest.FixtureRequest) -> AsyncIterator[Driver]:
    if request.param == "telegram":
        async with FakeTelegramAPI(TG_TOKEN) as telegram:
            yield TelegramDriver(telegram)
    elif request.param == "slack":
        async with FakeSlack() as slack:
            yield SlackDriver(slack)
    else:
        async with FakeDiscordAPI() as fake_discord:
            yield DiscordDriver(fake_discord)


class Stack:
    """adapter -> Router -> Conversations -> ChannelDelivery -> adapter, on one store."""

    def __init__(
        self,
        driver: Driver,
        store: SqliteStore,
        provider: ScriptedProvider,
        *,
        message_tool: bool = False,
        block_chunking: bool = True,
    ) -> None:
        self.adapter = driver.adapter(store)
        # Tiny backoff: retries are exercised, never waited for.
        quick = RetrySettings(budget=30.0, first=0.01, cap=0.05)
        self.delivery = ChannelDelivery({driver.name: self.adapter}, retry=quick)
        tools: Callable[[InboundMessage], Sequence[Tool]] | None = None
        if message_tool:
            tools = lambda _message: [MessageTool(self._send)]  # noqa: E731
        self.sessions = Conversations(
            store,
            provider,
            self.delivery,
            SessionSettings(
                loop=LoopConfig("scripted"),
                subscriber=SubscriberConfig()
                if block_chunking
                else SubscriberConfig(chunking=None),
            ),
            tools=tools,
        )
        policy = AccessPolicy(
            dm_policy="open",
            group_policy="allowlist",
            groups={chat: GroupRule(require_mention=True) for chat in driver.groups},
        )
        self.router = Router(store, self.sessions.submit, self._reply, {driver.name: policy})
        self.decisions: list[tuple[InboundMessage, Decision]] = []
        self._changed = asyncio.Condition()

    async def _send(self, target: Target, text: str, scope: RunScope) -> MessageRef:
        refs = await self.delivery.send_text(target, text, scope=scope)
        return refs[0]

    async def _reply(self, target: Target, text: str) -> None:
        await self.delivery.send_text(target, text)

    async def _inbound(self, message: InboundMessage, *, ack: Ack | None = None) -> None:
        decision = await self.router.handle(message, ack=ack)
        async with self._changed:
            self.decisions.append((message, decision))
            self._changed.notify_all()

    async def start(self) -> None:
        await asyncio.wait_for(self.adapter.start(self._inbound), HANG_GUARD)

    async def stop(self) -> None:
        await asyncio.wait_for(self.sessions.close(), HANG_GUARD)
        await asyncio.wait_for(self.adapter.stop(), HANG_GUARD)

    async def settle(self, decisions: int) -> list[tuple[InboundMessage, Decision]]:
        """Wait until the router decided ``decisions`` messages and every run is done."""
        async with asyncio.timeout(HANG_GUARD):
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.decisions) >= decisions)
            await self.sessions.drain()
        return list(self.decisions)


@pytest.fixture
async def stack_factory(driver: Driver, store: SpyStore) -> AsyncIterator[Callable[..., Any]]:
    started: list[Stack] = []

    async def make(
        script: list[ScriptedTurn] | None = None,
        *,
        message_tool: bool = False,
        block_chunking: bool = True,
    ) -> Stack:
        provider = ScriptedProvider(script)
        stack = Stack(
            driver, store, provider, message_tool=message_tool, block_chunking=block_chunking
        )
        await stack.start()
        started.append(stack)
        return stack

    yield make
    for stack in started:
        await stack.stop()


# --- the contract -----------------------------------------------------------------------------


async def test_a_dm_is_answered(driver: Driver, stack_factory: Callable[..., Any]) -> None:
    stack = await stack_factory()
    await driver.push_dm("hello alpha")
    [(_, decision)] = await stack.settle(1)
    assert decision.accepted
    [post] = driver.posted()
    assert post.chat == driver.dm_chat
    assert post.thread is None
    assert driver.visible(post.text).strip() == "You said: hello alpha"


async def test_a_group_message_is_answered_only_when_it_mentions_the_bot(
    driver: Driver, stack_factory: Callable[..., Any]
) -> None:
    stack = await stack_factory()
    await driver.push_group("just chatting bravo", mention=False)
    [(plain, decision)] = await stack.settle(1)
    assert not plain.mentions_bot
    assert not decision.accepted
    assert driver.posted() == []

    await driver.push_group("please help charlie", mention=True)
    decisions = await stack.settle(2)
    assert decisions[1][1].accepted
    [post] = driver.posted()
    assert post.chat == driver.group_chat
    assert post.thread is None
    answer = driver.visible(post.text)
    assert answer.startswith("You said:")
    assert answer.rstrip().endswith("please help charlie")
    assert "just chatting bravo" in answer  # kept as context, not answered on its own


async def test_a_mention_keeps_the_messages_line_breaks_and_indentation(
    driver: Driver, stack_factory: Callable[..., Any]
) -> None:
    # Before, the bot's name was taken out by joining every word with one space: a pasted
    # code block or log reached the model as one line.
    stack = await stack_factory()
    pasted = "why does this fail?\n```\ndef f():\n    return 1\n```\nthanks echo"
    await driver.push_group(pasted, mention=True)
    [(message, decision)] = await stack.settle(1)
    assert decision.accepted and message.mentions_bot
    assert message.text == pasted


async def test_a_thread_message_is_answered_in_its_thread(
    driver: Driver, stack_factory: Callable[..., Any]
) -> None:
    stack = await stack_factory()
    _, (chat, thread) = await driver.push_thread("in the thread delta")
    [(message, decision)] = await stack.settle(1)
    assert decision.accepted and message.thread_id is not None
    [post] = driver.posted()
    assert (post.chat, post.thread) == (chat, thread)
    assert driver.visible(post.text).rstrip().endswith("in the thread delta")


async def test_an_edit_is_shown_with_the_next_message_once_and_answered_by_nothing(
    driver: Driver, stack_factory: Callable[..., Any]
) -> None:
    # People fix a message after sending it: the bot sees what it says now with their next
    # message (not the old text alone), and the edit itself gets no answer.
    stack = await stack_factory()
    handle = await driver.push_dm("meet at noon foxtrot")
    await stack.settle(1)
    await driver.edit(handle, "meet at one golf")
    edited, decision = (await stack.settle(2))[1]
    assert edited.edited and edited.text == "meet at one golf"
    assert not decision.accepted and len(driver.posted()) == 1
    await driver.push_dm("where hotel")
    decisions = await stack.settle(3)
    assert [d.accepted for _, d in decisions] == [True, False, True]
    await driver.push_dm("thanks india")
    await stack.settle(4)
    _, second, third = (driver.visible(p.text) for p in driver.posted())
    assert "meet at one golf" in second and second.rstrip().endswith("where hotel")
    assert "golf" not in third  # shown once


async def test_an_edit_in_a_group_is_context_even_without_a_mention(
    driver: Driver, stack_factory: Callable[..., Any]
) -> None:
    stack = await stack_factory()
    handle = await driver.push_group("lunch at noon juliet", mention=False)
    await stack.settle(1)
    await driver.edit(handle, "lunch at one kilo")
    await driver.push_group("what time lima", mention=True)
    await stack.settle(3)
    [post] = driver.posted()
    answer = driver.visible(post.text)
    assert "lunch at noon juliet" in answer and "lunch at one kilo" in answer


def _long_answer() -> tuple[str, list[str]]:
    """About 9,000 characters of Markdown with a code block, made of unique words."""
    words = [f"w{i:04d}" for i in range(1000)]
    code = [f"line_{i:04d} = {i}" for i in range(200)]
    paragraphs = [" ".join(words[i : i + 50]) for i in range(0, 1000, 50)]
    markdown = (
        "\n\n".join(paragraphs[:10])
        + "\n\n```python\n"
        + "\n".join(code)
        + "\n```\n\n"
        + "\n\n".join(paragraphs[10:])
    )
    tokens = words[:500] + [t for line in code for t in line.split(" ")] + words[500:]
    return markdown, tokens


@pytest.mark.parametrize(
    "block_chunking",
    [True, False],
    ids=["streamed-blocks", "one-block"],  # one-block: the adapter alone splits the answer
)
async def test_a_long_answer_is_split_under_the_platform_limits_without_loss(
    driver: Driver, stack_factory: Callable[..., Any], block_chunking: bool
) -> None:
    markdown, tokens = _long_answer()
    assert len(markdown) > 9000
    stack = await stack_factory([ScriptedTurn(text=markdown)], block_chunking=block_chunking)
    await driver.push_dm("write it all")
    await stack.settle(1)
    posts = driver.posted()
    assert len(posts) >= 3
    assert all(p.chat == driver.dm_chat for p in posts)
    for post in posts:
        assert len(post.text) <= driver.limit
        if driver.line_limit is not None:
            assert len(post.text.split("\n")) <= driver.line_limit
        assert driver.balanced(post.text), post.text
    seen = re.findall(r"\S+", " ".join(driver.visible(p.text) for p in posts))
    assert seen == tokens


async def test_an_edit_that_outgrows_one_message_continues_in_new_ones(
    driver: Driver, stack_factory: Callable[..., Any]
) -> None:
    stack = await stack_factory()
    target = Target(driver.name, driver.dm_chat)
    [ref] = await asyncio.wait_for(stack.adapter.send(target, "draft"), HANG_GUARD)
    markdown, tokens = _long_answer()

    refs = await asyncio.wait_for(stack.adapter.edit(ref, markdown), HANG_GUARD)

    [edit] = driver.edited()
    _, *continued = driver.posted()
    texts = [edit, *(p.text for p in continued)]
    assert len(texts) >= 3
    assert all(p.chat == driver.dm_chat for p in continued)
    for text in texts:
        assert len(text) <= driver.limit
        if driver.line_limit is not None:
            assert len(text.split("\n")) <= driver.line_limit
        assert driver.balanced(text), text
    assert re.findall(r"\S+", " ".join(driver.visible(t) for t in texts)) == tokens
    assert refs[0] == ref and len(refs) == len(texts)
    assert len({r.message_id for r in refs}) == len(refs)


async def test_a_message_sent_by_the_tool_is_not_repeated_as_the_answer(
    driver: Driver, stack_factory: Callable[..., Any]
) -> None:
    text = "The report is ready for you."
    script = [
        ScriptedTurn(tool_calls=[{"name": "message", "args": {"action": "send", "message": text}}]),
        ScriptedTurn(text=text),
    ]
    stack = await stack_factory(script, message_tool=True)
    await driver.push_dm("is the report ready?")
    await stack.settle(1)
    posts = driver.posted()
    assert [driver.visible(p.text).strip() for p in posts] == [text]
    assert posts[0].chat == driver.dm_chat


async def test_a_429_is_waited_out_and_the_answer_posted_once(
    driver: Driver, stack_factory: Callable[..., Any]
) -> None:
    stack = await stack_factory()
    driver.fail_next_post_with_429()
    await driver.push_dm("patience echo")
    await stack.settle(1)
    [post] = driver.posted()
    assert driver.visible(post.text).strip() == "You said: patience echo"
    assert driver.attempts() == 2  # one refused with 429, one posted


async def test_a_503_and_a_reset_are_retried_and_the_answer_posted_once(
    driver: Driver, stack_factory: Callable[..., Any]
) -> None:
    stack = await stack_factory()
    driver.fail_next_posts_with_503_then_reset()
    await driver.push_dm("patience echo")
    await stack.settle(1)
    [post] = driver.posted()
    assert driver.visible(post.text).strip() == "You said: patience echo"


async def test_delete_removes_a_message_and_deleting_it_again_is_harmless(
    driver: Driver, stack_factory: Callable[..., Any]
) -> None:
    stack = await stack_factory()
    target = Target(driver.name, driver.dm_chat)
    [draft] = await asyncio.wait_for(stack.adapter.send(target, "draft"), HANG_GUARD)
    await asyncio.wait_for(stack.adapter.send(target, "kept"), HANG_GUARD)
    await asyncio.wait_for(stack.adapter.delete(draft), HANG_GUARD)
    await asyncio.wait_for(stack.adapter.delete(draft), HANG_GUARD)  # already gone: fine
    assert [driver.visible(text).strip() for text in driver.shown_in_dm()] == ["kept"]


async def test_a_restart_replays_nothing(
    driver: Driver, store: SpyStore, stack_factory: Callable[..., Any]
) -> None:
    first = await stack_factory()
    old = await driver.push_dm("before the restart foxtrot")
    await first.settle(1)
    assert len(driver.posted()) == 1
    await first.stop()

    second = await stack_factory()
    checked = store.asked.count(old)
    await driver.replay(old)
    await driver.push_dm("after the restart golf")
    # Both reach the router, the one writer of the inbound ledger: the replay is dropped there.
    decisions = await second.settle(2)
    [(message, decision)] = [(m, d) for m, d in decisions if d.accepted]
    assert decision.accepted and message.text == "after the restart golf"
    assert [d.reason for _, d in decisions if not d.accepted] == ["already seen"]
    await store.wait_asked(old, checked + 1)  # the router looked the replay up
    await second.sessions.drain()
    answers = [driver.visible(p.text).strip() for p in driver.posted()]
    assert answers == ["You said: before the restart foxtrot", "You said: after the restart golf"]
