"""A conversation longer than the model takes is compacted and answered, end to end: the real
daemon, python-telegram-bot over the loopback Bot API, and the Anthropic SDK over its fake,
which refuses a request over its context window with the API's own "prompt is too long".

botd's estimate of a transcript's length is only an estimate: here it is under botd's budget
(nothing was compacted after the earlier runs) while the model's window is smaller. The
refused request is compacted (the older turns summarized by the model) and asked again once;
the answer is posted once, the compaction is stored with the run, and the next messages (a
restart too) are sent compacted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from botd.agent.compaction import SUMMARY_HEADER
from botd.events import Message, TextContent
from botd.store.sqlite import SqliteStore
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.chat import DM, chatting
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
)

WINDOW = 8_000
"""The fake model's context window, in its tokens (characters / 4)."""
ERROR_LINE = "⚠️ The agent stopped with an error:"


def earlier_turns(tmp_path: Path, turns: int, size: int) -> str:
    """A transcript an earlier botd left for the DM: ``turns`` exchanges of ``size``
    characters a message. Returns the session id."""
    with SqliteStore.open(tmp_path / "state") as store:
        session = store.get_or_create_session(f"telegram:{DM}")
        for n in range(turns):
            store.append_messages(
                session.session_id,
                [
                    Message(role="user", content=[TextContent(text=f"question {n} " + "q" * size)]),
                    Message(
                        role="assistant", content=[TextContent(text=f"answer {n} " + "a" * size)]
                    ),
                ],
            )
        return session.session_id


def sent_text(body: dict[str, Any]) -> str:
    return "\n".join(
        block["text"]
        for message in body["messages"]
        for block in (message["content"] if isinstance(message["content"], list) else [])
        if block.get("type") == "text"
    )


def text_of(message: Message) -> str:
    return "".join(b.text for b in message.blocks() if isinstance(b, TextContent))


@asynccontextmanager
async def fakes() -> AsyncIterator[tuple[FakeTelegramAPI, FakeAnthropicAPI]]:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model.context_tokens = WINDOW
        yield telegram, model


async def test_a_prompt_too_long_is_compacted_answered_once_and_stays_compacted(
    tmp_path: Path,
) -> None:
    # About 12,000 tokens: over the model's window, well under botd's own budget.
    session_id = earlier_turns(tmp_path, turns=4, size=6_000)
    async with fakes() as (telegram, model):
        async with chatting(tmp_path, telegram, model=model) as chat:
            model.push(stream(text("They compared apples.")), stream(text("Pears are sweeter.")))
            await chat.send("and pears?")
            assert await chat.reply() == "Pears are sweeter."
            assert chat.unread() == []
            refused, summary, retried = (r.body for r in model.requests)
            assert model.too_long == [0]
            assert "question 0" in sent_text(refused) and "and pears?" in sent_text(refused)
            assert "Summarize this conversation" in sent_text(summary)
            assert sent_text(retried).startswith(f"{SUMMARY_HEADER}\nThey compared apples.")
            assert "question 0" not in sent_text(retried) and "and pears?" in sent_text(retried)

            # Stored with the run: the summary, the kept turns, then this exchange.
            stored = chat.store.load_transcript(session_id)
            assert text_of(stored[0]) == f"{SUMMARY_HEADER}\nThey compared apples."
            assert "and pears?" in text_of(stored[-2])
            assert text_of(stored[-1]) == "Pears are sweeter."
            assert not any("question 0" in text_of(m) for m in stored)

            model.push(stream(text("Quite sure.")))
            await chat.send("sure?")
            assert await chat.reply() == "Quite sure."
            assert chat.unread() == []
            assert sent_text(model.requests[-1].body).startswith(SUMMARY_HEADER)

        async with chatting(tmp_path, telegram, model=model) as chat:
            model.push(stream(text("Back.")))
            await chat.send("after a restart")
            assert await chat.reply() == "Back."
            assert chat.unread() == []
            assert sent_text(model.requests[-1].body).startswith(SUMMARY_HEADER)
    assert model.too_long == [0]  # never refused again
    assert len(model.requests) == 5
    assert telegram.visible(DM).count("Pears are sweeter.") == 1


async def test_a_conversation_compaction_cannot_shorten_enough_gets_one_error_line(
    tmp_path: Path,
) -> None:
    # The last answer alone is over the window: compaction keeps it, the retry is refused.
    session_id = earlier_turns(tmp_path, turns=1, size=40_000)
    async with fakes() as (telegram, model), chatting(tmp_path, telegram, model=model) as chat:
        model.push(stream(text("A question about q.")))
        await chat.send("hello")
        said = await chat.reply()
        assert said.startswith(ERROR_LINE) and "prompt is too long" in said
        assert chat.unread() == []
        assert model.too_long == [0, 2]  # asked again once, after the summary, no more
        # The exchange is kept as it went: the user's message and the refusal.
        stored = chat.store.load_transcript(session_id)
        assert "hello" in text_of(stored[-2]) and stored[-1].stop_reason == "error"
