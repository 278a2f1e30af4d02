"""``reactions.scope``: status reactions only on the messages the scope names (direct chats,
groups, or those that mention the bot), per channel and per group; a reload applies a new
scope to the next message. The whole daemon with the real SDK over the Telegram fake."""

from __future__ import annotations

from pathlib import Path

from botd.app import App
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import BOT_USERNAME, FakeTelegramAPI
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)
from tests.support.waiting import guarded, until

DM = 777
GROUP = -1001234567890


def _section(telegram: FakeTelegramAPI, *lines: str) -> str:
    """Telegram with an open DM, groups on their allowlist, and ``lines`` (the groups)."""
    return telegram_yaml(
        telegram,
        "dm_policy: open",
        "group_policy: allowlist",
        *lines,
    )


def _reacted(telegram: FakeTelegramAPI, chat: int) -> list[int]:
    """The messages in ``chat`` the bot set a reaction on, in order of the first call."""
    seen: list[int] = []
    for call in telegram.calls_to("setMessageReaction", ok_only=True):
        message = int(call.params["message_id"])
        if int(call.params["chat_id"]) == chat and message not in seen:
            seen.append(message)
    return seen


async def _answered(telegram: FakeTelegramAPI, daemon: App, chat: int, count: int) -> None:
    """Wait until ``chat`` shows ``count`` answers and the daemon's reactions are set."""
    await until(lambda: len(telegram.visible(chat)) == count, f"{count} answers in {chat}")
    assert daemon.runtime is not None
    await guarded(daemon.runtime.dispatcher.drain(), "botd to finish its runs and reactions")


async def test_scope_dms_reacts_in_a_dm_and_not_in_a_group(
    tmp_path: Path, model: FakeAnthropicAPI
) -> None:
    model.push(stream(text("In the group.")), stream(text("In the DM.")))
    async with FakeTelegramAPI() as telegram:
        section = _section(
            telegram,
            "reactions: {scope: dms}",
            "groups:",
            f'  "{GROUP}": {{require_mention: false}}',
        )
        async with daemon_running(config_yaml(tmp_path, anthropic_yaml(model), section)) as d:
            telegram.push_text(GROUP, "hello everyone")
            await _answered(telegram, d, GROUP, 1)
            sent = telegram.push_text(DM, "hello bot")
            await _answered(telegram, d, DM, 1)
            await until(lambda: telegram.reactions.get((DM, sent["message_id"])) == "👍", "done")
        assert _reacted(telegram, GROUP) == []
        assert _reacted(telegram, DM) == [sent["message_id"]]


async def test_scope_mentions_reacts_only_on_the_message_that_mentions_the_bot(
    tmp_path: Path, model: FakeAnthropicAPI
) -> None:
    model.push(stream(text("Noted.")), stream(text("Here I am.")))
    async with FakeTelegramAPI() as telegram:
        # The channel reacts everywhere; this group only on what is addressed to the bot.
        section = _section(
            telegram,
            "groups:",
            f'  "{GROUP}": {{require_mention: false, reactions: {{scope: mentions}}}}',
        )
        async with daemon_running(config_yaml(tmp_path, anthropic_yaml(model), section)) as d:
            telegram.push_text(GROUP, "just chatting")
            await _answered(telegram, d, GROUP, 1)
            mentioning = telegram.push_text(GROUP, f"@{BOT_USERNAME} are you there?")
            await _answered(telegram, d, GROUP, 2)
        assert _reacted(telegram, GROUP) == [mentioning["message_id"]]
        assert telegram.reactions.get((GROUP, mentioning["message_id"])) == "👍"


async def test_a_reload_applies_a_new_scope_to_the_next_message(
    tmp_path: Path, model: FakeAnthropicAPI
) -> None:
    model.push(stream(text("One.")), stream(text("Two.")))
    path = tmp_path / "botd.yaml"
    async with FakeTelegramAPI() as telegram:
        groups = ("groups:", f'  "{GROUP}": {{require_mention: false}}')
        before = config_yaml(
            tmp_path, anthropic_yaml(model), _section(telegram, "reactions: {scope: dms}", *groups)
        )
        after = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            _section(telegram, "reactions: {scope: groups}", *groups),
        )
        async with daemon_running(before, config_path=path) as daemon:
            telegram.push_text(GROUP, "first")
            await _answered(telegram, daemon, GROUP, 1)
            assert _reacted(telegram, GROUP) == []

            runtime = daemon.runtime
            assert runtime is not None
            old = runtime.config
            path.write_text(after, encoding="utf-8")
            daemon.request_reload()  # what SIGHUP does
            await until(
                lambda: runtime.config is not old and "telegram" in runtime.adapters,
                "the reload applied",
            )
            second = telegram.push_text(GROUP, "second")
            await _answered(telegram, daemon, GROUP, 2)
            await until(
                lambda: telegram.reactions.get((GROUP, second["message_id"])) == "👍", "done"
            )
        assert _reacted(telegram, GROUP) == [second["message_id"]]
