"""Discord slash commands: registered once, and a use of one handed on like a typed command,
with an answer only its user sees (the real discord.py against the loopback fake)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from botd.channels.base import Ack
from botd.channels.discord.commands import CANNOT_POST_TEXT, NOT_ADMITTED_TEXT, NOT_TAKEN_TEXT
from botd.channels.errors import ChannelError
from botd.chat import InboundMessage, Target
from botd.commands import MENU
from botd.store import Store, StoreError, StoreWriteError
from tests.channels.discord.harness import Sink, make_adapter
from tests.channels.routed import through_router
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.discord_api import (
    CHANNEL_ID,
    DM_CHANNEL_ID,
    GUILD_ID,
    THREAD_ID,
    USER_ID,
    FakeDiscordAPI,
    user,
)
from tests.support.daemon_inprocess import anthropic_yaml, config_yaml, daemon_running, discord_yaml
from tests.support.waiting import HANG_GUARD, until

EPHEMERAL = 64

GENERAL = {"id": str(CHANNEL_ID), "type": 0, "guild_id": str(GUILD_ID), "name": "general"}
THREAD = {
    "id": str(THREAD_ID),
    "type": 11,
    "guild_id": str(GUILD_ID),
    "parent_id": str(CHANNEL_ID),
    "name": "a thread",
}
DM = {"id": str(DM_CHANNEL_ID), "type": 1}


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscordAPI]:
    async with FakeDiscordAPI() as server:
        yield server


async def registered(fake: FakeDiscordAPI, count: int = 1) -> None:
    """Wait until the adapter has looked at the registered commands ``count`` times."""
    await asyncio.wait_for(
        fake.wait_for_requests(lambda r: r.method == "GET" and r.path.endswith("/commands"), count),
        HANG_GUARD,
    )


async def answered(fake: FakeDiscordAPI, interaction: dict[str, Any]) -> dict[str, Any]:
    await until(
        lambda: interaction["id"] in fake.commands.answers,
        'interaction["id"] in fake.commands.answers',
    )
    return fake.commands.answers[interaction["id"]]


async def use(
    fake: FakeDiscordAPI,
    name: str,
    *,
    channel: dict[str, Any] = GENERAL,
    text: str | None = None,
) -> dict[str, Any]:
    guild = None if channel is DM else GUILD_ID
    interaction = fake.commands.interaction(
        name, user(USER_ID, "alice"), channel=channel, guild_id=guild, text=text
    )
    await fake.dispatch("INTERACTION_CREATE", interaction)
    return interaction


async def test_the_chat_commands_are_registered_once_with_text_where_they_take_it(
    fake: FakeDiscordAPI,
) -> None:
    first = make_adapter(fake)
    await first.start(Sink())
    try:
        await registered(fake)
        await until(lambda: fake.commands.overwrites, "fake.commands.overwrites")
    finally:
        await first.stop()
    [overwrite] = fake.commands.overwrites
    by_name = {c["name"]: c for c in overwrite}
    assert set(by_name) == {name.removeprefix("/") for name, _ in MENU}
    assert by_name["stop"]["description"] == dict(MENU)["/stop"]
    [text] = by_name["new"]["options"]
    assert (text["name"], text["type"], text.get("required", False)) == ("text", 3, False)
    assert by_name["model"]["options"][0]["name"] == "text"
    assert not by_name["stop"].get("options")

    again = make_adapter(fake)  # a restart: what is registered is right already
    await again.start(Sink())
    try:
        await registered(fake, 2)
        await asyncio.sleep(0.1)
    finally:
        await again.stop()
    assert len(fake.commands.overwrites) == 1


async def test_command_menu_false_leaves_the_registered_commands_alone(
    fake: FakeDiscordAPI,
) -> None:
    adapter = make_adapter(fake, command_menu=False)
    sink = Sink()
    await adapter.start(sink)
    try:
        interaction = await use(fake, "stop")  # one registered before is still answered
        assert (await sink.next()).text == "/stop"
        await answered(fake, interaction)
    finally:
        await adapter.stop()
    assert not [r for r in fake.requests if r.path.endswith("/commands")]


async def test_a_refused_registration_is_logged_in_discords_words_and_messages_go_on(
    fake: FakeDiscordAPI, caplog: pytest.LogCaptureFixture
) -> None:
    fake.commands.refuse = (403, 50001, "Missing Access")
    adapter = make_adapter(fake)
    sink = Sink()
    await adapter.start(sink)
    try:
        await registered(fake)
        await fake.dispatch_message(
            fake.message("still here", guild=False, channel_id=DM_CHANNEL_ID)
        )
        assert (await sink.next()).text == "still here"
    finally:
        await adapter.stop()
    [warning] = [r for r in caplog.records if "slash commands were not registered" in r.message]
    assert "403" in warning.message and "Missing Access" in warning.message


async def test_a_command_in_a_channel_is_that_channels_conversation_and_answered_to_its_user(
    fake: FakeDiscordAPI, store: Store
) -> None:
    adapter = make_adapter(fake)
    sink = Sink()
    await adapter.start(through_router(store, sink, "discord"))
    try:
        interaction = await use(fake, "new", text="what is on today?")
        message = await sink.next()
        answer = await answered(fake, interaction)
    finally:
        await adapter.stop()
    assert message.text == "/new what is on today?"
    assert message.conversation_key == f"discord:{CHANNEL_ID}"
    assert (message.chat_id, message.thread_id, message.is_direct) == (str(CHANNEL_ID), None, False)
    assert message.sender_id == str(USER_ID) and message.mentions_bot
    assert message.target == Target("discord", str(CHANNEL_ID), "default")
    assert answer["type"] == 4
    assert answer["data"]["flags"] & EPHEMERAL
    assert answer["data"]["content"] == "Taken: /new what is on today?"


async def test_a_command_in_a_thread_or_a_dm_is_that_conversations(
    fake: FakeDiscordAPI, store: Store
) -> None:
    adapter = make_adapter(fake)
    sink = Sink()
    await adapter.start(through_router(store, sink, "discord"))
    try:
        await use(fake, "stop", channel=THREAD)
        in_thread = await sink.next()
        await use(fake, "whoami", channel=DM)
        in_dm = await sink.next()
    finally:
        await adapter.stop()
    assert (in_thread.chat_id, in_thread.thread_id) == (str(CHANNEL_ID), str(THREAD_ID))
    assert in_thread.conversation_key == f"discord:{THREAD_ID}"
    assert in_thread.target == Target("discord", str(CHANNEL_ID), "default", str(THREAD_ID))
    assert in_dm.text == "/whoami" and in_dm.is_direct
    assert in_dm.conversation_key == f"discord:dm:{USER_ID}"
    assert in_dm.chat_id == str(DM_CHANNEL_ID)


async def test_a_command_that_cannot_be_stored_is_answered_so(
    fake: FakeDiscordAPI, caplog: pytest.LogCaptureFixture
) -> None:
    async def failing(message: InboundMessage, *, ack: Ack | None = None) -> None:
        raise StoreWriteError(Path("botd.sqlite3"), "database or disk is full")

    adapter = make_adapter(fake)
    await adapter.start(failing)
    try:
        interaction = await use(fake, "stop")
        answer = await answered(fake, interaction)
    finally:
        await adapter.stop()
    assert answer["data"]["content"] == NOT_TAKEN_TEXT
    assert answer["data"]["flags"] & EPHEMERAL
    assert any("disk is full" in r.getMessage() for r in caplog.records)


async def test_a_sender_the_policy_refuses_is_told_so(fake: FakeDiscordAPI) -> None:
    sink = Sink()
    adapter = make_adapter(fake, admits=lambda message: False)
    await adapter.start(sink)
    try:
        interaction = await use(fake, "help")
        answer = await answered(fake, interaction)
        assert (await sink.next()).text == "/help"  # the router still decides (pairing, say)
    finally:
        await adapter.stop()
    assert answer["data"]["content"] == NOT_ADMITTED_TEXT


async def test_a_repeated_interaction_is_taken_once(fake: FakeDiscordAPI, store: Store) -> None:
    sink = Sink()
    adapter = make_adapter(fake)
    await adapter.start(through_router(store, sink, "discord"))
    try:
        interaction = await use(fake, "stop")
        await fake.dispatch("INTERACTION_CREATE", interaction)  # a gateway replay
        await use(fake, "help")
        assert (await sink.next()).text == "/stop"
        assert (await sink.next()).text == "/help"
    finally:
        await adapter.stop()
    assert sink.queue.empty()


# --- through the whole daemon ------------------------------------------------------------------


async def _shown(fake: FakeDiscordAPI, channel: int, count: int) -> list[str]:
    await until(lambda: len(fake.visible(channel)) >= count, "len(fake.visible(channel)) >= count")
    return fake.visible(channel)


async def test_slash_commands_run_the_chat_commands_in_the_daemon(tmp_path: Path) -> None:
    async with FakeDiscordAPI() as fake, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(stream(text("Fresh start: sunny all day.")))
        config = config_yaml(tmp_path, anthropic_yaml(model), discord_yaml(fake, "dm_policy: open"))
        async with daemon_running(config):
            await registered(fake)
            whoami = await use(fake, "whoami", channel=DM)
            [who] = await _shown(fake, DM_CHANNEL_ID, 1)
            new = await use(fake, "new", channel=DM, text="what is on today?")
            shown = await _shown(fake, DM_CHANNEL_ID, 2)
            assert (await answered(fake, whoami))["data"]["content"] == "Taken: /whoami"
            assert (await answered(fake, new))["data"]["content"].startswith("Taken: /new")
    assert f"user id {USER_ID}" in who and f"discord:dm:{USER_ID}" in who
    assert shown[-1] == "Fresh start: sunny all day."
    [request] = model.requests  # /new's text is the new conversation's first message
    assert request.body["messages"][-1]["content"][-1]["text"].endswith("what is on today?")


async def test_a_slash_command_the_store_cannot_take_is_told_once_in_the_channel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def failing(*args: object, **kwargs: object) -> None:
        raise StoreError("disk I/O error")

    async with FakeDiscordAPI() as fake, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = config_yaml(tmp_path, anthropic_yaml(model), discord_yaml(fake, "dm_policy: open"))
        async with daemon_running(config) as daemon:
            assert daemon.runtime is not None
            monkeypatch.setattr(daemon.runtime.store, "accept_inbound", failing)
            interaction = await use(fake, "status", channel=DM)
            answer = await answered(fake, interaction)
            [notice] = await _shown(fake, DM_CHANNEL_ID, 1)
    assert answer["data"]["content"] == NOT_TAKEN_TEXT
    assert notice.startswith("Sorry") and "send it again" in notice


async def test_a_commands_user_is_told_once_when_discord_refuses_the_answer_there(
    fake: FakeDiscordAPI,
) -> None:
    adapter = make_adapter(fake)
    sink = Sink()
    await adapter.start(sink)
    try:
        await answered(fake, await use(fake, "help"))
        await sink.next()
        for _ in range(2):
            fake.refuse_next_post(403, 50013, "Missing Permissions")
            with pytest.raises(ChannelError, match="Missing Permissions"):
                await adapter.send(Target("discord", str(CHANNEL_ID)), "Commands: …")
        fake.refuse_next_post(403, 50001, "Missing Access")  # no command used there
        with pytest.raises(ChannelError):
            await adapter.send(Target("discord", str(DM_CHANNEL_ID)), "hello")
    finally:
        await adapter.stop()
    [followup] = fake.commands.followups
    assert followup["content"] == CANNOT_POST_TEXT.format(reason="Missing Permissions")
    assert followup["flags"] & EPHEMERAL
