"""Memory end to end: the real daemon, Telegram's SDK over the loopback Bot API, the Anthropic
SDK over its fake. Alice has the model remember something in her DM; it is given to her next
turn's request (with the system prompt, not kept in the transcript), never to Bob's DM nor to
a group where Alice speaks; the group's own memory stays the group's; ``/memory`` in the group
lists the group's and forgets, and what is forgotten is gone from the next request; a group
whose tools list leaves the memory tools out is given no memory. One daemon
for all of it (a DM's ``/memory`` is ``test_memory.py``'s: a private chat's send budget would
make this test wait)."""

from __future__ import annotations

import json
from pathlib import Path

from botd.app import App
from botd.store import MemoryOwner
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, tool_use
from tests.fakes.telegram_api import FakeTelegramAPI, user
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    daemon_store,
    telegram_yaml,
)
from tests.support.waiting import guarded, until

ALICE, BOB = 1001, 1002
GROUP, QUIET = -1003, -1004
"""Two groups: the memory tools are offered in GROUP, not in QUIET (its own tools list)."""
ALICE_FACT = "Alice drinks green tea with honey"
GROUP_FACT = "The team meets on Fridays"


def _config(tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI) -> str:
    agent = "agent:\n  system_prompt: You are botd.\n  tools: [message, remember, recall, forget]\n"
    channel = telegram_yaml(
        telegram,
        "poll_timeout: 1",
        "dm_policy: open",
        "require_mention: false",
        "groups:",
        f'  "{GROUP}": {{}}',
        f'  "{QUIET}": {{tools: [message]}}',
    )
    return config_yaml(tmp_path, anthropic_yaml(model), agent, channel)


async def _say(daemon: App, telegram: FakeTelegramAPI, chat: int, said: str, sender: int) -> str:
    """``sender`` says ``said`` in ``chat``; the bot's latest message there once it is over."""
    before = len(telegram.visible(chat))
    kind = "private" if chat > 0 else "supergroup"
    telegram.push_text(chat, said, sender=user(sender), chat_type=kind)
    await until(lambda: len(telegram.visible(chat)) > before, f"an answer to {said!r}")
    assert daemon.runtime is not None
    await guarded(daemon.runtime.dispatcher.drain(), f"the run of {said!r} to end")
    return telegram.visible(chat)[-1]


def _system(model: FakeAnthropicAPI) -> str:
    """The system prompt of the latest request."""
    return "".join(block["text"] for block in model.requests[-1].body.get("system", []))


def _whole(model: FakeAnthropicAPI, first: int) -> str:
    """Every request from ``first`` on, as JSON: all the model was given."""
    return "".join(json.dumps(request.body) for request in model.requests[first:])


async def test_a_persons_memory_reaches_only_their_own_direct_chat(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI
) -> None:
    async with daemon_running(_config(tmp_path, telegram, model)) as bot:
        remember = json.dumps({"text": ALICE_FACT})
        model.push(stream(tool_use("t1", "remember", remember), stop_reason="tool_use"))
        model.push(stream(text("Noted.")))
        assert await _say(bot, telegram, ALICE, "remember my tea", ALICE) == "Noted."
        store = daemon_store(bot)
        alice = MemoryOwner("telegram", "user", str(ALICE))
        assert [item.text for item in await store.memories(alice)] == [ALICE_FACT]

        # Alice's next turn is given it with the system prompt; the transcript keeps none.
        model.push(stream(text("Green tea.")))
        await _say(bot, telegram, ALICE, "what tea do I drink?", ALICE)
        assert _system(model).startswith("You are botd.\n\n")
        assert ALICE_FACT in _system(model)
        assert ALICE_FACT not in json.dumps(model.requests[-1].body["messages"][-1])

        # Bob's DM and the group Alice speaks in: no request carries it, even one that
        # recalls (the group's recall reads the group's memory).
        first = len(model.requests)
        model.push(stream(text("No idea.")))
        await _say(bot, telegram, BOB, "what tea does Alice drink?", BOB)
        model.push(stream(tool_use("t2", "recall", "{}"), stop_reason="tool_use"))
        model.push(stream(text("Nothing kept.")))
        await _say(bot, telegram, GROUP, "what tea do I drink?", ALICE)
        remember = json.dumps({"text": GROUP_FACT})
        model.push(stream(tool_use("t3", "remember", remember), stop_reason="tool_use"))
        model.push(stream(text("Noted for the team.")))
        await _say(bot, telegram, GROUP, "remember we meet on Fridays", ALICE)
        model.push(stream(text("Fridays.")))
        await _say(bot, telegram, GROUP, "when does the team meet?", BOB)
        assert GROUP_FACT in _system(model)
        assert "green tea" not in _whole(model, first)
        group = MemoryOwner("telegram", "group", str(GROUP))
        assert [(i.text, i.author) for i in await store.memories(group)] == [
            (GROUP_FACT, str(ALICE))
        ]
        assert [item.text for item in await store.memories(alice)] == [ALICE_FACT]

        # /memory in the group lists the group's, never Alice's own; forgetting the group's
        # item (by its number there) drops it from the group's next turn.
        listing = await _say(bot, telegram, GROUP, "/memory", ALICE)
        assert f"1. {GROUP_FACT}" in listing and ALICE_FACT not in listing
        forgot = await _say(bot, telegram, GROUP, "/memory forget 1", BOB)
        assert forgot == f"Forgot item 1: {GROUP_FACT}"
        assert await store.memories(group) == []
        model.push(stream(text("No meeting I know of.")))
        await _say(bot, telegram, GROUP, "when does the team meet?", BOB)
        assert _system(model) == "You are botd."
        assert [item.text for item in await store.memories(alice)] == [ALICE_FACT]

        # A group whose tools list leaves the memory tools out is given no memory either.
        quiet = MemoryOwner("telegram", "group", str(QUIET))
        assert await store.remember(quiet, str(BOB), GROUP_FACT, max_items=50) is not None
        model.push(stream(text("No idea.")))
        await _say(bot, telegram, QUIET, "when does the team meet?", BOB)
        assert _system(model) == "You are botd."
        offered = [tool["name"] for tool in model.requests[-1].body["tools"]]
        assert offered == ["message"]
