"""The ``chat`` fixture itself: botd answers a DM, replies are read in order and each once,
and a command's answer reads like any other reply."""

from __future__ import annotations

from tests.support.chat import Chat


async def test_a_message_is_answered(chat: Chat) -> None:
    await chat.send("hi")
    assert await chat.reply() == "You said: hi"


async def test_replies_are_read_in_order_each_once(chat: Chat) -> None:
    await chat.send("one")
    assert await chat.reply() == "You said: one"
    await chat.send("two")
    await chat.send("three")
    assert await chat.reply() == "You said: two"
    assert await chat.reply() == "You said: three"
    assert chat.shown() == ["You said: one", "You said: two", "You said: three"]


async def test_a_command_is_answered_in_the_chat(chat: Chat) -> None:
    await chat.send("/new")
    assert await chat.reply() == "Started a new conversation."
    await chat.send("/stop")
    assert await chat.reply() == "Nothing was running."
