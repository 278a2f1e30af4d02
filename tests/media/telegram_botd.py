"""botd with Telegram, Anthropic and a transcription and speech service, all loopback fakes,
for the media tests: the daemon in-process with the real SDKs, and readers of what reached
the model."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NamedTuple

from botd.app import App
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
    HANG_GUARD,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)

DM = 777
GROUP = -100123
TRANSCRIBE_KEY = "sk-transcribe-test"


def media_yaml(
    transcriber: FakeOpenAI | None, *, max_bytes: int = 100_000, speech: bool = False
) -> str:
    """A ``media:`` section (transcribing through ``transcriber`` unless it is None; with
    ``speech``, speaking through it too)."""
    lines = f"media:\n  max_bytes: {max_bytes}\n"
    if transcriber is not None:
        lines += (
            "  transcription:\n"
            f"    base_url: {json.dumps(transcriber.base_url)}\n"
            f"    api_key: {TRANSCRIBE_KEY}\n"
            "    model: whisper-test\n"
        )
    if transcriber is not None and speech:
        lines += (
            "  speech:\n"
            f"    base_url: {json.dumps(transcriber.base_url)}\n"
            f"    api_key: {TRANSCRIBE_KEY}\n"
            "    model: tts-test\n"
            "    voice: fable\n"
        )
    return lines


class Botd:
    """A running botd and the fakes it talks to."""

    def __init__(
        self,
        daemon: App,
        telegram: FakeTelegramAPI,
        model: FakeAnthropicAPI,
        transcriber: FakeOpenAI,
    ) -> None:
        self.daemon, self.telegram, self.model, self.transcriber = (
            daemon,
            telegram,
            model,
            transcriber,
        )

    async def idle(self) -> None:
        """Wait (a hang guard) until every session is idle."""
        assert self.daemon.runtime is not None
        await asyncio.wait_for(self.daemon.runtime.dispatcher.drain(), HANG_GUARD)

    def sent(self) -> list[str]:
        return [str(c.params["text"]) for c in self.telegram.calls_to("sendMessage", ok_only=True)]

    def user_content(self, request: int = -1) -> list[dict[str, Any]]:
        """The content blocks of the last user message of model request ``request``."""
        messages = self.model.requests[request].body["messages"]
        content = [m for m in messages if m["role"] == "user"][-1]["content"]
        return [{"type": "text", "text": content}] if isinstance(content, str) else content


class Fakes(NamedTuple):
    """The loopback services botd talks to, and a config pointing at them."""

    telegram: FakeTelegramAPI
    model: FakeAnthropicAPI
    transcriber: FakeOpenAI
    config: str


@asynccontextmanager
async def fakes(
    tmp_path: Path,
    *,
    transcription: bool = True,
    max_bytes: int = 100_000,
    extra: str = "",
    speech: bool = False,
) -> AsyncIterator[Fakes]:
    """The fakes started, and a config for botd over them."""
    async with (
        FakeTelegramAPI() as telegram,
        FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model,
        FakeOpenAI(api_key=TRANSCRIBE_KEY) as transcriber,
    ):
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            telegram_yaml(
                telegram, "dm_policy: open", "groups:", '  "-100123": {require_mention: true}'
            ),
            media_yaml(transcriber if transcription else None, max_bytes=max_bytes, speech=speech),
            extra,
        )
        yield Fakes(telegram, model, transcriber, config)


def telegram_ready(daemon: App) -> bool:
    """Whether ``daemon`` runs its Telegram adapter."""
    return daemon.runtime is not None and "telegram" in daemon.runtime.adapters


@asynccontextmanager
async def botd(
    tmp_path: Path,
    *,
    transcription: bool = True,
    max_bytes: int = 100_000,
    extra: str = "",
    speech: bool = False,
) -> AsyncIterator[Botd]:
    """botd running over :func:`fakes` until the block ends."""
    async with (
        fakes(
            tmp_path, transcription=transcription, max_bytes=max_bytes, extra=extra, speech=speech
        ) as f,
        daemon_running(f.config, ready=telegram_ready) as daemon,
    ):
        yield Botd(daemon, f.telegram, f.model, f.transcriber)


def images(content: list[dict[str, Any]]) -> list[bytes]:
    """The bytes of each inline image among the content blocks ``content``."""
    return [
        base64.b64decode(b["source"]["data"])
        for b in content
        if b["type"] == "image" and b["source"]["type"] == "base64"
    ]


def texts(content: list[dict[str, Any]]) -> str:
    """The text blocks of ``content``, one per line."""
    return "\n".join(b["text"] for b in content if b["type"] == "text")


def last_user_content(model: FakeAnthropicAPI) -> list[dict[str, Any]]:
    """The content blocks of the last user message of the model's last request."""
    messages = model.requests[-1].body["messages"]
    content = [m for m in messages if m["role"] == "user"][-1]["content"]
    assert isinstance(content, list)
    return content
