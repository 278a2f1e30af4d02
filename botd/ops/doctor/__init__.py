"""``botd doctor``: the config checked, then every credential and the state dir probed live.

Each check is one line, ``✓``, ``⚠`` (it works, but most likely not as meant: ``advice``) or
``✗``, saying what was found and, unless ``✓``, what to do; ``--json`` prints one JSON
document instead, each check with its name, status (``ok``, ``warn``, ``fail``) and detail.
The probes are the cheapest read-only requests each service has: each enabled channel's
comes from its platform's spec (``ChannelSpec.probe``: the built-ins' are
``botd.channels.<platform>.probe``, e.g. Telegram's ``getMe``), one probe per channel
instance, its lines named after the instance (``for_instance``); a channel without one is
named as not probed. The model's is the model API's list of models, which also tells
whether it knows the model configured (Anthropic lists dated ids only: an alias is known
when a listed id is it with a date, or when ``GET /v1/models/{name}`` finds it). They are
plain HTTP requests against the configured base URLs, each with a short timeout, so a
status code is reported as what it means (a 404 is a wrong base URL, not a rejected token).
Each goes through the proxy its section names (``proxy:``; unset, the environment's), as
the daemon's own connections do (``ProbeClients``).

Each configured MCP server is started as ``botd run`` would start it, its tools listed, and
stopped again (``doctor.mcp``). A listed tool that needs something of the host (the ``exec``
tool: bubblewrap and user namespaces) is tried (``doctor.tools``). Each ACP agent a chat uses
has its command found and, when it runs on Node.js, Node's version checked; it is not started
(``doctor.acp``).

The state dir is checked without changing it: whether it exists or can be created, whether
it takes files, whether a running botd holds its lock; then the store, as its backend checks it
(``StoreBackend.doctor``): on SQLite whether its database in the state dir opens, read only,
at a schema this botd understands; with ``store.backend: postgres`` the server's instead
(``doctor.database``: reachable, its schema, this node's clock). Every
line goes through the secret masking, and URLs are named without the token Telegram puts in
them.

Exit status: 0 when no check fails, 1 when one fails (or, with ``--strict``, warns), 2 when
the config is invalid.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import os
import re
import sys
import traceback
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel

from ...channels.registry import channel_instances, platform_specs
from ...chat import ChannelId
from ...config import BotdConfig
from ...net.proxy import httpx_options
from ...net.tls import verified_context
from ...store.backends import store_backend
from ..logging import mask_secrets
from .advice import access_checks, config_warnings, health_port_check, provider_check
from .checks import (
    ASCII_MARKS,
    MARKS,
    PROBE_TIMEOUT,
    Check,
    Status,
    Unreachable,
    failed,
    passed,
    reason,
    request,
    unreachable,
    warned,
)
from .state import state_dir_checks
from .tools import tool_checks

__all__ = [
    "PROBE_TIMEOUT",
    "Check",
    "diagnose",
    "doctor",
    "exit_status",
    "print_checks",
    "report_json",
    "state_dir_checks",
    "summary",
]

ANTHROPIC_API = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
ANTHROPIC_MODELS_PAGE = 1000
"""Models asked for in one page of Anthropic's list (its largest page: the whole list)."""
OPENAI_API = "https://api.openai.com/v1"
MCP_TIMEOUT = 30.0
"""Seconds an MCP server gets to start and list its tools."""

# --------------------------------------------------------------------------- model


async def _model(client: httpx.AsyncClient, config: BotdConfig) -> list[Check]:
    """The model's API probed, then each fallback's."""
    model = config.model
    if model.provider == "scripted":
        checks = [passed("model", "model: scripted (no API)")]
    else:
        checks = await _probe_model(
            client, "model", model.provider, model.model_name, model.api_key, model.base_url
        )
    for index, fallback in enumerate(model.fallbacks):
        key = f"model.fallbacks[{index}]"
        checks.extend(
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
) -> list[Check]:
    """One model API's list of models, asked with its key (``key`` is where it is
    configured); and whether the model asked for is one the API knows."""
    if provider == "anthropic":
        base = (base_url or ANTHROPIC_API).rstrip("/")
        url = f"{base}/v1/models"
        headers = {"x-api-key": str(api_key), "anthropic-version": ANTHROPIC_VERSION}
        params: dict[str, str] | None = {"limit": str(ANTHROPIC_MODELS_PAGE)}
    else:
        base = (base_url or OPENAI_API).rstrip("/")
        url = f"{base}/models"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        params = None
    name = f"{key} ({provider}, {model_name})"
    try:
        answer = await request(client, "GET", url, headers=headers, params=params)
    except Unreachable as exc:
        return [unreachable(key, name, base, exc, f"{key}.base_url")]
    if answer.status in (401, 403):
        return [
            failed(
                key,
                f"{name}: the API key was rejected by {base} ({answer.status})",
                f"check {key}.api_key (and the variable it names)",
            )
        ]
    if answer.status == 404:
        hint = " (it usually ends in /v1)" if provider == "openai" else ""
        return [
            failed(key, f"{name}: {base} answered {url} with 404", f"check {key}.base_url{hint}")
        ]
    if answer.status != 200:
        return [
            failed(
                key,
                f"{name}: {base} answered {answer.status}",
                "if it is a 5xx or 429 the API is having trouble: try again later",
            )
        ]
    what = "API key accepted by" if api_key else "models listed by"
    checks = [passed(key, f"{name}: {what} {base}")]
    listed = answer.field("data")
    ids = (
        [str(item.get("id")) for item in listed if isinstance(item, dict)]
        if isinstance(listed, list)
        else []
    )
    known: bool | None = None  # None: cannot tell
    if ids:
        known = model_name in ids
        if not known and provider == "anthropic":
            known = _anthropic_alias(model_name, ids) or await _anthropic_knows(
                client, url, model_name, headers
            )
    if known is False:
        close = difflib.get_close_matches(model_name, ids, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        checks.append(
            warned(
                f"{key}.name",
                f"{name}: {base} does not know the model {model_name}, which is not in its "
                f"list of models{hint}",
                f"check {key}.name",
            )
        )
    return checks


def _anthropic_alias(name: str, ids: list[str]) -> bool:
    """Whether ``name`` is the alias of a listed model (``claude-sonnet-4-5`` for
    ``claude-sonnet-4-5-20250929``): the list shows the dated ids only."""
    return any(re.fullmatch(re.escape(name) + r"-\d{8}", model_id) for model_id in ids)


async def _anthropic_knows(
    client: httpx.AsyncClient, models_url: str, name: str, headers: dict[str, str]
) -> bool | None:
    """Whether Anthropic's API knows model ``name`` by another name than a listed id (an
    alias it resolves): its ``GET /v1/models/{name}``. None when it cannot tell."""
    try:
        answer = await request(client, "GET", f"{models_url}/{name}", headers=headers)
    except Unreachable:
        return None
    if answer.status == 404:
        return False
    return True if answer.status == 200 else None


# --------------------------------------------------------------------------- all of it


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
                name,
                f"{name}: the probe itself failed ({type(exc).__name__}: {reason(exc)})",
                "run botd doctor --debug for the traceback and report it",
            )
        ]


async def diagnose(
    config: BotdConfig,
    *,
    timeout: float = PROBE_TIMEOUT,
    debug: bool = False,
    env: Mapping[str, str] | None = None,
) -> list[Check]:
    """Every check of a validated config, channels first (in the file's order), then the
    model, the MCP servers, the ACP agents, the state dir, the store, and the warnings about
    what works but most likely not as meant (``advice``)."""
    sections: dict[str, BaseModel] = config.channels.sections()
    async with ProbeClients(timeout) as clients:
        probes: list[Awaitable[list[Check]]] = []
        specs = platform_specs(config.channels)
        instances = channel_instances(config.channels)
        for name in config.channels.enabled():
            spec = specs.get(name)
            if spec is not None and spec.probe is not None:
                # Through the proxy the channel's own connections take (``proxy:``).
                client = clients.through(getattr(sections[name], "proxy", None))
                probe = _guarded(name, spec.probe(client, sections[name]), debug)
                probes.append(_for_instance(instances[name], probe))
            else:
                probes.append(_skipped(name))
        model = _model(clients.through(config.model.proxy), config)
        probes.append(_guarded("model", model, debug))
        if config.agent.mcp_servers:
            from .mcp import mcp_checks  # the MCP client and its tools' schemas: only then

            # A server's start (a stdio command's imports) may take longer than one request.
            probes.append(_guarded("mcp", mcp_checks(config, max(timeout, MCP_TIMEOUT)), debug))
        if config.agent.acp_sections():
            from .acp import acp_checks

            probes.append(_guarded("acp", acp_checks(config), debug))
        probes.append(_guarded("tools", tool_checks(config), debug))
        # The store's own checks (its file in the state dir, or its server) are read side
        # by side with the probes and listed after the state dir's.
        probes.append(_guarded("store", store_backend(config.store).doctor(config, timeout), debug))
        *found, store = await asyncio.gather(*probes)
    checks = [check for group in found for check in group]
    if not config.channels.enabled():
        checks.insert(0, failed("channels", "no channel enabled", "configure one under channels:"))
    disabled = [n for n in config.channels.sections() if n not in config.channels.enabled()]
    checks.extend(
        passed(name, f"{name}: disabled (enabled: false), not probed") for name in disabled
    )
    state_dir = Path(config.state_dir)
    checks.extend(state_dir_checks(state_dir))
    checks.extend(store)
    checks.extend(provider_check(config, os.environ if env is None else env))
    checks.extend(await access_checks(config, state_dir))
    checks.extend(health_port_check(config))
    return checks


class ProbeClients:
    """The doctor's HTTP clients, one per proxy the probed sections name (``proxy:``), so
    each probe goes the way the daemon's connections will; closed together."""

    def __init__(self, timeout: float) -> None:
        self._timeout = httpx.Timeout(timeout)
        self._clients: dict[str | None, httpx.AsyncClient] = {}

    def through(self, proxy: str | None) -> httpx.AsyncClient:
        """The client for ``proxy`` (a URL, ``direct``; None: the environment's)."""
        client = self._clients.get(proxy)
        if client is None:
            client = self._clients[proxy] = httpx.AsyncClient(
                timeout=self._timeout,
                follow_redirects=False,
                verify=verified_context(),
                **httpx_options(proxy),
            )
        return client

    async def __aenter__(self) -> ProbeClients:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(client.aclose() for client in clients))


async def _skipped(name: str) -> list[Check]:
    return [passed(name, f"{name}: no live probe for this channel")]


async def _for_instance(channel: ChannelId, probe: Awaitable[list[Check]]) -> list[Check]:
    return [for_instance(channel, check) for check in await probe]


def for_instance(channel: ChannelId, check: Check) -> Check:
    """A platform probe's ``check`` as one of the channel instance ``channel``'s: a probe
    speaks of its platform's own section (``telegram.token``, ``telegram: token accepted``,
    ``check channels.telegram.token``); for a channel of another name those become its own
    (``support.token``, ``support: ...``, ``channels.support.token``). The instance named
    after its platform is left as it is."""
    platform, name = channel.platform, channel.name
    if name == platform:
        return check
    check_name = check.name
    if check_name == platform or check_name.startswith(f"{platform}."):
        check_name = name + check_name[len(platform) :]
    what = check.what
    if what.startswith(f"{platform}:"):
        what = name + what[len(platform) :]
    fix = check.fix.replace(f"channels.{platform}.", f"channels.{name}.")
    return replace(check, name=check_name, what=what, fix=fix)


def _marks(stream: Any) -> dict[Status, str]:
    """``✓``/``⚠``/``✗``, or ``+``/``!``/``x`` where the output cannot encode them."""
    try:
        "".join(MARKS.values()).encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        return ASCII_MARKS
    return MARKS


def summary(checks: list[Check]) -> str:
    """``all 12 checks passed``, or how many failed and how many warned."""
    bad = sum(1 for check in checks if check.status == "fail")
    warnings = sum(1 for check in checks if check.status == "warn")
    noted = f"; {warnings} warning{'' if warnings == 1 else 's'}" if warnings else ""
    if bad:
        return f"{bad} of {len(checks)} checks failed{noted}"
    return f"all {len(checks)} checks passed{noted}"


def exit_status(checks: list[Check], *, strict: bool = False) -> int:
    """1 when a check failed (or, with ``strict``, warned), else 0."""
    statuses = {check.status for check in checks}
    return 1 if "fail" in statuses or (strict and "warn" in statuses) else 0


def print_checks(checks: Iterable[Check], stream: Any = None, *, strict: bool = False) -> int:
    """Print one line per check (masked) and a summary; the exit status (0 or 1).

    A reader that goes away (``| head``) ends the output quietly; the status stays.
    """
    out = stream or sys.stdout
    marks = _marks(out)
    checks = list(checks)
    lines = [check.line(marks) for check in checks]
    lines.append(summary(checks))
    _write(out, "\n".join(lines) + "\n")
    return exit_status(checks, strict=strict)


def report_json(checks: list[Check]) -> str:
    """The report as one JSON document: the worst status and each check's name, status and
    detail (masked)."""
    statuses = {check.status for check in checks}
    outcome = "fail" if "fail" in statuses else "warn" if "warn" in statuses else "ok"
    return json.dumps(
        {
            "status": outcome,
            "checks": [
                {"name": check.name, "status": check.status, "detail": check.detail()}
                for check in checks
            ],
        },
        ensure_ascii=False,
        indent=2,
    )


def _write(out: Any, text: str) -> None:
    try:
        out.write(text)
        out.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit; point it at /dev/null so that stays quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())
        os.close(devnull)


def doctor(
    config_path: Path | None,
    *,
    timeout: float = PROBE_TIMEOUT,
    debug: bool = False,
    strict: bool = False,
    as_json: bool = False,
) -> int:
    """``botd doctor``: the config validated like ``botd check``, then every probe.

    Without a path it checks what ``botd run`` without one would use (the console, Anthropic
    when ``ANTHROPIC_API_KEY`` is set). Prints the config's problems and returns 2 when it is
    invalid; otherwise one line per check on stdout and 0 (none failed) or 1 (one failed, or
    with ``strict`` one warned). ``as_json``: one JSON document on stdout instead, the
    config's problems included.
    """
    from ...config import ConfigError, default_config, load_config_with_warnings, secret_values
    from ..logging import add_secrets

    source = str(config_path) if config_path else "(built-in default)"
    try:
        if config_path:
            loaded = load_config_with_warnings(config_path)
            config, warnings = loaded.config, loaded.warnings
        else:
            config, warnings = default_config(os.environ), []
    except ConfigError as exc:
        if as_json:
            problems = [failed("config", problem.render(source), "") for problem in exc.problems]
            _write(sys.stdout, report_json(problems) + "\n")
            return 2
        print(mask_secrets(str(exc)), file=sys.stderr)
        count = len(exc.problems)
        print(f"config invalid: {count} problem{'' if count == 1 else 's'}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(mask_secrets(f"botd: cannot read {config_path}: {exc}"), file=sys.stderr)
        return 2
    add_secrets(secret_values(config))
    checks = [passed("config", f"config {source} OK: {config.summary()}")]
    checks.extend(config_warnings(warnings, source))
    checks.extend(asyncio.run(diagnose(config, timeout=timeout, debug=debug)))
    if as_json:
        _write(sys.stdout, report_json(checks) + "\n")
        return exit_status(checks, strict=strict)
    return print_checks(checks, strict=strict)
