"""Fixtures shared by the channel adapter tests."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture
def unused_port() -> int:
    """A loopback port nobody listens on (bound once, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
