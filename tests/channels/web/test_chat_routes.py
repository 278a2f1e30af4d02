"""The web chat's routes over a real HTTP server, with the adapter handing messages to a
recording sink (the router's place): what is refused, how the event streams end."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from botd.channels.base import Ack, SendScope
from botd.channels.web import adapter as web_adapter
from botd.channels.web.adapter import Conversation, Subscriber, WebChatAdapter
from botd.channels.web.openai_api import openai_routes
from botd.channels.web.routes import MAX_TEXT_BYTES, NOT_RUNNING, chat_routes
from botd.channels.web.targets import web_conversation_key
from botd.chat import InboundMessage, MessageRef, Target
from tests.channels.web.conftest import following, served
from tests.support.waiting import until

CONVERSATION = "conv_0001"


class Sink:
    """Takes every message (acknowledged at once), or fails them all (``failing``)."""

    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self.failing = False

    async def __call__(self, message: InboundMessage, /, *, ack: Ack | None = None) -> object:
        if self.failing:
            raise OSError("the store is gone")
        self.messages.append(message)
        if ack is not None:
            ack()
        return None


@pytest.fixture
async def sink() -> Sink:
    return Sink()


@pytest.fixture
async def adapter(sink: Sink) -> AsyncIterator[WebChatAdapter]:
    web = WebChatAdapter()
    await web.start(sink)
    yield web
    await web.stop()


@pytest.fixture
async def base(adapter: WebChatAdapter) -> AsyncIterator[str]:
    def web() -> WebChatAdapter:
        return adapter

    async with served(chat_routes(web, heartbeat=0.05) + openai_routes(web)) as url:
        yield url


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def post(session: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else None
    as_json = None if isinstance(body, bytes) else body
    async with session.post(url, data=data, json=as_json) as answered:
        return answered.status, await answered.json()


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            {"conversation": CONVERSATION, "text": "a\x00b"},
            "text must not contain NUL characters",
        ),
        ({"conversation": CONVERSATION, "text": "  \n"}, "text must be a non-empty string"),
        ({"conversation": CONVERSATION, "text": 7}, "text must be a non-empty string"),
        (
            {"conversation": CONVERSATION, "text": "é" * (MAX_TEXT_BYTES // 2 + 1)},
            f"text is {MAX_TEXT_BYTES + 2} bytes, over the 64 KiB limit",
        ),
        (
            {"conversation": "short", "text": "hi"},
            "conversation must be 8 to 64 letters, digits, '_' or '-'",
        ),
        (
            {"conversation": "../../etc/passwd", "text": "hi"},
            "conversation must be 8 to 64 letters, digits, '_' or '-'",
        ),
        (
            {"conversation": CONVERSATION, "text": "hi", "client_id": "x y"},
            "client_id must be 8 to 64 letters, digits, '_' or '-'",
        ),
        (
            {"conversation": CONVERSATION, "text": "hi", "html": True},
            "unknown key 'html': conversation, text, client_id",
        ),
        (b"{not json", "the body must be a JSON object"),
        (b"[1, 2]", "the body must be a JSON object"),
    ],
)
async def test_a_bad_post_is_refused_in_one_line_and_nothing_is_handed_on(
    session: aiohttp.ClientSession, base: str, sink: Sink, body: Any, error: str
) -> None:
    assert await post(session, f"{base}/api/chat/messages", body) == (400, {"error": error})
    assert sink.messages == []


async def test_a_post_is_handed_to_the_router_as_the_operators_direct_message(
    session: aiohttp.ClientSession, base: str, sink: Sink
) -> None:
    status, answer = await post(
        session, f"{base}/api/chat/messages", {"conversation": CONVERSATION, "text": "hello"}
    )

    assert status == 202
    (message,) = sink.messages
    assert answer == {"id": message.message_id}
    assert (message.channel, message.chat_id, message.text) == ("web", CONVERSATION, "hello")
    assert message.conversation_key == web_conversation_key("web", CONVERSATION)
    assert message.is_direct and message.mentions_bot
    async with session.get(f"{base}/api/chat/messages?conversation={CONVERSATION}") as got:
        assert await got.json() == {
            "messages": [{"id": message.message_id, "role": "user", "text": "hello", "final": True}]
        }


async def test_a_message_the_router_cannot_take_is_a_503_and_not_shown(
    session: aiohttp.ClientSession, base: str, sink: Sink
) -> None:
    sink.failing = True
    status, answer = await post(
        session, f"{base}/api/chat/messages", {"conversation": CONVERSATION, "text": "hello"}
    )

    assert (status, answer) == (503, {"error": "botd could not take the message now: try again"})
    async with session.get(f"{base}/api/chat/messages?conversation={CONVERSATION}") as got:
        assert await got.json() == {"messages": []}


async def test_reading_needs_a_valid_conversation_id(
    session: aiohttp.ClientSession, base: str
) -> None:
    for path in ("messages", "events"):
        async with session.get(f"{base}/api/chat/{path}?conversation=<b>") as got:
            assert got.status == 400
            assert await got.json() == {
                "error": "conversation must be 8 to 64 letters, digits, '_' or '-'"
            }


async def test_the_stream_carries_edits_and_deletes_by_id_and_beats_while_idle(
    session: aiohttp.ClientSession, base: str, adapter: WebChatAdapter
) -> None:
    target = Target("web", CONVERSATION)
    url = f"{base}/api/chat/events?conversation={CONVERSATION}"
    async with following(session, url) as events:
        (await adapter.conversation(CONVERSATION)).run_started()
        [ref] = await adapter.send(target, "Hel", scope=SendScope())  # a preview
        await adapter.edit(ref, "Hello <b>there</b>", scope=SendScope(final=True))
        [status] = await adapter.send(target, "running a tool…", scope=SendScope(status_line=True))
        await adapter.delete(status)
        [stopped] = await adapter.send(target, "Half an", scope=SendScope())
        await adapter.run_over(target, "cancelled")
        [notice] = await adapter.send(target, "Stopped.")  # no run under way
        await until(lambda: len(events.events) == 7, "seven events")
        await until(lambda: "heartbeat" in events.comments, "a heartbeat")

    def bot(ref: MessageRef, text: str, final: bool) -> tuple[str, dict[str, Any]]:
        return ("message", {"id": ref.message_id, "role": "bot", "text": text, "final": final})

    assert events.events == [
        bot(ref, "Hel", False),
        bot(ref, "Hello <b>there</b>", True),
        bot(status, "running a tool…", False),
        ("delete", {"id": status.message_id}),
        bot(stopped, "Half an", False),
        bot(stopped, "Half an", True),  # its run is over: it changes no more
        bot(notice, "Stopped.", True),
    ]
    conversation = await adapter.conversation(CONVERSATION)
    assert list(conversation.messages) == [ref.message_id, stopped.message_id, notice.message_id]


async def test_a_client_gone_or_the_channel_stopping_ends_its_subscription(
    session: aiohttp.ClientSession, base: str, adapter: WebChatAdapter
) -> None:
    conversation = await adapter.conversation(CONVERSATION)
    url = f"{base}/api/chat/events?conversation={CONVERSATION}"
    async with following(session, url):
        assert len(conversation.subscribers) == 1
    await until(lambda: not conversation.subscribers, "the subscriber gone with its client")

    async with following(session, url) as events:
        await adapter.stop()
        await until(lambda: events.ended, "the stream ended by the channel's stop")


def test_a_subscriber_too_far_behind_is_dropped_not_buffered() -> None:
    conversation = Conversation(CONVERSATION)
    slow, keeping_up = Subscriber(limit=2), Subscriber(limit=10)
    conversation.subscribers |= {slow, keeping_up}
    target = Target("web", CONVERSATION)
    for number in range(3):
        conversation.put(_bot(f"m{number}", target))

    assert slow.dropped and conversation.subscribers == {keeping_up}
    assert not keeping_up.dropped


async def test_a_dropped_subscriber_reads_the_end_at_once() -> None:
    subscriber = Subscriber(limit=1)
    assert subscriber.put(("message", {"id": "a"}))
    assert not subscriber.put(("message", {"id": "b"}))
    assert await subscriber.next(60) is None


async def test_a_conversation_keeps_its_last_messages(adapter: WebChatAdapter) -> None:
    target = Target("web", CONVERSATION)
    refs: list[MessageRef] = []
    for number in range(205):
        refs += await adapter.send(target, f"message {number}")

    kept = list((await adapter.conversation(CONVERSATION)).messages)
    assert kept == [ref.message_id for ref in refs[5:]]


def _bot(message_id: str, target: Target) -> Any:
    from botd.channels.web.adapter import ChatMessage

    return ChatMessage(message_id, "bot", f"text of {message_id} in {target.chat_id}", True)


@pytest.mark.parametrize(
    ("body", "headers", "error"),
    [
        (
            {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            {},
            "name the conversation: the X-Botd-Conversation header or the user field",
        ),
        (
            {
                "model": "m",
                "messages": [{"role": "assistant", "content": "hi"}],
                "user": "abcd1234",
            },
            {},
            "the last message must be the user's (botd keeps the history itself)",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "/new"}]},
            {"X-Botd-Conversation": "abcdefgh"},
            "chat commands (a text starting with '/') are not taken here",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": "a b"},
            {},
            "the conversation must be 8 to 64 letters, digits, '_' or '-'",
        ),
        (
            {"model": "m", "messages": []},
            {"X-Botd-Conversation": "abcdefgh"},
            "messages must be a non-empty list",
        ),
    ],
)
async def test_a_bad_completion_request_is_refused_in_openais_shape(
    session: aiohttp.ClientSession,
    base: str,
    sink: Sink,
    body: dict[str, Any],
    headers: dict[str, str],
    error: str,
) -> None:
    async with session.post(f"{base}/v1/chat/completions", json=body, headers=headers) as got:
        assert got.status == 400
        answer = await got.json()

    assert answer["error"]["message"] == error
    assert answer["error"]["type"] == "invalid_request_error"
    assert sink.messages == []


async def test_without_a_running_web_channel_every_route_answers_503(
    session: aiohttp.ClientSession,
) -> None:
    def none() -> WebChatAdapter | None:
        return None

    async with served(chat_routes(none) + openai_routes(none)) as url:
        query = f"conversation={CONVERSATION}"
        async with session.get(f"{url}/api/chat/messages?{query}") as got:
            assert (got.status, await got.json()) == (503, {"error": NOT_RUNNING})
        async with session.get(f"{url}/api/chat/events?{query}") as got:
            assert (got.status, await got.json()) == (503, {"error": NOT_RUNNING})
        status, answer = await post(
            session, f"{url}/api/chat/messages", {"conversation": CONVERSATION, "text": "hi"}
        )
        assert (status, answer) == (503, {"error": NOT_RUNNING})
        async with session.post(
            f"{url}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers={"X-Botd-Conversation": CONVERSATION},
        ) as got:
            assert got.status == 503
            assert (await got.json())["error"]["message"] == NOT_RUNNING


async def test_the_conversation_used_longest_ago_and_unused_now_is_forgotten(
    adapter: WebChatAdapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_adapter, "KEPT_CONVERSATIONS", 4)
    async with adapter.subscribed("followed-1"), adapter.held("held-0001"):
        older = await adapter.conversation("idle-0001")
        newer = await adapter.conversation("idle-0002")
        await adapter.send(Target("web", "idle-0001"), "used again")  # now the newer one
        await adapter.conversation("idle-0003")  # one too many

        assert await adapter.conversation("idle-0001") is older
        assert await adapter.conversation("idle-0002") is not newer  # forgotten, read anew
        assert (await adapter.conversation("followed-1")).subscribers
        assert (await adapter.conversation("held-0001")).held == 1


@pytest.mark.parametrize(
    ("headers", "status", "error"),
    [
        (
            {"Content-Type": "text/plain"},
            415,
            "the body must be JSON, sent as application/json",
        ),
        (
            {"Content-Type": "application/json", "Origin": "https://elsewhere.example"},
            403,
            "this endpoint is for programs, not for pages in a browser",
        ),
        (
            {"Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"},
            403,
            "this endpoint is for programs, not for pages in a browser",
        ),
    ],
)
async def test_a_browser_cannot_make_the_agent_answer_through_the_openai_endpoint(
    session: aiohttp.ClientSession,
    base: str,
    sink: Sink,
    headers: dict[str, str],
    status: int,
    error: str,
) -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "run rm -rf"}]})
    headers = {**headers, "X-Botd-Conversation": CONVERSATION}
    async with session.post(f"{base}/v1/chat/completions", data=body, headers=headers) as got:
        assert (got.status, (await got.json())["error"]["message"]) == (status, error)
    assert sink.messages == []
