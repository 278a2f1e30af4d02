"""``botd init``: a starting config from a few answers, valid as written, never overwriting."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from botd.channels.base import ChannelAdapter
from botd.channels.registry import (
    ChannelContext,
    ChannelSpec,
    InitQuestions,
    SecretQuestion,
    channel_specs,
)
from botd.cli.init import ask_answers, init, render
from botd.config import ChatChannelSection, Secret, load_config, parse_config
from tests.support.daemon_process import BOTD, HANG_GUARD, daemon_env


def _init(path: Path, answers: str) -> tuple[int, str]:
    out = io.StringIO()
    status = init(path, io.StringIO(answers), out)
    return status, out.getvalue()


async def test_defaults_make_a_telegram_config_botd_check_accepts(tmp_path: Path) -> None:
    path = tmp_path / "botd.yaml"
    process = await asyncio.create_subprocess_exec(
        *BOTD,
        "init",
        str(path),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,
        env=daemon_env(),
    )
    out, err = await asyncio.wait_for(process.communicate(b"\n\n\n\n\n"), HANG_GUARD)
    assert process.returncode == 0, err.decode()
    assert "botd doctor --config" in out.decode()
    text = path.read_text()
    assert "token: ${TELEGRAM_TOKEN}" in text and "dm_policy: pairing" in text
    assert "api_key: ${ANTHROPIC_API_KEY}" in text
    check = await asyncio.create_subprocess_exec(
        *BOTD,
        "check",
        "--config",
        str(path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,
        env=daemon_env(TELEGRAM_TOKEN="1:x", ANTHROPIC_API_KEY="sk-x"),
    )
    out, err = await asyncio.wait_for(check.communicate(), HANG_GUARD)
    assert check.returncode == 0, err.decode()


@pytest.mark.parametrize(
    ("answers", "env", "expected"),
    [
        ("slack\nBOT\nAPP\nopen\nscripted\n", {"BOT": "b", "APP": "a"}, "app_token: ${APP}"),
        ("discord\n\nallowlist\nscripted\n", {"DISCORD_TOKEN": "d"}, "allow_from: []"),
        ("console\nscripted\n", {}, "console:"),
        (
            "telegram\n\ndisabled\nopenai\nhttp://localhost:11434/v1\nllama3: 8b #x\nKEY\n",
            {"TELEGRAM_TOKEN": "t", "KEY": "k"},
            'name: "llama3: 8b #x"',
        ),
    ],
)
def test_every_platform_and_provider_gives_a_valid_config(
    tmp_path: Path, answers: str, env: dict[str, str], expected: str
) -> None:
    path = tmp_path / "botd.yaml"
    status, _ = _init(path, answers)
    assert status == 0
    assert expected in path.read_text()
    load_config(path, env)


def test_wrong_answers_are_asked_again(tmp_path: Path) -> None:
    path = tmp_path / "botd.yaml"
    status, out = _init(path, "telgram\ntelegram\n9BAD\nMY_TOKEN\nsometimes\nopen\nscripted\n")
    assert status == 0
    assert "please answer one of: telegram, slack, discord, console" in out
    assert "a variable name" in out
    text = path.read_text()
    assert "token: ${MY_TOKEN}" in text and "dm_policy: open" in text


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "botd.yaml"
    path.write_text("mine\n")
    status, out = _init(path, "\n\n\n\n\n")
    assert status == 1
    assert out == ""  # refused before asking anything
    assert path.read_text() == "mine\n"


def test_end_of_input_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "botd.yaml"
    status, _ = _init(path, "slack\n")
    assert status == 2
    assert not path.exists()


class RoomSection(ChatChannelSection):
    key: Secret


def _no_adapter(section: RoomSection, context: ChannelContext) -> ChannelAdapter:
    raise AssertionError("botd init builds no adapter")


ROOM = ChannelSpec(
    name="room",
    section=RoomSection,
    factory=_no_adapter,
    init=InitQuestions(secrets=(SecretQuestion("key", "ROOM_KEY", "the room key"),), rank=50),
)


def test_a_plugin_channel_is_offered_with_its_own_questions() -> None:
    specs = {**channel_specs(), "room": ROOM}
    out = io.StringIO()
    answers = ask_answers(io.StringIO("rom\nroom\n\nopen\nscripted\n"), out, specs)
    asked = out.getvalue()
    assert "please answer one of: telegram, slack, discord, console, room" in asked
    assert "Environment variable holding the room key (default ROOM_KEY)" in asked
    text = render(answers)
    assert "  room:\n    key: ${ROOM_KEY}\n    dm_policy: open\n" in text
    config = parse_config(text, {"ROOM_KEY": "k"}, channels=specs)
    assert config.channels.enabled() == ["room"]
