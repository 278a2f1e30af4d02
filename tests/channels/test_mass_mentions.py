"""Mass mentions in model output: Slack posts them as plain text unless allowed; Discord and
Telegram are as they were (Discord limits ``allowed_mentions``, Telegram has no mass pings).

Real SDKs against the loopback fakes; the end-to-end case runs the daemon, whose echo agent
repeats what it is sent, so text a user makes the bot say reaches Slack as model output.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from botd.app import App
from botd.channels.discord.adapter import DiscordAdapter
from botd.channels.slack.adapter import SlackAdapter
from botd.channels.slack.markup import defuse_mass_mentions
from botd.channels.telegram.adapter import TelegramAdapter
from botd.chat import MessageRef, Target
from botd.config import parse_config
from botd.store.sqlite import SqliteStore
from tests.fakes.discord_api import CHANNEL_ID, FakeDiscordAPI
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.waiting import HANG_GUARD, until

TOKEN = "123456:TEST-TOKEN"
HOSTILE = (
    "Hey <!channel> and <!here|here> and <!everyone>, also <!channel|@channel>, "
    "<!subteam^S0123ABC> and <!subteam^S0456DEF|@oncall>; thanks <@U123>."
)
DEFUSED = (
    "Hey @channel and @here and @everyone, also @channel, @usergroup and @oncall; thanks <@U123>."
)


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


def _slack_adapter(fake: FakeSlack, **kwargs: bool) -> SlackAdapter:
    return SlackAdapter(
        bot_token="xoxb-test", app_token="xapp-test", api_base_url=fake.base_url, **kwargs
    )


def test_every_mass_mention_form_is_defused_and_nothing_else_changes() -> None:
    assert defuse_mass_mentions(HOSTILE) == DEFUSED
    assert defuse_mass_mentions("<!HERE>") == "@here"
    kept = "<@U1|ada> <#C1|general> <!date^1392734382^{date}|Feb 18> <https://x.io|x> @channel"
    assert defuse_mass_mentions(kept) == kept


async def test_slack_send_and_edit_post_mass_mentions_as_plain_text(slack: FakeSlack) -> None:
    adapter = _slack_adapter(slack)
    [ref] = await adapter.send(Target("slack", "C1"), HOSTILE)
    await adapter.edit(ref, f"**Update:** {HOSTILE}")
    [post] = slack.calls_to("chat.postMessage")
    [update] = slack.calls_to("chat.update")
    assert post.args["text"] == DEFUSED
    assert update.args["text"] == f"*Update:* {DEFUSED}"
    for call in (post, update):
        assert call.args["link_names"] in (False, "0", "false")  # plain @channel stays plain
        assert "parse" not in call.args  # Slack's default: no name linking


async def test_slack_defuses_in_code_and_in_every_chunk_of_a_long_answer(
    slack: FakeSlack,
) -> None:
    adapter = _slack_adapter(slack)
    markdown = "\n\n".join(f"Line {n} <!channel> `<!here>`" for n in range(400))
    refs = await adapter.send(Target("slack", "C1"), markdown)
    texts = [call.args["text"] for call in slack.calls_to("chat.postMessage")]
    assert len(texts) == len(refs) > 1
    assert all("<!" not in text for text in texts)
    assert sum(text.count("@channel") for text in texts) == 400
    # An edit whose text grows beyond one message posts the rest defused too.
    await adapter.edit(refs[0], markdown)
    assert all("<!" not in c.args["text"] for c in slack.calls if "text" in c.args)


async def test_slack_posts_mass_mentions_verbatim_when_allowed(slack: FakeSlack) -> None:
    adapter = _slack_adapter(slack, allow_mass_mentions=True)
    [ref] = await adapter.send(Target("slack", "C1"), HOSTILE)
    await adapter.edit(ref, HOSTILE + " (edited)")
    assert slack.calls_to("chat.postMessage")[0].args["text"] == HOSTILE
    assert slack.calls_to("chat.update")[0].args["text"] == HOSTILE + " (edited)"


async def _slack_daemon(
    tmp_path: Path, slack: FakeSlack, extra: str
) -> tuple[App, asyncio.Task[int]]:
    config = parse_config(
        f"""
state_dir: {json.dumps(str(tmp_path / "state"))}
health: {{enabled: false}}
channels:
  slack:
    bot_token: xoxb-test
    app_token: xapp-test
    api_base_url: {json.dumps(slack.base_url)}
    dm_policy: open
{extra}
""",
        {},
    )
    daemon = App(config, env={})
    task = asyncio.create_task(daemon.run())
    await slack.wait_socket(HANG_GUARD)
    return daemon, task


async def _echo_through_daemon(tmp_path: Path, slack: FakeSlack, extra: str) -> str:
    daemon, task = await _slack_daemon(tmp_path, slack, extra)
    try:
        event = {
            "type": "message",
            "channel": "D1",
            "channel_type": "im",
            "user": "U1",
            "text": HOSTILE,
            "ts": "100.000001",
        }
        await slack.send_event(event_callback(event))
        await until(
            lambda: any("thanks" in text for text in slack.visible("D1")),
            'any("thanks" in text for text in slack.visible("D1"))',
        )
    finally:
        daemon.request_stop()
        assert await asyncio.wait_for(task, HANG_GUARD) == 0
    [shown] = slack.visible("D1")
    return shown


async def test_model_output_reaches_slack_defused_through_the_daemon(
    tmp_path: Path, slack: FakeSlack
) -> None:
    shown = await _echo_through_daemon(tmp_path, slack, "")
    assert shown == f"You said: {DEFUSED}"
    sent = [c.args["text"] for c in slack.calls if "text" in c.args]
    assert sent and all("<!" not in text for text in sent)  # previews and edits too


async def test_allow_mass_mentions_in_the_config_posts_them_verbatim(
    tmp_path: Path, slack: FakeSlack
) -> None:
    shown = await _echo_through_daemon(tmp_path, slack, "    allow_mass_mentions: true")
    assert shown == f"You said: {HOSTILE}"


# --- Discord and Telegram stay as they were --------------------------------------------------


async def test_discord_still_suppresses_everyone_here_and_role_pings(tmp_path: Path) -> None:
    async with FakeDiscordAPI() as fake:
        adapter = DiscordAdapter(
            "fake-discord-token",
            api_base_url=fake.base_url,
            gateway_url=fake.gateway_url,
            guild_ready_timeout=0.05,
            ready_timeout=HANG_GUARD,
        )

        async def sink(message: object) -> None:
            return None

        await asyncio.wait_for(adapter.start(sink), HANG_GUARD)
        try:
            target = Target("discord", str(CHANNEL_ID))
            text = "@everyone @here <@&999> <@42> <!channel>"
            [ref] = await asyncio.wait_for(adapter.send(target, text), HANG_GUARD)
            await asyncio.wait_for(adapter.edit(ref, text + " again"), HANG_GUARD)
        finally:
            await asyncio.wait_for(adapter.stop(), HANG_GUARD)
        [post] = fake.message_posts()
        patch = next(r for r in fake.requests if r.method == "PATCH")
        for body in (post.body, patch.body):
            assert set(body["allowed_mentions"]["parse"]) == {"users"}
            assert not body["allowed_mentions"].get("roles")
            # Mass mentions are broken by a zero-width space; Slack's tokens mean nothing here.
            shown = "@\u200beveryone @\u200bhere <@&999> <@42> <!channel>"
            assert body["content"].startswith(shown)


async def test_telegram_text_is_unchanged(tmp_path: Path) -> None:
    async with FakeTelegramAPI(TOKEN) as fake:
        with SqliteStore.open(tmp_path) as store:
            adapter = TelegramAdapter(TOKEN, offsets=store, api_base_url=fake.base_url)

            async def sink(message: object) -> None:
                return None

            await adapter.start(sink)
            try:
                text = "Hey <!channel>, <!here> and <!subteam^S1>: @channel @everyone @here"
                refs = await adapter.send(Target("telegram", "777"), text)
                await adapter.edit(MessageRef(refs[0].target, refs[0].message_id), "@everyone")
            finally:
                await adapter.stop()
        [sent] = fake.calls_to("sendMessage")
        [edited] = fake.calls_to("editMessageText")
        assert sent.params["text"] == (
            "Hey &lt;!channel&gt;, &lt;!here&gt; and &lt;!subteam^S1&gt;: @channel @everyone @here"
        )
        assert edited.params["text"] == "@everyone"
