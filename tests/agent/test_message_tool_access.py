"""The message tool in a running botd, over the real Telegram and Anthropic SDKs and the
loopback fakes: an allowed user (or a prompt injection) cannot make the bot post into a group
off the allowlist, into a stranger's DM, or from one group into another; the own conversation
and listed targets the policy allows work; a reload's new policy and targets count at once.

A refused send reaches nobody (the fake shows nothing in that chat), comes back to the model
as an error tool result in its next request, and is logged as a warning.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from botd.app import App
from botd.config import load_config
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, tool_use
from tests.fakes.telegram_api import FakeTelegramAPI, user
from tests.support.waiting import HANG_GUARD, until

TOKEN = "123456:TEST-TOKEN"
FRIEND = 111  # on allow_from
STRANGER = 999  # never approved
GROUP_B = -100200  # allowlisted, the friend talks to the bot here
GROUP_A = -100400  # allowlisted, not a message target
LISTED = -100300  # allowlisted and a message target
LISTED_OFF = -100888  # a message target the group allowlist does not name
UNLISTED_OFF = -100999  # neither


def _config(
    tmp_path: Path,
    telegram: FakeTelegramAPI,
    model: FakeAnthropicAPI,
    groups: list[int],
    targets: list[str],
) -> str:
    group_lines = "".join(f'      "{g}": {{require_mention: false}}\n' for g in groups)
    return f"""
state_dir: {json.dumps(str(tmp_path / "state"))}
health: {{enabled: false}}
model:
  provider: anthropic
  name: claude-test
  api_key: sk-ant-test
  base_url: {json.dumps(model.base_url)}
  max_retry_wait: 1
agent:
  message_targets: {json.dumps(targets)}
channels:
  telegram:
    token: {json.dumps(TOKEN)}
    api_base_url: {json.dumps(telegram.base_url)}
    dm_policy: pairing
    allow_from: ["{FRIEND}"]
    group_policy: allowlist
    groups:
{group_lines}"""


class Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def warnings() -> Iterator[Warnings]:
    handler = Warnings()
    loggers = [logging.getLogger("botd.agent.tools.message.tool"), logging.getLogger("botd.app")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)


def _send(tool_id: str, chat: int | None, message: str) -> Any:
    args: dict[str, str] = {"action": "send", "message": message}
    if chat is not None:
        args |= {"to": str(chat), "channel": "telegram"}
    return tool_use(tool_id, "message", json.dumps(args))


def _tool_results(body: dict[str, Any]) -> dict[str, tuple[bool, str]]:
    """Every tool result in a request: tool_use_id -> (is_error, text)."""
    found: dict[str, tuple[bool, str]] = {}
    for message in body["messages"]:
        content = message["content"]
        if not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") != "tool_result":
                continue
            inner = block.get("content", "")
            words = (
                inner if isinstance(inner, str) else "".join(part.get("text", "") for part in inner)
            )
            found[block["tool_use_id"]] = (bool(block.get("is_error")), words)
    return found


class Bot:
    """A botd running in this process on the fakes; its config file can be rewritten."""

    def __init__(self, tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI) -> None:
        self.tmp_path, self.telegram, self.model = tmp_path, telegram, model
        self.path = tmp_path / "botd.yaml"
        self.daemon: App | None = None
        self.task: asyncio.Task[int] | None = None

    def write(self, groups: list[int], targets: list[str]) -> None:
        text = _config(self.tmp_path, self.telegram, self.model, groups, targets)
        self.path.write_text(text, encoding="utf-8")

    async def start(self) -> App:
        self.daemon = App(load_config(self.path, {}), env={}, config_path=self.path)
        self.task = asyncio.create_task(self.daemon.run())
        daemon = self.daemon
        await until(
            lambda: daemon.runtime is not None and "telegram" in daemon.runtime.adapters,
            "the daemon's telegram adapter running",
        )
        return self.daemon

    async def stop(self) -> None:
        if self.daemon is not None and self.task is not None:
            self.daemon.request_stop()
            assert await asyncio.wait_for(self.task, HANG_GUARD) == 0

    async def run(self, chat: int, prompt: str, *calls: Any) -> dict[str, tuple[bool, str]]:
        """One run in ``chat``: the model makes ``calls`` at once, then says "done"; returns
        the tool results its second request carried."""
        first = len(self.model.requests)
        answered = len(self.telegram.calls_to("sendMessage", ok_only=True))
        self.model.push(stream(*calls, stop_reason="tool_use"), stream(text("done")))
        sender = user(FRIEND)
        self.telegram.push_text(chat, prompt, sender=sender)
        await until(
            lambda: any(
                c.params["text"] == "done" and int(c.params["chat_id"]) == chat
                for c in self.telegram.calls_to("sendMessage", ok_only=True)[answered:]
            ),
            f'"done" in chat {chat}',
        )
        assert len(self.model.requests) == first + 2
        return _tool_results(self.model.requests[first + 1].body)


async def test_the_message_tool_reaches_only_where_it_belongs(
    tmp_path: Path, warnings: Warnings
) -> None:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        bot = Bot(tmp_path, telegram, model)
        bot.write(
            [GROUP_B, GROUP_A, LISTED],
            [f"telegram/{LISTED}", f"telegram/{LISTED_OFF}", f"telegram/{STRANGER}"],
        )
        await bot.start()
        try:
            # The friend's DM: off-allowlist groups, a stranger, the own chat, a listed group.
            results = await bot.run(
                FRIEND,
                "spread the word",
                _send("t1", UNLISTED_OFF, "join my scam"),
                _send("t2", LISTED_OFF, "listed, but off the allowlist"),
                _send("t3", STRANGER, "hello stranger"),
                _send("t4", None, "a note for you"),
                _send("t5", FRIEND, "a note by id"),
                _send("t6", LISTED, "announcement"),
            )
            assert results["t1"] == (
                True,
                f"not allowed: telegram:{UNLISTED_OFF}: "
                "not this conversation and not in agent.message_targets",
            )
            assert results["t2"] == (
                True,
                f"not allowed: telegram:{LISTED_OFF}: the access policy refuses chat "
                f"{LISTED_OFF} (group {LISTED_OFF} is not on the allowlist)",
            )
            assert results["t3"] == (
                True,
                f"not allowed: telegram:{STRANGER}: the access policy refuses chat "
                f"{STRANGER} (user {STRANGER} has not been paired or allowlisted)",
            )
            assert results["t4"] == (False, "sent")
            assert results["t5"] == (False, "sent")
            assert results["t6"] == (False, "sent")

            # From group B into group A (both allowlisted; A is no target): refused.
            results = await bot.run(
                GROUP_B,
                "tell group A",
                _send("t7", GROUP_A, "hello from B"),
                _send("t8", GROUP_B, "hello B"),
            )
            assert results["t7"][0] and "not in agent.message_targets" in results["t7"][1]
            assert results["t8"] == (False, "sent")

            assert telegram.visible(UNLISTED_OFF) == []
            assert telegram.visible(LISTED_OFF) == []
            assert telegram.visible(STRANGER) == []
            assert telegram.visible(GROUP_A) == []
            assert telegram.visible(FRIEND) == ["a note for you", "a note by id", "done"]
            assert telegram.visible(LISTED) == ["announcement"]
            assert telegram.visible(GROUP_B) == ["hello B", "done"]
            # No pairing code went to the stranger, nothing was recorded for them.
            assert not (tmp_path / "state" / "pairing.json").exists()

            refusals = [line for line in warnings.lines if "refused a send" in line]
            assert len(refusals) == 4
            assert refusals[0] == (
                f"message tool: refused a send to telegram:{UNLISTED_OFF} from conversation "
                f"telegram:{FRIEND}: not this conversation and not in agent.message_targets"
            )
            assert f"to telegram:{GROUP_A} from conversation telegram:{GROUP_B}:" in refusals[3]

            # A reload: the listed group leaves the allowlist, group A becomes a target.
            assert bot.daemon is not None and bot.daemon.runtime is not None
            before = bot.daemon.runtime.config
            bot.write([GROUP_B, GROUP_A], [f"telegram/{LISTED}", f"telegram/{GROUP_A}"])
            bot.daemon.request_reload()
            runtime = bot.daemon.runtime
            await until(
                lambda: runtime.config is not before and "telegram" in runtime.adapters,
                "the reload applied",
            )
            results = await bot.run(
                GROUP_B,
                "again",
                _send("t9", GROUP_A, "hello A, now allowed"),
                _send("t10", LISTED, "no longer allowed"),
            )
            assert results["t9"] == (False, "sent")
            assert results["t10"] == (
                True,
                f"not allowed: telegram:{LISTED}: the access policy refuses chat {LISTED} "
                f"(group {LISTED} is not on the allowlist)",
            )
            assert telegram.visible(GROUP_A) == ["hello A, now allowed"]
            assert telegram.visible(LISTED) == ["announcement"]
            # The targets applied at once: no "applies when botd restarts" for them.
            assert not any("restart" in line for line in warnings.lines)
        finally:
            await bot.stop()
            for handler in root.handlers[:]:
                if handler not in handlers:
                    root.removeHandler(handler)
            root.setLevel(level)
