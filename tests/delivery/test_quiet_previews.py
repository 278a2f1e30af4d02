"""An ``edit`` preview rings once: its first message notifies (the final edit that completes
the answer cannot), the further messages it posts are silent. The whole daemon with the real
SDK over the Telegram fake; the model's stream stays open, so what shows is the preview."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)
from tests.support.waiting import until

DM = 777
LONG = " ".join(f"word{n}" for n in range(40))
"""About 300 characters: three messages of at most 100."""


async def test_the_first_preview_message_notifies_and_the_further_ones_are_silent(
    tmp_path: Path,
) -> None:
    async with (
        FakeAnthropicAPI(api_key="sk-ant-test") as model,
        FakeTelegramAPI() as telegram,
    ):
        # One chunk, then the stream stays open: the preview shows the whole text at once.
        model.push(stream(text(LONG), stall=True))
        section = telegram_yaml(
            telegram, "dm_policy: open", "delivery: edit", "text_chunk_limit: 100"
        )
        async with daemon_running(config_yaml(tmp_path, anthropic_yaml(model), section)):
            telegram.push_text(DM, "tell me a lot")
            await until(lambda: len(telegram.visible(DM)) >= 3, "the preview's messages")
            posted = [
                c.params.get("disable_notification")
                for c in telegram.calls_to("sendMessage", ok_only=True)
            ]
            telegram.push_text(DM, "/stop")
            await until(lambda: "Stopped." in telegram.visible(DM), "the run stopped")
    # As PTB writes it: a form field "true"; the first message has none (it notifies).
    assert posted[0] is None
    assert posted[1:] == ["true"] * (len(posted) - 1)
