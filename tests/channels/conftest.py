"""Fixtures shared by the channel adapter tests."""

from __future__ import annotations

from collections.abc import Iterator

import discord
import pytest
from discord.gateway import DiscordWebSocket

from tests.support.health_probe import free_port


@pytest.fixture
def unused_port() -> int:
    """A loopback port nobody listens on (``free_port``: none other is handed it)."""
    return free_port()


@pytest.fixture(autouse=True)
def discord_defaults_untouched() -> Iterator[None]:
    """The Discord adapter points its own clients at the fake, never discord.py's
    process-wide class attributes: each test leaves them as it found them (restored here
    either way, so one write fails one test)."""
    base, gateway = discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    yield
    written = (base, gateway) != (discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
    discord.http.Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = base, gateway
    assert not written, "discord.py's Route.BASE / DEFAULT_GATEWAY were written"
