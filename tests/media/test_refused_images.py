"""An image the model refuses never keeps a conversation broken, end to end: the real daemon,
python-telegram-bot over the loopback Bot API, and the model SDK (Anthropic) or client
(OpenAI-compatible) over their fakes, which refuse an image too large as the real APIs do.

The refused image leaves the conversation (its history and its stored transcript) for a
placeholder, the chat is told in one line, and the message is answered by asking once more
without it; the later messages are answered with no refusal, across a restart too.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from botd.app import App
from botd.conversation.notices import INTERRUPTED_NOTICE
from botd.events import ImageContent, Message, TextContent
from botd.media.history import LEFT_OUT_IMAGE
from botd.store.sqlite import SqliteStore
from tests.fakes.anthropic_api import FakeAnthropicAPI, http_error, stream, text
from tests.fakes.image_headers import png
from tests.fakes.openai_api import ChatStream, FakeOpenAI
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    daemon_store,
    telegram_yaml,
)
from tests.support.waiting import until

DM, GROUP = 777, -100123
WIDE = png(9000, 100)
"""More pixels on a side than the API's 8000."""
TALL = png(100, 9001)
NOTICE = "I could not use the image you sent (the model refused it), so I left it out."
ERROR_LINE = "⚠️ The agent stopped with an error:"


class Chat:
    """The daemon and its fakes, seen from one test."""

    def __init__(
        self,
        daemon: App,
        telegram: FakeTelegramAPI,
        model: FakeAnthropicAPI | FakeOpenAI,
    ) -> None:
        self.daemon, self.telegram, self.model = daemon, telegram, model

    @property
    def store(self) -> SqliteStore:
        return daemon_store(self.daemon)

    async def say(self, chat_id: int, words: str, *, answer: str) -> list[str]:
        """Send ``words``; once ``answer`` shows and the run is over, what the bot posted
        since (the answer last)."""
        before = len(self.telegram.visible(chat_id))
        self.telegram.push_text(chat_id, words)
        await until(lambda: answer in self.telegram.visible(chat_id)[before:], repr(answer))
        await self.idle()
        return self.telegram.visible(chat_id)[before:]

    async def idle(self) -> None:
        assert self.daemon.runtime is not None
        await asyncio.wait_for(self.daemon.runtime.dispatcher.drain(), 60)


def anthropic_images(body: dict[str, Any]) -> list[str]:
    """The base64 data of every image of an Anthropic request body, in order."""
    found: list[str] = []
    for message in body["messages"]:
        content = message["content"]
        for block in content if isinstance(content, list) else []:
            if block["type"] == "image":
                found.append(block["source"]["data"])
    return found


def anthropic_texts(body: dict[str, Any]) -> str:
    return "\n".join(
        block["text"]
        for message in body["messages"]
        for block in (message["content"] if isinstance(message["content"], list) else [])
        if block["type"] == "text"
    )


def openai_images(body: dict[str, Any]) -> list[str]:
    return [
        part["image_url"]["url"]
        for message in body["messages"]
        if isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image_url"
    ]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def keep_earlier_turns(tmp_path: Path, key: str, *images: bytes) -> str:
    """A transcript as an earlier botd left it: a user turn per image (the image with its
    caption), each answered. Returns the session id."""
    with SqliteStore.open(tmp_path / "state") as store:
        session = store.get_or_create_session(key)
        for number, image in enumerate(images, 1):
            store.append_messages(
                session.session_id,
                [
                    Message(
                        role="user",
                        content=[
                            TextContent(text=f"look at picture {number}"),
                            ImageContent(mime_type="image/png", data=b64(image)),
                        ],
                    ),
                    Message(role="assistant", content=[TextContent(text=f"Seen {number}.")]),
                ],
            )
        return session.session_id


def stored_images(store: SqliteStore, session_id: str) -> list[str]:
    return [
        block.data
        for message in store.load_transcript(session_id)
        for block in message.blocks()
        if isinstance(block, ImageContent)
    ]


def stored_text(store: SqliteStore, session_id: str) -> str:
    return "\n".join(
        block.text
        for message in store.load_transcript(session_id)
        for block in message.blocks()
        if isinstance(block, TextContent)
    )


def _ready(daemon: App) -> bool:
    return daemon.runtime is not None and "telegram" in daemon.runtime.adapters


def _telegram(telegram: FakeTelegramAPI) -> str:
    return telegram_yaml(
        telegram, "dm_policy: open", "groups:", '  "-100123": {require_mention: true}'
    )


@asynccontextmanager
async def anthropic_chat(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI, extra: str = ""
) -> AsyncIterator[Chat]:
    config = config_yaml(tmp_path, anthropic_yaml(model), _telegram(telegram), extra)
    async with daemon_running(config, ready=_ready) as daemon:
        yield Chat(daemon, telegram, model)


@asynccontextmanager
async def fakes() -> AsyncIterator[tuple[FakeTelegramAPI, FakeAnthropicAPI]]:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        yield telegram, model


async def test_a_stored_image_the_model_refuses_is_left_out_for_good(tmp_path: Path) -> None:
    session_id = keep_earlier_turns(tmp_path, f"telegram:{DM}", WIDE)
    async with fakes() as (telegram, model):
        async with anthropic_chat(tmp_path, telegram, model) as chat:
            model.push(stream(text("Hello again.")))
            assert await chat.say(DM, "hello", answer="Hello again.") == [NOTICE, "Hello again."]
            refused, retried = model.requests
            assert anthropic_images(refused.body) == [b64(WIDE)]
            [refusal] = model.refusals
            assert refusal.startswith("messages.0.content.1.image.source.base64.data:")
            assert anthropic_images(retried.body) == []
            assert LEFT_OUT_IMAGE in anthropic_texts(retried.body)
            assert "look at picture 1" in anthropic_texts(retried.body)

            model.push(stream(text("Still here.")))
            assert await chat.say(DM, "and now?", answer="Still here.") == ["Still here."]
            assert len(model.requests) == 3 and len(model.refusals) == 1
            assert anthropic_images(model.requests[-1].body) == []
            assert stored_images(chat.store, session_id) == []
            assert LEFT_OUT_IMAGE in stored_text(chat.store, session_id)

        # A restart loads the transcript from the store: the image does not come back.
        async with anthropic_chat(tmp_path, telegram, model) as chat:
            model.push(stream(text("Back.")))
            assert await chat.say(DM, "after the restart", answer="Back.") == ["Back."]
    assert len(model.requests) == 4 and len(model.refusals) == 1
    assert anthropic_images(model.requests[-1].body) == []
    assert telegram.visible(DM).count(NOTICE) == 1


async def test_in_a_group_an_image_kept_from_chatter_is_left_out_and_the_mention_answered(
    tmp_path: Path,
) -> None:
    async with fakes() as (telegram, model):
        # A model server taking smaller images than botd prepares them for (its own limit).
        model.max_image_side = 500
        async with anthropic_chat(tmp_path, telegram, model) as chat:
            telegram.push_file(GROUP, "photo", png(600, 40))  # no mention: kept, not answered
            key = f"telegram:{GROUP}"
            await until(lambda: chat.store.kept_chatter(key), "the photo kept as chatter")
            model.push(stream(text("Seen.")))
            said = await chat.say(GROUP, "@botd_test_bot what do you make of it?", answer="Seen.")
            assert said == [NOTICE, "Seen."]
            assert len(model.requests) == 2 and len(model.refusals) == 1
            retried = model.requests[1].body
            assert anthropic_images(retried) == []
            assert "[sent photo.jpg]" in anthropic_texts(retried)
            assert "what do you make of it?" in anthropic_texts(retried)

            for number in (1, 2):
                model.push(stream(text(f"Answer {number}.")))
                words = f"@botd_test_bot question {number}"
                assert await chat.say(GROUP, words, answer=f"Answer {number}.") == [
                    f"Answer {number}."
                ]
    assert len(model.requests) == 4 and len(model.refusals) == 1
    assert all(anthropic_images(r.body) == [] for r in model.requests[1:])


async def test_the_openai_compatible_provider_leaves_a_refused_image_out_too(
    tmp_path: Path,
) -> None:
    session_id = keep_earlier_turns(tmp_path, f"telegram:{DM}", WIDE)
    async with FakeTelegramAPI() as telegram, FakeOpenAI() as model:
        section = (
            "model:\n  provider: openai\n  name: fake-model\n"
            f"  base_url: {json.dumps(model.base_url)}\n  max_retry_wait: 1\n"
        )
        config = config_yaml(tmp_path, section, _telegram(telegram))
        async with daemon_running(config, ready=_ready) as daemon:
            chat = Chat(daemon, telegram, model)
            model.enqueue(ChatStream().text("Hello again.").finish("stop"))
            assert await chat.say(DM, "hello", answer="Hello again.") == [NOTICE, "Hello again."]
            refused, retried = model.requests
            assert openai_images(refused.body) == [f"data:image/png;base64,{b64(WIDE)}"]
            assert openai_images(retried.body) == []
            assert LEFT_OUT_IMAGE in json.dumps(retried.body)

            model.enqueue(ChatStream().text("Still here.").finish("stop"))
            assert await chat.say(DM, "and now?", answer="Still here.") == ["Still here."]
            assert len(model.requests) == 3 and model.refusals == 1
            assert openai_images(model.requests[-1].body) == []
            assert stored_images(chat.store, session_id) == []


async def test_a_second_refusal_ends_the_run_with_the_usual_error_and_no_more_tries(
    tmp_path: Path,
) -> None:
    keep_earlier_turns(tmp_path, f"telegram:{DM}", WIDE)
    async with fakes() as (telegram, model), anthropic_chat(tmp_path, telegram, model) as chat:
        # The image was not the cause: the request is refused without it too.
        model.push(http_error(400, "invalid_request_error", "Could not process image"))
        before = len(telegram.visible(DM))
        telegram.push_text(DM, "hello")
        await until(lambda: len(telegram.visible(DM)) >= before + 2, "the notice and error")
        await chat.idle()
        notice, error = telegram.visible(DM)[before:]
        assert notice == NOTICE
        assert error.startswith(ERROR_LINE) and "Could not process image" in error
        assert "\n" not in error
        assert len(model.requests) == 2  # the refused request, asked once more: no loop

        model.push(stream(text("Working again.")))
        assert await chat.say(DM, "again", answer="Working again.") == ["Working again."]
    assert len(model.requests) == 3 and len(model.refusals) == 1


async def test_an_image_refused_on_the_second_try_is_left_out_for_the_next_message(
    tmp_path: Path,
) -> None:
    session_id = keep_earlier_turns(tmp_path, f"telegram:{DM}", WIDE, TALL)
    async with fakes() as (telegram, model), anthropic_chat(tmp_path, telegram, model) as chat:
        before = len(telegram.visible(DM))
        telegram.push_text(DM, "hello")
        await until(lambda: len(telegram.visible(DM)) >= before + 2, "the notice and error")
        await chat.idle()
        notice, error = telegram.visible(DM)[before:]
        assert notice == NOTICE
        assert error.startswith(ERROR_LINE) and "8000 pixels" in error
        assert [len(anthropic_images(r.body)) for r in model.requests] == [2, 1]
        assert len(model.refusals) == 2

        model.push(stream(text("Both gone.")))
        assert await chat.say(DM, "again", answer="Both gone.") == ["Both gone."]
        assert anthropic_images(model.requests[-1].body) == []
        assert len(model.refusals) == 2
        assert stored_images(chat.store, session_id) == []


async def test_a_run_resumed_after_a_restart_does_not_send_the_left_out_image(
    tmp_path: Path,
) -> None:
    keep_earlier_turns(tmp_path, f"telegram:{DM}", WIDE)
    async with fakes() as (telegram, model):
        async with anthropic_chat(tmp_path, telegram, model, "shutdown_grace: 0.2\n"):
            model.push(stream(stall=True))  # asked again, the model says nothing
            telegram.push_text(DM, "hello")
            await until(lambda: len(model.requests) == 2, "the request asked again")
            await until(lambda: NOTICE in telegram.visible(DM), "the notice")
        # botd stopped mid-run: the message is resumed from the stored transcript.
        async with anthropic_chat(tmp_path, telegram, model) as chat:
            model.push(stream(text("Answered after all.")))
            await until(lambda: "Answered after all." in telegram.visible(DM), "the answer")
            await chat.idle()
    shown = telegram.visible(DM)
    # The restart's notice comes when the stop left the notice's send confirmed (a race).
    assert shown in (
        [NOTICE, INTERRUPTED_NOTICE, "Answered after all."],
        [NOTICE, "Answered after all."],
    )
    assert len(model.requests) == 3 and len(model.refusals) == 1
    resumed = model.requests[-1].body
    assert anthropic_images(resumed) == []
    assert "hello" in anthropic_texts(resumed) and LEFT_OUT_IMAGE in anthropic_texts(resumed)
