"""Reading a daemon's health endpoint from a test: a free port to give it, ``/metrics`` parsed."""

from __future__ import annotations

import itertools
import os
import socket

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
"""Every sample of an exposition by (name, labels)."""


PORTS = range(20000, 32500)
"""Where ``free_port`` looks: below Linux's ephemeral range (32768 and up), from which the
kernel hands out every port bound to 0, so no server another test starts meanwhile (a fake
on port 0) can take the port between ``free_port`` and the daemon's bind."""

_next_port = itertools.count()


def free_port() -> int:
    """A loopback port nothing listens on right now, for a server a test's daemon binds
    later: from this xdist worker's own share of ``PORTS`` (another worker's never), each
    handed out once per process."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    share = len(PORTS) // workers
    start = PORTS.start + (int(worker) % workers if worker.isdigit() else 0) * share
    for _ in range(share):
        port = start + (next(_next_port) + os.getpid()) % share
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use (or lingering): the next one
            return port
    raise RuntimeError(f"no free loopback port in {start}..{start + share - 1}")


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
