"""How a Discord press was answered (the interaction callback), for the buttons and approvals
tests."""

from __future__ import annotations

from typing import Any

from tests.fakes.discord_api import FakeDiscordAPI
from tests.support.waiting import until

DEFERRED_UPDATE_MESSAGE = 6
CHANNEL_MESSAGE = 4
EPHEMERAL = 64


async def answered(discord: FakeDiscordAPI, interaction: dict[str, Any]) -> dict[str, Any]:
    """The callback the interaction was answered with."""
    answers = discord.commands.answers
    await until(lambda: interaction["id"] in answers, "the press answered")
    return answers[interaction["id"]]


def told(answer: dict[str, Any]) -> str:
    """What an ephemeral answer (type 4, flags 64) showed the presser."""
    assert answer["type"] == CHANNEL_MESSAGE
    assert answer["data"]["flags"] & EPHEMERAL
    return str(answer["data"]["content"])
