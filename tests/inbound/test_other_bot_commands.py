"""A command addressed to another bot (``/stop@some_other_bot``) is not for botd: it is skipped,
neither run as a command nor taken as a prompt; ``/stop@<botd's own name>`` works.

End to end with the real python-telegram-bot and anthropic SDKs over the loopback fakes, in a
group, while a run is in progress.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from botd.app import App
from botd.channels.base import Ack
from botd.channels.slack.adapter import SlackAdapter
from botd.chat import InboundMessage, Target
from botd.commands import addressed_elsewhere, chat_command
from botd.config import parse_config
from botd.inbound.access import AccessPolicy, GroupRule
from botd.inbound.router import Router
from botd.store import Store
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.fakes.telegram_api import BOT_USERNAME, FakeTelegramAPI
from tests.support.waiting import HANG_GUARD, until

TOKEN = "123456:TEST-TOKEN"
API_KEY = "sk-ant-test"
GROUP = -100123


def test_commands_addressed_to_another_bot_are_not_botds() -> None:
    assert chat_command("/stop@botd_test_bot", "botd_test_bot") == "/stop"
    assert chat_command("/STOP@BOTD_TEST_BOT now", "botd_test_bot") == "/stop"
    assert chat_command("/stop@some_other_bot", "botd_test_bot") is None
    assert chat_command("/stop@some_other_bot") == "/stop"  # own name unknown: as before
    assert addressed_elsewhere("/stop@some_other_bot please", "botd_test_bot") == "some_other_bot"
    assert addressed_elsewhere("/weather@weather_bot", "botd_test_bot") == "weather_bot"
    for not_elsewhere in ("/stop@botd_test_bot", "/stop", "hi @other_bot", "/home/u@example.com"):
        assert addressed_elsewhere(not_elsewhere, "botd_test_bot") is None
    assert addressed_elsewhere("/stop@some_other_bot", "") is None


class Recorder:
    def __init__(self) -> None:
        self.submitted: list[InboundMessage] = []

    async def submit(self, message: InboundMessage) -> None:
        self.submitted.append(message)

    async def reply(self, target: Target, text: str) -> None:
        raise AssertionError(f"replied {text!r}")


def _message(text: str, n: int, *, direct: bool = False) -> InboundMessage:
    chat = "alice" if direct else "g1"
    return InboundMessage(
        channel="telegram",
        chat_id=chat,
        sender_id="alice",
        text=text,
        message_id=str(n),
        conversation_key=f"telegram:{chat}",
        is_direct=direct,
        bot_name="botd_test_bot",
    )


async def test_the_router_skips_them_with_one_log_line_even_without_mention_gating(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    rec = Recorder()
    policy = AccessPolicy(
        dm_policy="open", group_policy="open", groups={"*": GroupRule(require_mention=False)}
    )
    router = Router(store, rec.submit, rec.reply, {"telegram": policy})
    with caplog.at_level(logging.INFO, logger="botd.inbound.router"):
        skipped = await router.handle(_message("/stop@some_other_bot", 1))
        in_dm = await router.handle(_message("/help@some_other_bot", 2, direct=True))
        again = await router.handle(_message("/stop@some_other_bot", 1))
    assert not skipped.accepted and skipped.reason == "a command for @some_other_bot"
    assert not in_dm.accepted and not again.accepted
    assert [r.levelno for r in caplog.records if "some_other_bot" in r.getMessage()] == [
        logging.INFO
    ] * 2
    assert (await router.handle(_message("/stop@botd_test_bot", 3))).accepted
    assert (await router.handle(_message("/home/u@example.com is full", 4))).accepted
    assert [m.text for m in rec.submitted] == ["/stop@botd_test_bot", "/home/u@example.com is full"]


async def test_stop_for_another_bot_leaves_the_run_and_stop_for_botd_stops_it(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key=API_KEY) as model:
        model.push(stream(text("The first half ", "of a long answer"), hang_after=5))
        config = parse_config(
            f"""
state_dir: {json.dumps(str(tmp_path / "state"))}
health: {{enabled: false}}
model:
  provider: anthropic
  name: claude-test
  api_key: {API_KEY}
  base_url: {json.dumps(model.base_url)}
channels:
  telegram:
    token: {json.dumps(TOKEN)}
    api_base_url: {json.dumps(telegram.base_url)}
    poll_timeout: 1
    group_policy: open
""",
            {},
        )
        daemon = App(config, env={})
        task = asyncio.create_task(daemon.run())
        try:
            telegram.push_text(GROUP, f"@{BOT_USERNAME} tell me everything")
            await model.wait_silent(0, HANG_GUARD)
            telegram.push_text(GROUP, "/stop@some_other_bot")
            # Updates are handled in order: once botd answers this, the other one was decided.
            telegram.push_text(GROUP, f"/status@{BOT_USERNAME}")
            await telegram.wait_for_call("sendMessage", 1, timeout=HANG_GUARD)
            [status] = _sent(telegram)
            assert "working" in status
            assert not model.streams[0].ended.is_set()  # the run goes on
            assert len(model.requests) == 1  # and the other bot's command was no prompt

            telegram.push_text(GROUP, f"/stop@{BOT_USERNAME}")
            assert (await model.wait_stream_ended(0, HANG_GUARD)).closed_by_client
            await telegram.wait_for_call("sendMessage", 2, timeout=HANG_GUARD)
        finally:
            daemon.request_stop()
            assert await asyncio.wait_for(task, HANG_GUARD) == 0
    assert _sent(telegram) == [status, "Stopped."]
    assert len(model.requests) == 1


def _sent(telegram: FakeTelegramAPI) -> list[str]:
    return [c.params["text"] for c in telegram.calls_to("sendMessage", ok_only=True)]


async def test_slack_knows_its_bot_name_from_auth_test(store: Store) -> None:
    """Slack has no ``/command@bot`` convention; with the name from ``auth.test`` a command
    naming another bot is skipped all the same."""
    async with FakeSlack() as fake:
        rec = Recorder()
        policy = AccessPolicy(dm_policy="open")
        router = Router(store, rec.submit, rec.reply, {"slack": policy})

        async def sink(message: InboundMessage, *, ack: Ack | None = None) -> None:
            await router.handle(message, ack=ack)

        adapter = SlackAdapter(
            bot_token="xoxb-test", app_token="xapp-test", api_base_url=fake.base_url
        )
        await asyncio.wait_for(adapter.start(sink), HANG_GUARD)
        try:
            for ts, said in (("1.000001", "/stop@someone_else"), ("1.000002", "/stop@botd")):
                event = {"type": "message", "channel": "D1", "channel_type": "im", "user": "U1"}
                await fake.send_event(event_callback({**event, "text": said, "ts": ts}))
            await until(lambda: len(fake.acks) >= 2, "len(fake.acks) >= 2")
        finally:
            await adapter.stop()
    assert adapter.bot_name == "botd"
    assert [m.text for m in rec.submitted] == ["/stop@botd"]
