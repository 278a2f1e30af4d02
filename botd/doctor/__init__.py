"""``botd doctor``: the config checked, then every credential and the state dir probed live.

Each check is one line, ``✓`` or ``✗``, saying what was checked and, on ``✗``, what to do.
The probes are the cheapest read-only requests each service has: Telegram ``getMe`` and
``getWebhookInfo``; Slack ``auth.test`` (and the scopes it says the token has) and, in Socket
Mode, ``apps.connections.open`` (the websocket it offers is never opened); Discord
``users/@me``, ``gateway/bot`` and ``applications/@me`` (for the message-content intent);
the model API's list of models. They are plain HTTP requests against the configured base
URLs, each with a short timeout, so a status code is reported as what it means (a 404 is a
wrong base URL, not a rejected token).

Each configured MCP server is started as ``botd run`` would start it, its tools listed, and
stopped again (``doctor.mcp``).

The state dir is checked without changing it: whether it exists or can be created, whether
it takes files, whether a running botd holds its lock, and whether its database opens, read
only, at a schema this botd understands. Every line goes through the secret masking, and
URLs are named without the token Telegram puts in them.

Exit status: 0 when every check passes, 1 when a probe fails, 2 when the config is invalid.
"""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel

from ..config import BotdConfig
from ..logging import mask_secrets
from . import channels
from .checks import (
    PROBE_TIMEOUT,
    Check,
    Unreachable,
    failed,
    passed,
    reason,
    request,
    unreachable,
)
from .mcp import mcp_checks
from .state import state_dir_checks

__all__ = ["PROBE_TIMEOUT", "Check", "diagnose", "doctor", "print_checks", "state_dir_checks"]

ANTHROPIC_API = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
OPENAI_API = "https://api.openai.com/v1"
MCP_TIMEOUT = 30.0
"""Seconds an MCP server gets to start and list its tools."""

# --------------------------------------------------------------------------- model


async def _model(client: httpx.AsyncClient, config: BotdConfig) -> list[Check]:
    """The model's API probed, then each fallback's."""
    model = config.model
    if model.provider == "scripted":
        checks = [passed("model: scripted (no API)")]
    else:
        checks = [
            await _probe_model(
                client, "model", model.provider, model.model_name, model.api_key, model.base_url
            )
        ]
    for index, fallback in enumerate(model.fallbacks):
        key = f"model.fallbacks[{index}]"
        checks.append(
            await _probe_model(
                client, key, fallback.provider, fallback.name, fallback.api_key, fallback.base_url
            )
        )
    return checks


async def _probe_model(
    client: httpx.AsyncClient,
    key: str,
    provider: str,
    model_name: str,
    api_key: str | None,
    base_url: str | None,
) -> Check:
    """One model API's list of models, asked with its key; ``key`` is where it is configured."""
    if provider == "anthropic":
        base = (base_url or ANTHROPIC_API).rstrip("/")
        url = f"{base}/v1/models"
        headers = {"x-api-key": str(api_key), "anthropic-version": ANTHROPIC_VERSION}
        params: dict[str, str] | None = {"limit": "1"}
    else:
        base = (base_url or OPENAI_API).rstrip("/")
        url = f"{base}/models"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        params = None
    name = f"{key} ({provider}, {model_name})"
    try:
        answer = await request(client, "GET", url, headers=headers, params=params)
    except Unreachable as exc:
        return unreachable(name, base, exc, f"{key}.base_url")
    if answer.status in (401, 403):
        return failed(
            f"{name}: the API key was rejected by {base} ({answer.status})",
            f"check {key}.api_key (and the variable it names)",
        )
    if answer.status == 404:
        hint = " (it usually ends in /v1)" if provider == "openai" else ""
        return failed(f"{name}: {base} answered {url} with 404", f"check {key}.base_url{hint}")
    if answer.status != 200:
        return failed(
            f"{name}: {base} answered {answer.status}",
            "if it is a 5xx or 429 the API is having trouble: try again later",
        )
    note = ""
    listed = answer.field("data")
    if provider == "openai" and isinstance(listed, list) and listed:
        ids = {str(item.get("id")) for item in listed if isinstance(item, dict)}
        if model_name not in ids:
            note = f"; {model_name} is not in its list of models: check {key}.name"
    what = "API key accepted by" if api_key else "models listed by"
    return passed(f"{name}: {what} {base}{note}")


# --------------------------------------------------------------------------- all of it

Probe = Callable[[httpx.AsyncClient, Any], Awaitable[list[Check]]]
PROBES: dict[str, Probe] = {
    "telegram": channels.telegram,
    "slack": channels.slack,
    "discord": channels.discord,
}


async def _guarded(name: str, probe: Awaitable[list[Check]], debug: bool) -> list[Check]:
    """A probe's checks, or one failed line if the probe itself broke (a bug in botd)."""
    try:
        return await probe
    except Exception as exc:
        if debug:
            trace = "".join(traceback.format_exception(exc)).rstrip()
            print(mask_secrets(trace), file=sys.stderr)
        return [
            failed(
                f"{name}: the probe itself failed ({type(exc).__name__}: {reason(exc)})",
                "run botd doctor --debug for the traceback and report it",
            )
        ]


async def diagnose(
    config: BotdConfig, *, timeout: float = PROBE_TIMEOUT, debug: bool = False
) -> list[Check]:
    """Every check of a validated config, channels first (in the file's order)."""
    sections: dict[str, BaseModel] = config.channels.sections()
    limits = httpx.Timeout(timeout)
    async with httpx.AsyncClient(timeout=limits, follow_redirects=False) as client:
        probes: list[Awaitable[list[Check]]] = []
        for name in config.channels.enabled():
            probe = PROBES.get(name)
            if probe is not None:
                probes.append(_guarded(name, probe(client, sections[name]), debug))
            elif name != "console":
                probes.append(_skipped(name))
        probes.append(_guarded("model", _model(client, config), debug))
        # A server's start (a stdio command's imports) may take longer than one request.
        probes.append(_guarded("mcp", mcp_checks(config, max(timeout, MCP_TIMEOUT)), debug))
        found = await asyncio.gather(*probes)
    checks = [check for group in found for check in group]
    if not config.channels.enabled():
        checks.insert(0, failed("no channel enabled", "configure one under channels:"))
    disabled = [n for n in config.channels.sections() if n not in config.channels.enabled()]
    checks.extend(passed(f"{name}: disabled (enabled: false), not probed") for name in disabled)
    checks.extend(state_dir_checks(Path(config.state_dir)))
    return checks


async def _skipped(name: str) -> list[Check]:
    return [passed(f"{name}: no live probe for this channel")]


def _marks(stream: Any) -> tuple[str, str]:
    """``✓``/``✗``, or ``+``/``x`` where the output cannot encode them."""
    try:
        "✓✗".encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        return ("+", "x")
    return ("✓", "✗")


def print_checks(checks: Iterable[Check], stream: Any = None) -> int:
    """Print one line per check (masked) and a summary; the exit status (0 or 1).

    A reader that goes away (``| head``) ends the output quietly; the status stays.
    """
    out = stream or sys.stdout
    marks = _marks(out)
    checks = list(checks)
    bad = sum(1 for check in checks if not check.ok)
    lines = [check.line(marks) for check in checks]
    if bad:
        lines.append(f"{bad} of {len(checks)} checks failed")
    else:
        lines.append(f"all {len(checks)} checks passed")
    try:
        for line in lines:
            print(line, file=out)
        out.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit; point it at /dev/null so that stays quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())
        os.close(devnull)
    return 1 if bad else 0


def doctor(config_path: Path | None, *, timeout: float = PROBE_TIMEOUT, debug: bool = False) -> int:
    """``botd doctor``: the config validated like ``botd check``, then every probe.

    Without a path it checks what ``botd run`` without one would use (the console, Anthropic
    when ``ANTHROPIC_API_KEY`` is set). Prints the config's problems and returns 2 when it is
    invalid; otherwise one line per check on stdout and 0 (all passed) or 1.
    """
    from ..config import ConfigError, default_config, load_config, secret_values
    from ..logging import add_secrets

    try:
        config = load_config(config_path) if config_path else default_config(os.environ)
    except ConfigError as exc:
        print(mask_secrets(str(exc)), file=sys.stderr)
        count = len(exc.problems)
        print(f"config invalid: {count} problem{'' if count == 1 else 's'}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(mask_secrets(f"botd: cannot read {config_path}: {exc}"), file=sys.stderr)
        return 2
    add_secrets(secret_values(config))
    source = config_path or "(built-in default)"
    checks = [passed(f"config {source} OK: {config.summary()}")]
    checks.extend(asyncio.run(diagnose(config, timeout=timeout, debug=debug)))
    return print_checks(checks)
