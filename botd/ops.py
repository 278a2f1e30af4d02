"""Operations: systemd notification and watchdog, metrics, the health endpoint and logging.

Everything an operator sees of a running daemon, kept free of the rest of botd so the daemon's
wiring (``botd/daemon.py``) only has to call into it:

- ``SystemdNotifier`` speaks the ``sd_notify`` datagram protocol on ``$NOTIFY_SOCKET``
  (``READY=1``, ``STATUS=``, ``WATCHDOG=1``, ``STOPPING=1``) and is a no-op outside systemd.
- ``Metrics`` counts messages, runs and errors per channel and keeps a latency histogram,
  rendered in the Prometheus text exposition format (version 0.0.4).
- ``HealthServer`` serves ``/healthz`` and ``/metrics`` on 127.0.0.1 with aiohttp.
- ``configure_logging`` installs text or JSON-lines logging that carries the ``LogContext``
  ids (channel, conversation, run) and masks anything shaped like a secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import math
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Literal, TextIO

from aiohttp import web

__all__ = [
    "DEFAULT_LATENCY_BUCKETS",
    "HealthServer",
    "LogContext",
    "Metrics",
    "SecretFilter",
    "SystemdNotifier",
    "add_secret",
    "configure_logging",
    "mask_secrets",
]

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- systemd


class SystemdNotifier:
    """Sends ``sd_notify`` messages to ``$NOTIFY_SOCKET``; does nothing when it is unset.

    The environment is read once, at construction. Sending never raises: a socket that is
    gone or refuses the datagram is logged once (a warning) and later failures stay quiet.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self._address = _notify_address(env.get("NOTIFY_SOCKET", ""))
        self._watchdog_usec = env.get("WATCHDOG_USEC", "")
        self._watchdog_pid = env.get("WATCHDOG_PID", "")
        self._warned = False

    @property
    def enabled(self) -> bool:
        """Whether a notify socket is configured."""
        return self._address is not None

    def notify(self, *assignments: str) -> bool:
        """Send ``KEY=VALUE`` lines as one datagram; True when it was sent."""
        if self._address is None or not assignments:
            return False
        payload = "\n".join(assignments).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.setblocking(False)
                sock.sendto(payload, self._address)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning("systemd notify socket %r unusable: %s", self._address, exc)
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """Tell systemd start-up is complete (``Type=notify``)."""
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> bool:
        """Set the one-line status shown by ``systemctl status``."""
        return self.notify(f"STATUS={_one_line(text)}")

    def watchdog(self) -> bool:
        """Ping the service watchdog."""
        return self.notify("WATCHDOG=1")

    def stopping(self, status: str | None = None) -> bool:
        """Tell systemd an orderly shutdown has begun."""
        return self.notify("STOPPING=1", *([f"STATUS={status}"] if status else []))

    def watchdog_interval(self) -> float | None:
        """Seconds between pings: half of ``$WATCHDOG_USEC``, or None when no watchdog is set.

        Like ``sd_watchdog_enabled``, a ``$WATCHDOG_PID`` naming another process disables it.
        """
        if self._watchdog_pid and self._watchdog_pid != str(os.getpid()):
            return None
        try:
            usec = int(self._watchdog_usec)
        except ValueError:
            return None
        return usec / 2_000_000 if usec > 0 else None

    async def run_watchdog(self, stop_event: asyncio.Event) -> None:
        """Ping at ``watchdog_interval()`` until ``stop_event`` is set (waits only if none)."""
        interval = self.watchdog_interval()
        if interval is None or not self.enabled:
            await stop_event.wait()
            return
        while not stop_event.is_set():
            self.watchdog()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop_event.wait(), interval)


def _notify_address(value: str) -> str | bytes | None:
    """``$NOTIFY_SOCKET`` as a ``sendto`` address; a leading ``@`` is the abstract namespace."""
    if not value:
        return None
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    return value


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --------------------------------------------------------------------------- metrics

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

    def inc(self, name: str, channel: str, amount: int = 1) -> None:
        """Add to counter ``name`` (one of messages_in, messages_out, runs, errors)."""
        if name not in self._counters:
            raise KeyError(f"unknown counter {name!r}")
        series = self._counters[name]
        series[channel] = series.get(channel, 0) + amount

    def message_in(self, channel: str) -> None:
        self.inc("messages_in", channel)

    def message_out(self, channel: str) -> None:
        self.inc("messages_out", channel)

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


# --------------------------------------------------------------------------- health endpoint


class HealthServer:
    """``GET /healthz`` (channel states as JSON) and ``GET /metrics`` on a local port.

    ``/healthz`` answers 200 with ``status: ok`` when every channel is ``"running"``, else
    503 with ``status: degraded``; the body always lists each channel's state.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        channel_states: Callable[[], dict[str, str]],
        metrics: Metrics,
    ) -> None:
        self._host = host
        self._port = port
        self._channel_states = channel_states
        self._metrics = metrics
        self._runner: web.AppRunner | None = None
        self.app = web.Application()
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/metrics", self._metrics_handler)

    async def start(self) -> int:
        """Bind and serve; returns the bound port (useful with ``port=0``)."""
        if self._runner is not None:
            raise RuntimeError("health server already started")
        runner = web.AppRunner(self.app, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self._host, self._port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        port = int(runner.addresses[0][1])
        log.info("health endpoint on http://%s:%d", self._host, port)
        return port

    async def stop(self) -> None:
        """Stop serving; safe to call when not started."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _healthz(self, request: web.Request) -> web.Response:
        try:
            channels = dict(self._channel_states())
        except Exception:
            log.exception("channel state probe failed")
            return web.json_response({"status": "error", "channels": {}}, status=503)
        healthy = all(state == "running" for state in channels.values())
        body = {"status": "ok" if healthy else "degraded", "channels": channels}
        return web.json_response(body, status=200 if healthy else 503)

    async def _metrics_handler(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self._metrics.render().encode(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )


# --------------------------------------------------------------------------- logging

_channel_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "botd_log_channel", default=None
)
_conversation_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "botd_log_conversation", default=None
)
_run_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("botd_log_run", default=None)

_CONTEXT_FIELDS = ("channel", "conversation", "run")


class LogContext:
    """The ids every log line carries, held in context variables.

    Tasks inherit the context they were created in, so binding the conversation before a run's
    task starts labels everything that run logs::

        with LogContext.bind(channel="telegram", conversation=key, run=run_id):
            ...
    """

    @staticmethod
    @contextlib.contextmanager
    def bind(
        *, channel: str | None = None, conversation: str | None = None, run: str | None = None
    ) -> Iterator[None]:
        """Set the given ids (others keep their current value) until the block exits."""
        tokens: list[tuple[contextvars.ContextVar[str | None], contextvars.Token[str | None]]] = []
        for var, value in (
            (_channel_var, channel),
            (_conversation_var, conversation),
            (_run_var, run),
        ):
            if value is not None:
                tokens.append((var, var.set(value)))
        try:
            yield
        finally:
            for var, token in reversed(tokens):
                var.reset(token)

    @staticmethod
    def current() -> dict[str, str]:
        """The ids set in this context (unset ones left out)."""
        values = (_channel_var.get(), _conversation_var.get(), _run_var.get())
        return {k: v for k, v in zip(_CONTEXT_FIELDS, values, strict=True) if v is not None}


# Known token shapes; group "keep" is left visible so a masked line still says what it was.
_SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"(?P<keep>\bxox[abposr]-)[A-Za-z0-9-]{8,}"),  # Slack bot/user/... tokens
    re.compile(r"(?P<keep>\bxapp-)[A-Za-z0-9-]{8,}"),  # Slack app-level token
    re.compile(r"(?P<keep>\bsk-ant-)[A-Za-z0-9_-]{8,}"),  # Anthropic
    re.compile(r"(?P<keep>\bsk-)[A-Za-z0-9_-]{16,}"),  # OpenAI-style keys
    # Telegram bot token (id:secret), also inside an API URL: ".../bot123:AAH.../getMe"
    re.compile(r"(?P<keep>(?<!\d)\d+:)[A-Za-z0-9_-]{30,}"),
    # Discord bot token: base64 user id . timestamp . HMAC
    re.compile(r"(?P<keep>)\b[A-Za-z0-9_-]{23,28}\.[A-Za-z0-9_-]{6,7}\.[A-Za-z0-9_-]{27,}"),
)
_MASK = "***"
_literal_secrets: set[str] = set()


def add_secret(value: str) -> None:
    """Also mask this exact value (e.g. a configured key of no known shape); short ones ignored."""
    if len(value) >= 8:
        _literal_secrets.add(value)


def mask_secrets(text: str) -> str:
    """``text`` with every token-shaped substring and registered secret masked."""
    for secret in sorted(_literal_secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, _MASK)
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(r"\g<keep>" + _MASK, text)
    return text


class SecretFilter(logging.Filter):
    """Masks secrets in a record's message (after ``%`` formatting) before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_secrets(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


class _ContextFilter(logging.Filter):
    """Copies the ``LogContext`` ids onto the record; ``extra=`` values take precedence."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in LogContext.current().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


_STANDARD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


def _timestamp(record: logging.LogRecord) -> str:
    ms = int(record.msecs)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{ms:03d}Z"


class TextFormatter(logging.Formatter):
    """``time LEVEL logger [channel=... conversation=... run=...] message``."""

    def format(self, record: logging.LogRecord) -> str:
        ids = " ".join(
            f"{key}={getattr(record, key)}" for key in _CONTEXT_FIELDS if hasattr(record, key)
        )
        line = f"{_timestamp(record)} {record.levelname} {record.name}"
        if ids:
            line += f" [{ids}]"
        line += f" {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return mask_secrets(line)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the context ids and any ``extra``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return mask_secrets(json.dumps(entry, default=str, ensure_ascii=False))


_HANDLER_MARK = "_botd_handler"


def configure_logging(
    level: str = "INFO",
    fmt: Literal["text", "json"] = "text",
    *,
    stream: TextIO | None = None,
) -> logging.Handler:
    """Route the root logger to ``stream`` (stderr) in ``fmt``; callable again on reload.

    A handler installed by an earlier call is replaced, other handlers are left alone.
    """
    levels = logging.getLevelNamesMapping()
    if level.upper() not in levels:
        raise ValueError(f"unknown log level {level!r}")
    if fmt not in ("text", "json"):
        raise ValueError(f"unknown log format {fmt!r} (expected 'text' or 'json')")
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(_ContextFilter())
    handler.addFilter(SecretFilter())
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, False):
            root.removeHandler(old)
            old.close()
    root.addHandler(handler)
    root.setLevel(levels[level.upper()])
    return handler
