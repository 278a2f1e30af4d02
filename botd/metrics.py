"""In-process counters (messages, runs, errors, model tokens) and a reply-latency histogram in
the Prometheus text format (0.0.4)."""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["DEFAULT_LATENCY_BUCKETS", "Metrics"]

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

_COUNTERS: dict[str, str] = {
    "messages_in": "Inbound messages accepted from a channel.",
    "messages_out": "Messages delivered to a channel.",
    "runs": "Agent runs started.",
    "errors": "Errors (failed runs, failed deliveries, adapter failures).",
}


class _Histogram:
    """One label set's bucket counts (non-cumulative), sum and count."""

    __slots__ = ("buckets", "count", "total")

    def __init__(self, size: int) -> None:
        self.buckets = [0] * size
        self.count = 0
        self.total = 0.0


class Metrics:
    """In-process counters and a latency histogram, labelled by channel.

    botd runs on one event loop, so plain integers are enough: no locks.
    """

    prefix = "botd"

    def __init__(self, latency_buckets: tuple[float, ...] = DEFAULT_LATENCY_BUCKETS) -> None:
        bounds = sorted(set(latency_buckets))
        if not bounds or any(not math.isfinite(b) for b in bounds):
            raise ValueError("latency buckets must be finite numbers")
        self._bounds = tuple(bounds)
        self._counters: dict[str, dict[str, int]] = {name: {} for name in _COUNTERS}
        self._latency: dict[str, _Histogram] = {}
        self._tokens: dict[tuple[str, str], int] = {}
        """Tokens used by (model, kind): input, output, cache_read, cache_write."""

    def inc(self, name: str, channel: str, amount: int = 1) -> None:
        """Add to counter ``name`` (one of messages_in, messages_out, runs, errors)."""
        if name not in self._counters:
            raise KeyError(f"unknown counter {name!r}")
        series = self._counters[name]
        series[channel] = series.get(channel, 0) + amount

    def run(self, channel: str) -> None:
        self.inc("runs", channel)

    def error(self, channel: str) -> None:
        self.inc("errors", channel)

    def observe_latency(self, channel: str, seconds: float) -> None:
        """Record the time from an accepted message to its first delivered reply."""
        hist = self._latency.get(channel)
        if hist is None:
            hist = self._latency[channel] = _Histogram(len(self._bounds))
        for i, bound in enumerate(self._bounds):
            if seconds <= bound:
                hist.buckets[i] += 1
                break
        hist.count += 1
        hist.total += seconds

    def add_tokens(self, model: str, counts: Mapping[str, int]) -> None:
        """Count the tokens ``model`` used, by kind (zero counts add no series)."""
        for kind, amount in counts.items():
            if amount > 0:
                key = (model, kind)
                self._tokens[key] = self._tokens.get(key, 0) + amount

    def tokens(self, model: str, kind: str) -> int:
        """Tokens of ``kind`` that ``model`` used so far (0 when none)."""
        return self._tokens.get((model, kind), 0)

    def value(self, name: str, channel: str) -> int:
        """A counter's current value (0 when never incremented)."""
        return self._counters[name].get(channel, 0)

    def render(self) -> str:
        """The Prometheus text exposition format (0.0.4)."""
        lines: list[str] = []
        for name, help_text in _COUNTERS.items():
            metric = f"{self.prefix}_{name}_total"
            lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} counter"]
            for channel, count in sorted(self._counters[name].items()):
                lines.append(f"{metric}{_labels(channel=channel)} {count}")
        metric = f"{self.prefix}_tokens_total"
        lines += [
            f"# HELP {metric} Model tokens used, by model and kind "
            "(input, output, cache_read, cache_write).",
            f"# TYPE {metric} counter",
        ]
        for (model, kind), count in sorted(self._tokens.items()):
            lines.append(f"{metric}{_labels(model=model, kind=kind)} {count}")
        metric = f"{self.prefix}_reply_latency_seconds"
        lines += [
            f"# HELP {metric} Seconds from an accepted message to its first delivered reply.",
            f"# TYPE {metric} histogram",
        ]
        for channel, hist in sorted(self._latency.items()):
            cumulative = 0
            for bound, n in zip(self._bounds, hist.buckets, strict=True):
                cumulative += n
                le = _format_float(bound)
                lines.append(f"{metric}_bucket{_labels(channel=channel, le=le)} {cumulative}")
            lines.append(f"{metric}_bucket{_labels(channel=channel, le='+Inf')} {hist.count}")
            lines.append(f"{metric}_sum{_labels(channel=channel)} {_format_float(hist.total)}")
            lines.append(f"{metric}_count{_labels(channel=channel)} {hist.count}")
        return "\n".join(lines) + "\n"


def _labels(**labels: str) -> str:
    body = ",".join(f'{key}="{_escape_label(value)}"' for key, value in labels.items())
    return "{" + body + "}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _format_float(value: float) -> str:
    return repr(float(value))
