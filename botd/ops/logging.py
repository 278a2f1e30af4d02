"""botd's logging: text or JSON lines, the ids of the conversation being served, masked secrets.

``LogContext`` holds the channel, conversation and run ids in context variables, so every line
logged while a run works carries them. ``mask_secrets`` hides token-shaped text and every value
registered with ``add_secret`` (as is, URL-encoded or JSON-escaped); ``configure_logging``
installs the root handler that applies both to every record, third-party loggers' and Python
warnings included, in text and JSON alike; other libraries' warnings about parts of them botd
does not use (``not_botds_concern``: a platform package names its SDK's, such as discord.py's
voice support) it logs at DEBUG. ``install_exception_hooks`` and
``asyncio_exception_handler`` send uncaught exceptions through that handler instead of raw
tracebacks on stderr.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import string
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TextIO

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "JsonFormatter",
    "LogContext",
    "TextFormatter",
    "add_secret",
    "add_secrets",
    "asyncio_exception_handler",
    "configure_logging",
    "install_exception_hooks",
    "json_logging",
    "mask_secrets",
    "not_botds_concern",
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


# Known token shapes, each with a text every match contains, tested first since
# a substring test costs far less than a regex scan; group "keep" is left visible so a masked
# line still says what it was. They stay here, not in the platforms' specs: masking is a
# defence that must not depend on a channel's package being loaded (or loading at all), and
# a token shows up where its channel is not configured too (an error, a pasted message, an
# MCP server's env).
_SECRET_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("xox", re.compile(r"(?P<keep>\bxox[abposr]-)[A-Za-z0-9-]{8,}")),  # Slack bot/user/... tokens
    ("xapp-", re.compile(r"(?P<keep>\bxapp-)[A-Za-z0-9-]{8,}")),  # Slack app-level token
    ("sk-ant-", re.compile(r"(?P<keep>\bsk-ant-)[A-Za-z0-9_-]{8,}")),  # Anthropic
    ("sk-", re.compile(r"(?P<keep>\bsk-)[A-Za-z0-9_-]{16,}")),  # OpenAI-style keys
    # Telegram bot token (id:secret), also inside an API URL: ".../bot123:AAH.../getMe"
    (":", re.compile(r"(?P<keep>(?<!\d)\d+:)[A-Za-z0-9_-]{30,}")),
    # Discord bot token: base64 user id . timestamp . HMAC
    (".", re.compile(r"(?P<keep>)\b[A-Za-z0-9_-]{23,28}\.[A-Za-z0-9_-]{6,7}\.[A-Za-z0-9_-]{27,}")),
)
_MASK = "***"
MIN_SECRET_LENGTH = 4
"""Shorter registered values are not masked: hiding every ``abc`` would garble the logs."""

_literal_secrets: set[str] = set()
_literal_pattern: re.Pattern[str] | None = None

# Characters that stay as they are in a URL, JSON and a Python repr.
_PLAIN = frozenset(string.ascii_letters + string.digits + "-_.~")


def _char_forms(char: str) -> str:
    """A pattern for one character of a secret in any form a log line may carry it.

    As is, percent-encoded (any case; ``+`` for a space), JSON-escaped (``\\uXXXX``,
    ``\\"``), and with its backslash doubled by each layer of escaping (a repr inside JSON).
    """
    if char in _PLAIN:
        return re.escape(char)
    forms = [re.escape(char)]
    encoded = "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
    forms.append("(?i:" + re.escape(encoded) + ")")
    if char == " ":
        forms.append(r"\+")
    if ord(char) < 0x10000:
        forms.append(rf"\\{{1,4}}(?i:u{ord(char):04x})")
    if char in "\\\"'/":
        forms.append(r"\\{1,7}" + re.escape(char))
    elif char in "\n\r\t\b\f":
        forms.append(r"\\{1,4}" + {"\n": "n", "\r": "r", "\t": "t", "\b": "b", "\f": "f"}[char])
    return "(?:" + "|".join(forms) + ")"


def _secret_pattern(secret: str) -> str:
    return "".join(_char_forms(char) for char in secret)


def add_secret(value: str) -> None:
    """Also mask this exact value wherever it appears, as is, URL-encoded or JSON-escaped.

    Values shorter than ``MIN_SECRET_LENGTH`` (the empty string too) are ignored.
    """
    global _literal_pattern
    if len(value) < MIN_SECRET_LENGTH or value in _literal_secrets:
        return
    _literal_secrets.add(value)
    ordered = sorted(_literal_secrets, key=len, reverse=True)  # a longer secret wins
    _literal_pattern = re.compile("|".join(_secret_pattern(secret) for secret in ordered))


def add_secrets(values: Iterable[str]) -> None:
    """``add_secret`` for each value (a loaded config's ``secret_values``)."""
    for value in values:
        add_secret(value)


def mask_secrets(text: str) -> str:
    """``text`` with every registered secret and token-shaped substring masked."""
    if _literal_pattern is not None:
        text = _literal_pattern.sub(_MASK, text)
    for marker, pattern in _SECRET_PATTERNS:
        if marker in text:
            text = pattern.sub(r"\g<keep>" + _MASK, text)
    return text


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


class _Demote(logging.Filter):
    """Logs the ``not_botds_concern`` warnings at DEBUG: shown only when the threshold is."""

    def __init__(self, threshold: int) -> None:
        super().__init__()
        self.threshold = threshold

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG:
            return True
        for name, text in _not_botds_concern:
            if record.name == name and text in record.getMessage():
                if self.threshold > logging.DEBUG:
                    return False
                record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


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
        # Each value masked as text, then the line once more for what ``default=str`` and the
        # JSON escaping made of the rest.
        entry = {key: mask_secrets(v) if isinstance(v, str) else v for key, v in entry.items()}
        return mask_secrets(json.dumps(entry, default=str, ensure_ascii=False))


_HANDLER_MARK = "_botd_handler"
# Other libraries' warnings about parts of them botd does not use: (logger, text in the
# message). They are logged at DEBUG instead, so a start shows only what concerns botd.
_not_botds_concern: tuple[tuple[str, str], ...] = ()


def not_botds_concern(logger: str, text: str) -> None:
    """Log the records of ``logger`` (another library's) whose message contains ``text`` at
    DEBUG: they are about a part of it botd does not use, or about a failure botd tells in a
    line of its own. A platform package names its SDK's when it imports the SDK."""
    global _not_botds_concern
    if (logger, text) not in _not_botds_concern:
        # A new tuple, never changed in place: a filter in another thread reads it whole.
        _not_botds_concern = (*_not_botds_concern, (logger, text))


# httpx2/httpcore2: the copies of httpx/httpcore the anthropic SDK carries.
_HTTP_CLIENT_LOGGERS = ("httpx", "httpcore", "httpx2", "httpcore2")


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
    threshold = levels[level.upper()]
    if fmt not in ("text", "json"):
        raise ValueError(f"unknown log format {fmt!r} (expected 'text' or 'json')")
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    # The formatters mask the whole line they produce (message, ids, traceback), so a record
    # needs no masking of its own on the way.
    handler.addFilter(_Demote(threshold))
    handler.addFilter(_ContextFilter())
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, False):
            root.removeHandler(old)
            old.close()
    root.addHandler(handler)
    root.setLevel(threshold)
    # The HTTP clients log a line per request at INFO: two per answered message, noise beside
    # botd's own lines. They are kept for DEBUG; their warnings and errors always show.
    chatty = logging.WARNING if threshold > logging.DEBUG else logging.NOTSET
    for name in _HTTP_CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(chatty)
    logging.captureWarnings(True)  # warnings go through the handler (and its masking) too
    return handler


def json_logging() -> bool:
    """Whether the handler ``configure_logging`` installed writes JSON lines."""
    return any(
        getattr(handler, _HANDLER_MARK, False) and isinstance(handler.formatter, JsonFormatter)
        for handler in logging.getLogger().handlers
    )


# --------------------------------------------------------------------------- uncaught errors

_crash_log = logging.getLogger("botd.uncaught")


def _traceback_text(exc: BaseException | None, tb: TracebackType | None = None) -> str:
    if exc is None:
        return ""
    lines = traceback.format_exception(type(exc), exc, tb if tb is not None else exc.__traceback__)
    return "".join(lines).rstrip()


def _excepthook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    _crash_log.critical("uncaught exception\n%s", mask_secrets(_traceback_text(exc, tb)))


def _thread_excepthook(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    text = _traceback_text(args.exc_value, args.exc_traceback)
    _crash_log.error("uncaught exception in thread %s\n%s", name, mask_secrets(text))


def _unraisablehook(unraisable: sys.UnraisableHookArgs) -> None:
    what = unraisable.err_msg or "Exception ignored in"
    try:
        where = repr(unraisable.object)
    except Exception:
        where = "<object repr failed>"
    text = _traceback_text(unraisable.exc_value, unraisable.exc_traceback)
    _crash_log.warning("%s: %s\n%s", what, mask_secrets(where), mask_secrets(text))


def install_exception_hooks() -> None:
    """Route uncaught exceptions (main thread, other threads, unraisable) to the log, masked.

    Python's own hooks print tracebacks straight to stderr, past the log format and the
    masking; these log them as one record each instead.
    """
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook
    sys.unraisablehook = _unraisablehook


def asyncio_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """An event loop's exception handler: what asyncio reports, logged as one masked record.

    ``loop.set_exception_handler(asyncio_exception_handler)``; asyncio's default handler
    logs the exception with its traceback unmasked by anything but the handler's formatter,
    this one masks every part of the context, the reprs of its objects included.
    """
    message = str(context.get("message") or "unhandled exception in the event loop")
    details = []
    for key, value in context.items():
        if key in ("message", "exception"):
            continue
        try:
            details.append(f"{key}: {value!r}")
        except Exception:
            details.append(f"{key}: <repr failed>")
    text = "\n".join([message, *details])
    exc = context.get("exception")
    if isinstance(exc, BaseException):
        text += "\n" + _traceback_text(exc)
    _crash_log.error("%s", mask_secrets(text))
