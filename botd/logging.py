"""botd's logging: text or JSON lines, the ids of the conversation being served, masked secrets.

``LogContext`` holds the channel, conversation and run ids in context variables, so every line
logged while a run works carries them. ``mask_secrets`` hides token-shaped text and every value
registered with ``add_secret``; ``configure_logging`` installs the handler that applies both.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import sys
import time
from collections.abc import Iterator
from typing import Literal, TextIO

__all__ = [
    "JsonFormatter",
    "LogContext",
    "SecretFilter",
    "TextFormatter",
    "add_secret",
    "configure_logging",
    "mask_secrets",
]

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
