"""Reading a daemon's health endpoint from a test: a free port to give it, ``/metrics`` parsed."""

from __future__ import annotations

import socket

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
"""Every sample of an exposition by (name, labels)."""


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def scrape(port: int) -> tuple[Samples, dict[str, str]]:
    """``/metrics`` parsed: every sample by (name, labels), and each family's type."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as resp,
    ):
        assert resp.status == 200
        exposition = await resp.text()
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(exposition):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples, types


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample of ``name`` with exactly ``labels``, or None."""
    return samples.get((name, frozenset(labels.items())))


def named(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """Every sample of ``name`` by its labels."""
    return {labels: v for (n, labels), v in samples.items() if n == name}
