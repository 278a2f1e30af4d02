"""botd's Prometheus metrics, kept by ``prometheus_client``.

Each ``Metrics`` has a ``CollectorRegistry`` of its own (never the library's global one), so
several daemons in one process (the tests run many) keep their counts apart. What is counted:

* ``botd_messages_in_total{channel}``: messages accepted into the inbox (chat commands
  included; repeats, refused senders and group chatter not addressed to the bot are not).
* ``botd_messages_out_total{channel}``: messages botd posted that the platform confirmed,
  counted where delivery sends them (``botd.delivery.sender``): every block, final reply,
  command answer, pairing reply, notice and message-tool send, one per platform message (a
  text too long for one message counts once per part) and one per uploaded file. An
  ``edit``-mode preview counts when its message is posted, never for its edits, so a reply
  shown by editing a preview counts once.
* ``botd_errors_total{channel,kind}``, ``kind`` one of ``ERROR_KINDS``.
* ``botd_runs_total{channel}``: agent runs started.
* ``botd_tokens_total{model,kind}``: model tokens used (input, output, cache_read, cache_write).
* ``botd_reply_latency_seconds{channel}``: a histogram of the seconds from a message's
  acceptance to the first piece of its answer in the chat (a preview's first post, in
  ``edit`` mode); runs resumed after a restart are not observed (their arrival is unknown).

And read at scrape time, never per message (``watch``): ``botd_channel_up{channel}``,
``botd_runs_in_flight``, ``botd_inbox_backlog``, ``botd_inbox_oldest_unanswered_seconds`` and
``botd_outbox_pending``.

botd runs on one event loop, so what is counted here is counted from it alone.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

__all__ = ["DEFAULT_LATENCY_BUCKETS", "ERROR_KINDS", "Backlog", "ErrorKind", "Metrics"]

log = logging.getLogger(__name__)

DEFAULT_LATENCY_BUCKETS: tuple[float, ...] = (
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)

ErrorKind = Literal["send_retry", "send_failed", "unreachable", "channel_down", "run_failed"]
"""What ``botd_errors_total`` counts, by its ``kind`` label:

* ``send_retry``: a send, upload, edit or delete failed for a passing reason (a 5xx, a 429,
  a lost connection) and is tried again; one per failed attempt;
* ``send_failed``: a reply did not reach its chat: the platform refused it, or its retry
  budget was spent;
* ``unreachable``: a running channel's SDK could not reach its platform (a long poll, a
  socket or a gateway connection failed) and tries again by itself; one per failed try;
* ``channel_down``: a channel was marked down: it failed to start, a retry of it failed, or
  its adapter reported it dead;
* ``run_failed``: an agent run ended in an error.
"""
ERROR_KINDS: tuple[ErrorKind, ...] = get_args(ErrorKind)

UP_STATE = "running"
"""The channel state ``botd_channel_up`` shows as 1; every other state (starting, down,
stopped) is 0."""


@dataclass(frozen=True, slots=True)
class Backlog:
    """What waits in the store, read when asked."""

    inbox: int
    """Accepted messages not answered, failed or skipped yet."""
    oldest_unanswered_seconds: float | None
    """Age of the oldest of them (None: there is none)."""
    outbox_pending: int
    """Reply pieces written to the outbox and not yet confirmed sent (or refused)."""


class Metrics:
    """botd's counters, histogram and scrape-time gauges (see the module docstring)."""

    def __init__(self, latency_buckets: tuple[float, ...] = DEFAULT_LATENCY_BUCKETS) -> None:
        bounds = sorted(set(latency_buckets))
        if not bounds or any(not math.isfinite(b) for b in bounds):
            raise ValueError("latency buckets must be finite numbers")
        self.registry = CollectorRegistry()
        """Everything ``/metrics`` serves."""
        registry = self.registry
        self._messages_in = Counter(
            "botd_messages_in",
            "Messages accepted into the inbox from a channel (chat commands included; "
            "repeats, refused senders and group chatter not addressed to the bot are not).",
            ["channel"],
            registry=registry,
        )
        self._messages_out = Counter(
            "botd_messages_out",
            "Messages posted to a channel that the platform confirmed: blocks, final replies, "
            "command answers, pairing replies, notices, message-tool sends; one per platform "
            "message or uploaded file. An edit-mode preview counts when posted, not per edit.",
            ["channel"],
            registry=registry,
        )
        self._runs = Counter("botd_runs", "Agent runs started.", ["channel"], registry=registry)
        self._errors = Counter(
            "botd_errors",
            "Failures by kind: send_retry (a send, upload, edit or delete failed for a passing "
            "reason and is retried; per attempt), send_failed (a reply refused by the platform "
            "or given up after its retry budget), channel_down (a channel marked down: failed "
            "to start, a failed retry, or reported dead), run_failed (a run ended in an error).",
            ["channel", "kind"],
            registry=registry,
        )
        self._tokens = Counter(
            "botd_tokens",
            "Model tokens used, by model and kind (input, output, cache_read, cache_write).",
            ["model", "kind"],
            registry=registry,
        )
        self._latency = Histogram(
            "botd_reply_latency_seconds",
            "Seconds from a message's acceptance to the first piece of its answer in the chat.",
            ["channel"],
            buckets=bounds,
            registry=registry,
        )
        self._in_flight = 0
        self._watched = False
        self._backlog: Callable[[], Awaitable[Backlog]] | None = None
        self._last_backlog: Backlog | None = None

    # -- counting --------------------------------------------------------------------------

    def message_in(self, channel: str) -> None:
        """A message from ``channel`` was accepted."""
        self._messages_in.labels(channel=channel).inc()

    def message_out(self, channel: str, count: int = 1) -> None:
        """``count`` messages were posted to ``channel`` and confirmed."""
        self._messages_out.labels(channel=channel).inc(count)

    def error(self, channel: str, kind: ErrorKind) -> None:
        """One failure of ``kind`` on ``channel``."""
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown error kind {kind!r}")
        self._errors.labels(channel=channel, kind=kind).inc()

    def run_started(self, channel: str) -> None:
        self._runs.labels(channel=channel).inc()
        self._in_flight += 1

    def run_ended(self, channel: str, failed: bool) -> None:
        self._in_flight = max(0, self._in_flight - 1)
        if failed:
            self.error(channel, "run_failed")

    @property
    def runs_in_flight(self) -> int:
        """Runs started and not ended."""
        return self._in_flight

    def observe_latency(self, channel: str, seconds: float) -> None:
        """Record the time from an accepted message to the first piece of its answer."""
        self._latency.labels(channel=channel).observe(seconds)

    def add_tokens(self, model: str, counts: Mapping[str, int]) -> None:
        """Count the tokens ``model`` used, by kind (zero counts add no series)."""
        for kind, amount in counts.items():
            if amount > 0:
                self._tokens.labels(model=model, kind=kind).inc(amount)

    # -- reading ---------------------------------------------------------------------------

    def watch(
        self,
        channel_states: Callable[[], Mapping[str, str]],
        backlog: Callable[[], Awaitable[Backlog]],
    ) -> None:
        """Serve the scrape-time gauges from these: each channel's state (``running`` is
        up) and what waits in the store. Called once, when the daemon has both."""
        if self._watched:
            raise RuntimeError("these metrics already watch a daemon")
        self._watched = True
        self._backlog = backlog
        self.registry.register(_Live(self, channel_states))

    async def read_backlog(self) -> Backlog | None:
        """Read what waits in the store now (the scrape and ``/healthz`` do, first); None
        before ``watch`` or when the store cannot be read (logged)."""
        self._last_backlog = None
        if self._backlog is None:
            return None
        try:
            self._last_backlog = await self._backlog()
        except Exception as exc:  # a store that cannot be read leaves these out, not the rest
            log.warning("reading the inbox and outbox backlog failed: %s", exc)
        return self._last_backlog

    def backlog(self) -> Backlog | None:
        """What waited in the store at the last ``read_backlog`` (None: not read, or the
        store could not be read)."""
        return self._last_backlog

    async def stats(self) -> dict[str, int | float | None]:
        """Runs in flight and what waits in the store, as ``/healthz`` shows them."""
        stats: dict[str, int | float | None] = {"runs_in_flight": self._in_flight}
        backlog = await self.read_backlog()
        if backlog is not None:
            oldest = backlog.oldest_unanswered_seconds
            stats["inbox_backlog"] = backlog.inbox
            stats["inbox_oldest_unanswered_seconds"] = None if oldest is None else round(oldest, 3)
            stats["outbox_pending"] = backlog.outbox_pending
        return stats

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (0 when it has none), e.g.
        ``value("botd_messages_out_total", channel="telegram")``."""
        found = self.registry.get_sample_value(name, labels)
        return 0.0 if found is None else found

    def tokens(self, model: str, kind: str) -> int:
        """Tokens of ``kind`` that ``model`` used so far (0 when none)."""
        return int(self.value("botd_tokens_total", model=model, kind=kind))

    def render(self) -> str:
        """The Prometheus text exposition format (0.0.4)."""
        return generate_latest(self.registry).decode()


class _Live:
    """The gauges read when scraped: channel states, runs in flight, the store's backlog."""

    def __init__(self, metrics: Metrics, channel_states: Callable[[], Mapping[str, str]]) -> None:
        self._metrics = metrics
        self._channel_states = channel_states

    def describe(self) -> Iterable[Metric]:
        """The families without samples (what registering checks names against): nothing
        is read before the first scrape."""
        return _families()

    def collect(self) -> Iterable[Metric]:
        up, in_flight, inbox, oldest, outbox = _families()
        for channel, state in sorted(self._channel_states().items()):
            up.add_metric([channel], 1.0 if state == UP_STATE else 0.0)
        in_flight.add_metric([], self._metrics.runs_in_flight)
        families: list[Metric] = [up, in_flight]
        backlog = self._metrics.backlog()
        if backlog is None:
            return families
        inbox.add_metric([], backlog.inbox)
        oldest.add_metric([], backlog.oldest_unanswered_seconds or 0.0)
        outbox.add_metric([], backlog.outbox_pending)
        return [*families, inbox, oldest, outbox]


def _families() -> tuple[
    GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily
]:
    return (
        GaugeMetricFamily(
            "botd_channel_up",
            "1 while a channel is running, 0 while it is starting, down or stopped.",
            labels=["channel"],
        ),
        GaugeMetricFamily("botd_runs_in_flight", "Agent runs started and not yet ended."),
        GaugeMetricFamily(
            "botd_inbox_backlog",
            "Accepted messages not yet answered, failed or skipped (waiting or being answered).",
        ),
        GaugeMetricFamily(
            "botd_inbox_oldest_unanswered_seconds",
            "Age of the oldest accepted message not yet answered, failed or skipped (0: none).",
        ),
        GaugeMetricFamily(
            "botd_outbox_pending",
            "Reply pieces of runs written to the outbox and not yet confirmed sent or refused.",
        ),
    )
