"""What the doctor tests share: ``botd doctor`` run as a process (its report checked for
leaked secrets) and a config for the loopback fakes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests.fakes.discord_api import FakeDiscordAPI
from tests.support.daemon_process import botd_command, daemon_env

TELEGRAM_TOKEN = "424242:q9ZrTk7pLw2xVb"
WRONG_TELEGRAM = "424242:m3XcRv8Kq1dJh"
MODEL_KEY = "sk-Hn4wQ8vZe1xKp"
SLACK_BOT = "xoxb-Vb3kLm9Qe7rT"
SLACK_APP = "xapp-Zt5pR2wYx8nU"
DISCORD_TOKEN = "Dk2mN5vB8pQr4Ls"
SECRETS = (TELEGRAM_TOKEN, WRONG_TELEGRAM, MODEL_KEY, SLACK_BOT, SLACK_APP, DISCORD_TOKEN)
ENV = {
    "T_TOKEN": TELEGRAM_TOKEN,
    "M_KEY": MODEL_KEY,
    "S_BOT": SLACK_BOT,
    "S_APP": SLACK_APP,
    "D_TOKEN": DISCORD_TOKEN,
}


@dataclass
class Report:
    status: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()

    def failed(self) -> list[str]:
        return [line for line in self.lines if line.startswith("✗")]

    def passed(self) -> list[str]:
        return [line for line in self.lines if line.startswith("✓")]

    def warned(self) -> list[str]:
        return [line for line in self.lines if line.startswith("⚠")]

    def line_with(self, text: str) -> str:
        """The first check line containing ``text`` (not the config line, which names paths)."""
        found = [line for line in self.lines if text in line and " config " not in line[:9]]
        assert found, f"no line with {text!r} in:\n{self.out}{self.err}"
        return found[0]


async def doctor(
    config: Path | None, cwd: Path, *, options: tuple[str, ...] = (), **env: str
) -> Report:
    args = ["doctor", *options] + (["--config", str(config)] if config else [])
    env = daemon_env(**{**ENV, "PYTHONIOENCODING": "utf-8", **env})
    report = Report(*await botd_command(args, cwd, env))
    for secret in SECRETS:
        for start in range(len(secret) - 7):
            piece = secret[start : start + 8]
            assert piece not in report.out + report.err, f"{piece!r} of a secret leaked"
    return report


def write_config(
    tmp_path: Path,
    *,
    telegram: str | None = None,
    slack: str | None = None,
    discord: FakeDiscordAPI | None = None,
    model: str = "provider: scripted",
    extra: str = "",
) -> Path:
    channels = ""
    if telegram is not None:
        channels += f"""
  telegram:
    token: ${{T_TOKEN}}
    api_base_url: {json.dumps(telegram)}
{extra}"""
    if slack is not None:
        channels += f"""
  slack:
    bot_token: ${{S_BOT}}
    app_token: ${{S_APP}}
    api_base_url: {json.dumps(slack)}
"""
    if discord is not None:
        channels += f"""
  discord:
    token: ${{D_TOKEN}}
    api_base_url: {json.dumps(discord.base_url)}
    gateway_url: {json.dumps(discord.gateway_url)}
    guild_ready_timeout: 0.05
"""
    if not channels:
        channels = "\n  console: {enabled: true}"
    config = tmp_path / "botd.yaml"
    config.write_text(
        f"""
state_dir: {json.dumps(str(tmp_path / "state"))}
health: {{enabled: false}}
model:
  {model}
channels:{channels}
""",
        encoding="utf-8",
    )
    return config
