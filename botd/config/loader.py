"""Reading a config file: YAML with lines, ``${VAR}``s filled, the models applied, every
problem reported at once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .channels import ChannelEntry, registered_channels
from .notices import literal_secrets, placeholder_ids
from .paths import configured_path, outbound_dir_problem
from .problems import ConfigError, ConfigProblem, Loc, format_path, translate, unwrap_model
from .schema import CHANNELS_CONTEXT, CONFIGURED_CONTEXT, BotdConfig, ChannelsSection
from .secrets import blank_secrets
from .skills import override_problems, read_skills
from .source import duplicate_keys, interpolate, line_of, read_yaml
from .tools import ToolEntry, registered_tools

__all__ = [
    "LoadedConfig",
    "default_config",
    "known_keys",
    "load_config",
    "load_config_with_warnings",
    "parse_config",
    "platforms_written",
]


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """A valid config and what ``botd check`` warns about in it (``notices``)."""

    config: BotdConfig
    warnings: list[ConfigProblem]
    """Placeholder ids, and literal secrets in a file others may read, by line."""


def known_keys(
    loc: Loc, channels: Mapping[str, ChannelEntry], platforms: Mapping[str, str] | None = None
) -> list[str]:
    """The keys allowed in the mapping at ``loc`` (a path into ``BotdConfig``); ``platforms``:
    the platform of each channel section as the file names it (``platforms_written``)."""
    model: Any = BotdConfig
    for part in loc:
        if not isinstance(part, str) or model is None:
            continue  # list indexes and dict keys (group ids) do not change the model
        if model is ChannelsSection:
            entry = channels.get((platforms or {}).get(part, part))
            model = None if entry is None else entry.section
            continue
        field = model.model_fields.get(part) or next(
            (f for f in model.model_fields.values() if f.alias == part), None
        )
        if field is None:
            continue  # a dict key such as a group id
        model = unwrap_model(field.annotation)
    if model is ChannelsSection:
        return sorted(channels)
    if model is None or not issubclass(model, BaseModel):
        return []
    return [f.alias or name for name, f in model.model_fields.items()]


def _mapping(value: Any) -> Mapping[Any, Any]:
    return value if isinstance(value, Mapping) else {}


def _enabled_channels(root: Any) -> list[str]:
    """The channels the file configures and does not switch off (read before validation)."""
    sections = _mapping(_mapping(root).get("channels"))
    return [
        str(name)
        for name, section in sections.items()
        if section is not None and _mapping(section).get("enabled", True) is not False
    ]


def platforms_written(root: Any) -> dict[str, str]:
    """Each channel section's platform as the file says it (read before validation): the one
    its ``platform`` key names, else its own name (the schema refuses what does not fit)."""
    sections = _mapping(_mapping(root).get("channels"))
    found = {}
    for name, section in sections.items():
        said = _mapping(section).get("platform")
        found[str(name)] = said if isinstance(said, str) else str(name)
    return found


def _channel_named(value: Any) -> str | None:
    """The channel of a target as written: a mapping's ``channel``, or ``channel/chat``."""
    if isinstance(value, Mapping):
        channel = value.get("channel")
        return channel if isinstance(channel, str) else None
    if isinstance(value, str) and "/" in value:
        return value.split("/", 1)[0].strip()
    return None


_MCP_PREFIX = "mcp__"


def _approval_tool_problem(
    name: Any, servers: Mapping[str, Any], tools: Mapping[str, ToolEntry]
) -> str | None:
    """Why ``agent.approvals.tools`` cannot mean ``name`` (None: it can). Refused rather
    than warned about: a misspelt name would leave the tool it meant running unasked."""
    if not isinstance(name, str):
        return None  # the schema says what is wrong with it
    if name in tools:
        return None
    if name.startswith(_MCP_PREFIX):
        server, separator, tool = name[len(_MCP_PREFIX) :].partition("__")
        if separator and tool and server in servers:
            return None
        if separator and tool:
            known = ", ".join(sorted(servers)) or "none is configured"
            return f"tool {name!r}: no MCP server {server!r} under agent.mcp_servers ({known})"
    builtins = ", ".join(sorted(tools))
    return (
        f"unknown tool {name!r}: name a built-in tool ({builtins}) or an MCP tool as "
        "mcp__<server>__<tool> (mcp__<server>__* for all of a server's)"
    )


def _cross_checks(
    root: Any, channels: Mapping[str, ChannelEntry], *, allow_empty: bool
) -> list[ConfigProblem]:
    """Rules that span sections: channels and tools can run, delivery targets exist, job ids
    are unique.

    They read the file as written, not the validated config, so they are reported together
    with every other problem even when some section does not validate; a value of the wrong
    shape is left to the models to report.
    """
    problems = []
    configured = _enabled_channels(root)
    platforms = platforms_written(root)

    def add(where: Loc, message: str) -> None:
        problems.append(ConfigProblem(format_path(where), line_of(root, where), message))

    for name in configured:
        entry = channels.get(platforms.get(name, name))
        missing = entry.missing() if entry is not None else None
        if missing is not None:
            add(("channels", name), missing)
    if not configured and not allow_empty:
        where: Loc = ("channels",) if "channels" in _mapping(root) else ()
        add(
            where,
            "no channel is enabled, so nothing would answer: configure one under channels "
            "(or pass --allow-empty)",
        )
    agent = _mapping(_mapping(root).get("agent"))
    tools = registered_tools()
    listed = agent.get("tools")
    for index, name in enumerate(listed if isinstance(listed, list) else []):
        tool = tools.get(name) if isinstance(name, str) else None
        missing = tool.missing() if tool is not None else None
        if missing is not None:
            add(("agent", "tools", index), missing)
    approvals = _mapping(agent.get("approvals")).get("tools")
    servers = _mapping(agent.get("mcp_servers"))
    for index, name in enumerate(approvals if isinstance(approvals, list) else []):
        problem = _approval_tool_problem(name, servers, tools)
        if problem is not None:
            add(("agent", "approvals", "tools", index), problem)
    targets = agent.get("message_targets")
    for index, target in enumerate(targets if isinstance(targets, list) else []):
        channel = _channel_named(target)
        if (channel in channels or channel in platforms) and channel not in configured:
            add(
                ("agent", "message_targets", index, "channel"),
                f"channel {channel!r} is not configured",
            )
    jobs = _mapping(_mapping(root).get("scheduler")).get("jobs")
    seen: dict[str, int | None] = {}
    for index, job in enumerate(jobs if isinstance(jobs, list) else []):
        if not isinstance(job, Mapping):
            continue
        loc: Loc = ("scheduler", "jobs", index)
        job_id = job.get("id")
        if isinstance(job_id, str | int) and not isinstance(job_id, bool):
            text = str(job_id)
            if text in seen:
                first = seen[text]
                also = f" (first on line {first})" if first is not None else ""
                add((*loc, "id"), f"job id {text!r} is used twice{also}")
            else:
                seen[text] = line_of(root, (*loc, "id"))
        channel = _channel_named(job.get("deliver_to"))
        if (channel in channels or channel in platforms) and channel not in configured:
            add((*loc, "deliver_to", "channel"), f"channel {channel!r} is not configured")
    return problems


def parse_config(
    text: str,
    env: Mapping[str, str] | None = None,
    source: str = "<config>",
    *,
    channels: Mapping[str, ChannelEntry] | None = None,
    allow_empty: bool = True,
    unset_ok: bool = False,
    config_file: Path | None = None,
) -> BotdConfig:
    """Validate config ``text``; raises ``ConfigError`` listing every problem.

    ``channels`` are the channels the file may configure (default: the registered ones).
    ``config_file`` is where ``text`` was read from: relative paths in it (``state_dir``,
    ``media.outbound_dir``, ``agent.workspace.root``) are taken from its directory (without
    it, from the working directory), and ``media.outbound_dir`` must not hold it.
    ``allow_empty=False`` makes a file that enables no channel a problem. ``unset_ok`` is for
    reading the file without the daemon's environment (``botd pairing``): a variable that is
    not set is no problem outside ``state_dir``, and its value is a stand-in, so the config
    returned must not be run.
    """
    return _parse(
        text,
        env,
        source,
        channels=channels,
        allow_empty=allow_empty,
        unset_ok=unset_ok,
        config_file=config_file,
        mode=None,
    ).config


def _parse(
    text: str,
    env: Mapping[str, str] | None,
    source: str,
    *,
    channels: Mapping[str, ChannelEntry] | None,
    allow_empty: bool,
    unset_ok: bool,
    config_file: Path | None,
    mode: int | None,
) -> LoadedConfig:
    """``parse_config``, with the warnings; ``mode`` is the file's (None: not a file)."""
    environ = os.environ if env is None else env
    registered = registered_channels() if channels is None else channels
    root = read_yaml(text, source)
    problems = duplicate_keys(root)
    unset, sourced = interpolate(root, environ)
    if unset_ok:
        unset = [p for p in unset if p.path == "state_dir"]
    problems.extend(unset)
    unset_paths = {p.path for p in unset}
    config: BotdConfig | None
    platforms = platforms_written(root)
    context = {CHANNELS_CONTEXT: registered, CONFIGURED_CONTEXT: frozenset(platforms)}
    try:
        config = BotdConfig.model_validate(root, context=context)
    except ValidationError as exc:
        found = translate(
            exc,
            line_of=lambda loc: line_of(root, loc),
            known_keys=lambda loc: known_keys(loc, registered, platforms),
            sourced=sourced,
            noun=lambda loc: "channel" if loc == ("channels",) else "key",
        )
        problems.extend(p for p in found if p.path not in unset_paths)
        config = None
    if config is not None and config_file is not None:
        config = _paths_from(config, config_file)
    if config is not None and not unset_ok:
        for loc in blank_secrets(config):
            problems.append(
                ConfigProblem(
                    format_path(loc),
                    line_of(root, loc),
                    "is blank: a secret needs a value (is its variable set and not empty?)",
                )
            )
    if config is not None and config.media.outbound_dir is not None:
        exposed = outbound_dir_problem(
            config.media.outbound_dir, state_dir=config.state_dir, config_file=config_file
        )
        if exposed is not None:
            key: Loc = ("media", "outbound_dir")
            problems.append(ConfigProblem(format_path(key), line_of(root, key), exposed))
    if config is not None:
        problems.extend(_skill_problems(root, config))
    problems.extend(_cross_checks(root, registered, allow_empty=allow_empty))
    if problems or config is None:
        problems.sort(key=lambda p: (p.line or 0, p.path))
        raise ConfigError(problems, source)
    warnings = placeholder_ids(root)
    if mode is not None:
        warnings.extend(literal_secrets(root, config, sourced, mode=mode, file_name=source))
    warnings.sort(key=lambda p: (p.line or 0, p.path))
    return LoadedConfig(config, warnings)


def _skill_problems(root: Any, config: BotdConfig) -> list[ConfigProblem]:
    """What is wrong with the skills of ``agent.skills_dir`` (each under that key, naming its
    file and line) and with the ``skills`` lists naming them (each under its own key)."""
    problems: list[ConfigProblem] = []
    known = None
    if config.agent.skills_dir is not None:
        found = read_skills(config.agent.skills_dir)
        key: Loc = ("agent", "skills_dir")
        problems += [
            ConfigProblem(format_path(key), line_of(root, key), problem.render())
            for problem in found.problems
        ]
        known = found.skills
    for loc, why in override_problems(config, known):
        problems.append(ConfigProblem(format_path(loc), line_of(root, loc), why))
    return problems


def _paths_from(config: BotdConfig, config_file: Path) -> BotdConfig:
    """``config`` with its relative paths taken from ``config_file``'s directory."""
    update: dict[str, Any] = {"state_dir": configured_path(config.state_dir, config_file)}
    skills = config.agent.skills_dir
    if skills is not None:
        update["agent"] = config.agent.model_copy(
            update={"skills_dir": configured_path(skills, config_file)}
        )
    outbound = config.media.outbound_dir
    if outbound is not None:
        update["media"] = config.media.model_copy(
            update={"outbound_dir": configured_path(outbound, config_file)}
        )
    workspace = config.agent.workspace
    if workspace.root is not None:
        root = configured_path(workspace.root, config_file)
        update["agent"] = config.agent.model_copy(
            update={"workspace": workspace.model_copy(update={"root": root})}
        )
    return config.model_copy(update=update)


def load_config(
    path: Path,
    env: Mapping[str, str] | None = None,
    *,
    channels: Mapping[str, ChannelEntry] | None = None,
    allow_empty: bool = True,
    unset_ok: bool = False,
) -> BotdConfig:
    """Read and validate the config file at ``path`` (the options as for ``parse_config``)."""
    return load_config_with_warnings(
        path, env, channels=channels, allow_empty=allow_empty, unset_ok=unset_ok
    ).config


def load_config_with_warnings(
    path: Path,
    env: Mapping[str, str] | None = None,
    *,
    channels: Mapping[str, ChannelEntry] | None = None,
    allow_empty: bool = True,
    unset_ok: bool = False,
) -> LoadedConfig:
    """``load_config``, with what ``botd check`` warns about in the file (``notices``)."""
    try:
        with path.open("rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            text = handle.read().decode("utf-8")
    except OSError as exc:
        raise ConfigError(
            [ConfigProblem("", None, f"cannot read: {exc.strerror}")], str(path)
        ) from None
    except UnicodeDecodeError:
        raise ConfigError([ConfigProblem("", None, "not UTF-8 text")], str(path)) from None
    return _parse(
        text,
        env,
        str(path),
        channels=channels,
        allow_empty=allow_empty,
        unset_ok=unset_ok,
        config_file=path,
        mode=mode,
    )


def default_config(
    env: Mapping[str, str] | None = None,
    *,
    channels: Mapping[str, ChannelEntry] | None = None,
    channel: str = "console",
) -> BotdConfig:
    """The embedded default: the console channel, Anthropic when ``ANTHROPIC_API_KEY`` is set
    (else the scripted provider), state in ``./var``, no health endpoint (a chat on a
    terminal has no one to probe it, and two of them would contend for its port).
    ``channel``: the one channel enabled instead of the console (``botd acp``'s)."""
    environ = os.environ if env is None else env
    api_key = environ.get("ANTHROPIC_API_KEY")
    model = {"provider": "anthropic", "api_key": api_key} if api_key else {"provider": "scripted"}
    registered = registered_channels() if channels is None else channels
    return BotdConfig.model_validate(
        {"model": model, "channels": {channel: {"enabled": True}}, "health": {"enabled": False}},
        context={CHANNELS_CONTEXT: registered},
    )
