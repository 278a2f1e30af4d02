"""Reading a config file: YAML with lines, ``${VAR}``s filled, the models applied, every
problem reported at once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .channels import ChannelEntry, registered_channels
from .problems import ConfigError, ConfigProblem, Loc, format_path, translate, unwrap_model
from .schema import CHANNELS_CONTEXT, BotdConfig, ChannelsSection
from .source import interpolate, line_of, read_yaml

__all__ = ["default_config", "known_keys", "load_config", "parse_config"]


def known_keys(loc: Loc, channels: Mapping[str, ChannelEntry]) -> list[str]:
    """The keys allowed in the mapping at ``loc`` (a path into ``BotdConfig``)."""
    model: Any = BotdConfig
    for part in loc:
        if not isinstance(part, str) or model is None:
            continue  # list indexes and dict keys (group ids) do not change the model
        if model is ChannelsSection:
            entry = channels.get(part)
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


def _cross_checks(
    config: BotdConfig, root: Any, channels: Mapping[str, ChannelEntry]
) -> list[ConfigProblem]:
    """Rules that span sections: channels can run, delivery targets exist, job ids are unique."""
    problems = []
    configured = config.channels.enabled()
    for name in configured:
        entry = channels.get(name)
        missing = entry.missing() if entry is not None else None
        if missing is not None:
            where: Loc = ("channels", name)
            problems.append(ConfigProblem(format_path(where), line_of(root, where), missing))
    for index, target in enumerate(config.agent.message_targets):
        if target.channel not in configured:
            where = ("agent", "message_targets", index, "channel")
            problems.append(
                ConfigProblem(
                    format_path(where),
                    line_of(root, where),
                    f"channel {target.channel!r} is not configured",
                )
            )
    seen: set[str] = set()
    for index, job in enumerate(config.scheduler.jobs):
        loc: Loc = ("scheduler", "jobs", index)
        if job.id in seen:
            problems.append(
                ConfigProblem(
                    format_path((*loc, "id")),
                    line_of(root, (*loc, "id")),
                    f"job id {job.id!r} is used twice",
                )
            )
        seen.add(job.id)
        if job.deliver_to.channel not in configured:
            where = (*loc, "deliver_to", "channel")
            problems.append(
                ConfigProblem(
                    format_path(where),
                    line_of(root, where),
                    f"channel {job.deliver_to.channel!r} is not configured",
                )
            )
    return problems


def parse_config(
    text: str,
    env: Mapping[str, str] | None = None,
    source: str = "<config>",
    *,
    channels: Mapping[str, ChannelEntry] | None = None,
) -> BotdConfig:
    """Validate config ``text``; raises ``ConfigError`` listing every problem.

    ``channels`` are the channels the file may configure (default: the registered ones).
    """
    environ = os.environ if env is None else env
    registered = registered_channels() if channels is None else channels
    root = read_yaml(text, source)
    problems, sourced = interpolate(root, environ)
    unset = {p.path for p in problems}
    config: BotdConfig | None
    try:
        config = BotdConfig.model_validate(root, context={CHANNELS_CONTEXT: registered})
    except ValidationError as exc:
        found = translate(
            exc,
            line_of=lambda loc: line_of(root, loc),
            known_keys=lambda loc: known_keys(loc, registered),
            sourced=sourced,
            noun=lambda loc: "channel" if loc == ("channels",) else "key",
        )
        problems.extend(p for p in found if p.path not in unset)
        config = None
    if config is not None:
        problems.extend(_cross_checks(config, root, registered))
    if problems or config is None:
        problems.sort(key=lambda p: (p.line or 0, p.path))
        raise ConfigError(problems, source)
    return config


def load_config(
    path: Path,
    env: Mapping[str, str] | None = None,
    *,
    channels: Mapping[str, ChannelEntry] | None = None,
) -> BotdConfig:
    """Read and validate the config file at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            [ConfigProblem("", None, f"cannot read: {exc.strerror}")], str(path)
        ) from None
    except UnicodeDecodeError:
        raise ConfigError([ConfigProblem("", None, "not UTF-8 text")], str(path)) from None
    return parse_config(text, env, str(path), channels=channels)


def default_config(
    env: Mapping[str, str] | None = None,
    *,
    channels: Mapping[str, ChannelEntry] | None = None,
) -> BotdConfig:
    """The embedded default: the console channel, Anthropic when ``ANTHROPIC_API_KEY`` is set
    (else the scripted provider), state in ``./var``."""
    environ = os.environ if env is None else env
    api_key = environ.get("ANTHROPIC_API_KEY")
    model = {"provider": "anthropic", "api_key": api_key} if api_key else {"provider": "scripted"}
    registered = registered_channels() if channels is None else channels
    return BotdConfig.model_validate(
        {"model": model, "channels": {"console": {"enabled": True}}},
        context={CHANNELS_CONTEXT: registered},
    )
