"""botd's configuration: one YAML file into typed, validated settings.

``load_config`` reads the file with a YAML loader that remembers the line of every mapping
key, expands ``${VAR}`` / ``${VAR:-default}`` in string values from the environment, and
validates the result with pydantic models that reject unknown keys. Every problem found is
reported at once in a ``ConfigError``, each as ``file:line: key.path: message``; values that
came from the environment, and keys that hold secrets, are never echoed.

``BotdConfig``'s helper methods build the runtime objects (loop, subscriber and session
settings, access policies, delivery modes, provider settings) from the validated config.
Cron expressions are read by the scheduler's own parser (``botd.scheduler``), so ``botd check``
accepts exactly what the scheduler runs; ``parse_every`` is shared with it.
"""

from __future__ import annotations

import difflib
import os
import re
import zoneinfo
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped,unused-ignore]
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .agent.loop import LoopConfig
from .delivery import DeliveryMode
from .router import AccessPolicy, DmPolicy, GroupPolicy, GroupRule
from .sessions import CoalesceSettings, QueueMode, ResetPolicy, SessionSettings
from .subscriber.payloads import (
    BlockBreak,
    ChunkingConfig,
    ReasoningMode,
    SubscriberConfig,
)

if TYPE_CHECKING:
    from .scheduler import JobSpec

__all__ = [
    "BotdConfig",
    "ConfigError",
    "ConfigProblem",
    "default_config",
    "load_config",
    "parse_every",
]

DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-5"
DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"

# Keys whose values are never echoed in an error, whatever their source.
_SECRET_KEYS = frozenset(
    {"api_key", "token", "bot_token", "app_token", "signing_secret", "password", "secret"}
)


# --------------------------------------------------------------------------- errors


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One thing wrong with a config file: where (key path and line) and what."""

    path: str
    line: int | None
    message: str


class ConfigError(Exception):
    """Every problem found in a config file; ``str()`` lists them one per line."""

    def __init__(self, problems: list[ConfigProblem], source: str = "<config>") -> None:
        self.problems = problems
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        lines = []
        for problem in self.problems:
            where = self.source if problem.line is None else f"{self.source}:{problem.line}"
            key = f" {problem.path}:" if problem.path else ""
            lines.append(f"{where}:{key} {problem.message}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


# --------------------------------------------------------------------------- cron and intervals

_EVERY = re.compile(r"(\d+)\s*([smhd])")
_EVERY_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_every(text: str) -> timedelta:
    """An interval like ``30s``, ``10m``, ``2h``, ``1d`` or ``1h30m``; ``ValueError`` if not."""
    compact = text.strip().lower()
    parts = _EVERY.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact.replace(" ", ""):
        raise ValueError(f"expected an interval like 10m, 2h, 30s or 1d, got {text!r}")
    delta = timedelta()
    for number, unit in parts:
        delta += timedelta(**{_EVERY_UNITS[unit]: int(number)})
    if delta <= timedelta():
        raise ValueError("the interval must be longer than zero")
    return delta


_CRON_FIELD_NAMES = {
    "minute": "minute",
    "hour": "hour",
    "day": "day-of-month",
    "month": "month",
    "day_of_week": "day-of-week",
}


def _check_cron(expr: str) -> None:
    """Validate ``expr`` as the scheduler will read it, naming the field that is wrong."""
    from .scheduler import cron_trigger, standard_cron_fields

    fields = standard_cron_fields(expr)  # standard cron: Sunday is 0 (and 7)
    for key, value in fields.items():
        try:
            CronTrigger(**{key: value}, timezone="UTC")
        except ValueError as exc:
            detail = str(exc).split(": ", 1)[-1]
            raise ValueError(f"bad {_CRON_FIELD_NAMES[key]} field {value!r}: {detail}") from None
    cron_trigger(expr, "UTC")


def _check_timezone(name: str | None) -> str | None:
    if name is None:
        return None
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r} (an IANA name like Europe/Berlin)") from None
    return name


# --------------------------------------------------------------------------- models


def _as_text(value: Any) -> Any:
    """Ids YAML reads as numbers (Telegram chat ids) are strings to botd."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def _off_on(value: Any) -> Any:
    """YAML 1.1 reads a bare ``off``/``on`` as a boolean; these settings mean the word."""
    if value is False:
        return "off"
    if value is True:
        return "on"
    return value


Id = Annotated[str, BeforeValidator(_as_text)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class ModelSection(_Section):
    provider: Literal["anthropic", "openai", "scripted"] = "scripted"
    name: str | None = None
    api_key: str | None = None
    base_url: str | None = None
    max_tokens: int = Field(default=4096, ge=1)
    thinking: int | None = Field(default=None, ge=1)
    max_retry_wait: float = Field(default=60.0, ge=0)
    script: str | None = None

    @model_validator(mode="after")
    def _provider_needs(self) -> ModelSection:
        if self.provider == "anthropic" and not self.api_key:
            raise ValueError("the anthropic provider needs api_key (e.g. ${ANTHROPIC_API_KEY})")
        if self.provider == "openai" and not self.name:
            raise ValueError("the openai provider needs name (the model to ask for)")
        if self.script is not None and self.provider != "scripted":
            raise ValueError("script is only for the scripted provider")
        return self

    @property
    def model_name(self) -> str:
        if self.name:
            return self.name
        return DEFAULT_ANTHROPIC_MODEL if self.provider == "anthropic" else "scripted"


class ResetSection(_Section):
    mode: Annotated[Literal["off", "idle", "daily"], BeforeValidator(_off_on)] = "off"
    idle_minutes: int = Field(default=0, ge=0)
    daily_hour: int = Field(default=4, ge=0, le=23)

    @model_validator(mode="after")
    def _idle_needs_minutes(self) -> ResetSection:
        if self.mode == "idle" and self.idle_minutes < 1:
            raise ValueError("mode idle needs idle_minutes of at least 1")
        return self


class CoalesceSection(_Section):
    min_chars: int = Field(default=800, ge=1)
    max_chars: int = Field(default=1200, ge=1)
    idle_ms: float = Field(default=1000.0, ge=0)


class BlockStreamingSection(_Section):
    break_: BlockBreak = Field(default="text_end", alias="break")
    min_chars: int = Field(default=800, ge=1)
    max_chars: int = Field(default=1200, ge=1)
    break_preference: Literal["paragraph", "newline", "sentence"] = "paragraph"
    enabled: bool = True
    coalesce: CoalesceSection | None = None

    @model_validator(mode="after")
    def _sizes(self) -> BlockStreamingSection:
        if self.min_chars > self.max_chars:
            raise ValueError(f"min_chars ({self.min_chars}) is above max_chars ({self.max_chars})")
        return self


BuiltinTool = Literal["message", "schedule"]
BUILTIN_TOOLS: tuple[BuiltinTool, ...] = ("message", "schedule")


class AgentSection(_Section):
    system_prompt: str = ""
    tools: list[BuiltinTool] = Field(default_factory=lambda: list(BUILTIN_TOOLS))
    """The built-in tools the agent may use: ``message`` and ``schedule`` (both by default)."""
    queue_mode: QueueMode = "collect"
    max_concurrent_runs: int = Field(default=8, ge=1)
    max_turn_requests: int = Field(default=25, ge=1)
    tool_timeout: float = Field(default=120.0, gt=0)
    record_events: bool = False
    reasoning: Annotated[ReasoningMode, BeforeValidator(_off_on)] = "off"
    enforce_final_tag: bool = False
    reset: ResetSection = Field(default_factory=ResetSection)
    block_streaming: BlockStreamingSection = Field(default_factory=BlockStreamingSection)


class GroupSection(_Section):
    require_mention: bool = True
    allow_from: list[Id] = Field(default_factory=list)
    enabled: bool = True


class _AccessSection(_Section):
    dm_policy: DmPolicy = "pairing"
    allow_from: list[Id] = Field(default_factory=list)
    group_policy: GroupPolicy = "allowlist"
    groups: dict[Id, GroupSection] = Field(default_factory=dict)
    require_mention: bool = True
    delivery: DeliveryMode = "blocks"
    mention_patterns: list[str] = Field(default_factory=list)

    @field_validator("mention_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"bad regular expression {pattern!r}: {exc}") from None
        return patterns

    def access_policy(self) -> AccessPolicy:
        return AccessPolicy(
            dm_policy=self.dm_policy,
            allow_from=frozenset(self.allow_from),
            group_policy=self.group_policy,
            groups={
                chat: GroupRule(
                    require_mention=rule.require_mention,
                    allow_from=frozenset(rule.allow_from),
                    enabled=rule.enabled,
                )
                for chat, rule in self.groups.items()
            },
            require_mention=self.require_mention,
            mention_patterns=tuple(self.mention_patterns),
        )


class TelegramSection(_AccessSection):
    token: str
    api_base_url: str = "https://api.telegram.org"
    poll_timeout: int = Field(default=30, ge=0)


class SlackSection(_AccessSection):
    bot_token: str
    app_token: str | None = None
    signing_secret: str | None = None
    mode: Literal["socket", "http"] = "socket"
    api_base_url: str = "https://slack.com/api/"
    reply_to_mode: Annotated[Literal["off", "first", "all"], BeforeValidator(_off_on)] = "off"
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=3000, ge=1, le=65535)
    http_path: str = "/slack/events"

    @model_validator(mode="after")
    def _mode_needs(self) -> SlackSection:
        if self.mode == "socket" and not self.app_token:
            raise ValueError("Socket Mode needs app_token (the xapp-... app-level token)")
        if self.mode == "http" and not self.signing_secret:
            raise ValueError("mode http needs signing_secret")
        return self


class DiscordSection(_AccessSection):
    token: str
    api_base_url: str | None = None
    gateway_url: str | None = None
    allow_bots: bool = False


class ConsoleSection(_Section):
    enabled: bool = False


class ChannelsSection(_Section):
    telegram: TelegramSection | None = None
    slack: SlackSection | None = None
    discord: DiscordSection | None = None
    console: ConsoleSection = Field(default_factory=ConsoleSection)

    def enabled(self) -> list[str]:
        names = [name for name in ("telegram", "slack", "discord") if getattr(self, name)]
        if self.console.enabled:
            names.append("console")
        return names


class DeliverToSection(_Section):
    channel: Literal["telegram", "slack", "discord", "console"]
    chat: Id
    thread: Id | None = None


class JobSection(_Section):
    id: Id
    cron: str | None = None
    every: str | None = None
    at: datetime | None = None
    timezone: str | None = None
    prompt: str
    conversation: str | None = None
    deliver_to: DeliverToSection

    @field_validator("every")
    @classmethod
    def _every_parses(cls, value: str | None) -> str | None:
        if value is not None:
            parse_every(value)
        return value

    @field_validator("at", mode="before")
    @classmethod
    def _at_parses(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value)
            except ValueError:
                raise ValueError(
                    f"expected an ISO datetime like 2026-05-01T17:00, got {value!r}"
                ) from None
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone_exists(cls, value: str | None) -> str | None:
        return _check_timezone(value)

    @field_validator("cron")
    @classmethod
    def _cron_parses(cls, value: str | None) -> str | None:
        if value is not None:
            _check_cron(value)
        return value

    @model_validator(mode="after")
    def _one_schedule(self) -> JobSection:
        given = [key for key in ("cron", "every", "at") if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of cron, every or at"
                + (f" (got {', '.join(given)})" if given else "")
            )
        return self


class SchedulerSection(_Section):
    timezone: str | None = None
    jobs: list[JobSection] = Field(default_factory=list)

    @field_validator("timezone")
    @classmethod
    def _timezone_exists(cls, value: str | None) -> str | None:
        return _check_timezone(value)


class LoggingSection(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["text", "json"] = "text"

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class HealthSection(_Section):
    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=8480, ge=1, le=65535)


class BotdConfig(_Section):
    """The whole validated config file."""

    state_dir: Path = Path("./var")
    model: ModelSection = Field(default_factory=ModelSection)
    agent: AgentSection = Field(default_factory=AgentSection)
    channels: ChannelsSection = Field(default_factory=ChannelsSection)
    scheduler: SchedulerSection = Field(default_factory=SchedulerSection)
    logging: LoggingSection = Field(default_factory=LoggingSection)
    health: HealthSection = Field(default_factory=HealthSection)

    # ---- runtime objects

    def loop_config(self) -> LoopConfig:
        return LoopConfig(
            model=self.model.model_name,
            system=self.agent.system_prompt,
            max_tokens=self.model.max_tokens,
            thinking_budget=self.model.thinking,
            max_turn_requests=self.agent.max_turn_requests,
            tool_timeout=self.agent.tool_timeout,
        )

    def subscriber_config(self) -> SubscriberConfig:
        streaming = self.agent.block_streaming
        chunking = (
            ChunkingConfig(
                min_chars=streaming.min_chars,
                max_chars=streaming.max_chars,
                break_preference=streaming.break_preference,
            )
            if streaming.enabled
            else None
        )
        return SubscriberConfig(
            block_break=streaming.break_,
            chunking=chunking,
            reasoning=self.agent.reasoning,
            enforce_final_tag=self.agent.enforce_final_tag,
        )

    def session_settings(self, state_dir: Path | None = None) -> SessionSettings:
        """Session settings; ``state_dir`` overrides the configured one (e.g. resolved)."""
        root = self.state_dir if state_dir is None else state_dir
        reset = self.agent.reset
        return SessionSettings(
            loop=self.loop_config(),
            subscriber=self.subscriber_config(),
            queue_mode=self.agent.queue_mode,
            max_concurrent_runs=self.agent.max_concurrent_runs,
            reset=ResetPolicy(
                mode=reset.mode, idle_minutes=reset.idle_minutes, daily_hour=reset.daily_hour
            ),
            record_events_dir=root / "events" if self.agent.record_events else None,
            coalesce=self._coalesce_settings(),
        )

    def _coalesce_settings(self) -> CoalesceSettings | None:
        streaming = self.agent.block_streaming
        section = streaming.coalesce
        if section is None:
            return None
        joiner = {"paragraph": "\n\n", "newline": "\n", "sentence": " "}[streaming.break_preference]
        return CoalesceSettings(section.min_chars, section.max_chars, section.idle_ms, joiner)

    def _access_sections(self) -> dict[str, _AccessSection]:
        sections: dict[str, _AccessSection | None] = {
            "telegram": self.channels.telegram,
            "slack": self.channels.slack,
            "discord": self.channels.discord,
        }
        return {name: section for name, section in sections.items() if section is not None}

    def access_policies(self) -> dict[str, AccessPolicy]:
        """Per configured chat channel; the console belongs to its operator and is open."""
        policies = {name: s.access_policy() for name, s in self._access_sections().items()}
        if self.channels.console.enabled:
            policies["console"] = AccessPolicy(dm_policy="open")
        return policies

    def delivery_modes(self) -> dict[str, DeliveryMode]:
        return {name: s.delivery for name, s in self._access_sections().items()}

    def provider_settings(self) -> dict[str, Any]:
        """Keyword settings for ``create_provider(self.model.provider, **settings)``."""
        model = self.model
        if model.provider == "scripted":
            return {} if model.script is None else {"script": model.script}
        settings: dict[str, Any] = {"max_retry_wait": model.max_retry_wait}
        if model.api_key:
            settings["api_key"] = model.api_key
        if model.provider == "openai":
            settings["base_url"] = model.base_url or DEFAULT_OPENAI_BASE_URL
        elif model.base_url:
            settings["base_url"] = model.base_url
        return settings

    def scheduler_jobs(self) -> list[JobSpec]:
        """The configured jobs as the scheduler's ``JobSpec``s."""
        from .chat import Target
        from .scheduler import JobSpec

        return [
            JobSpec(
                id=job.id,
                prompt=job.prompt,
                target=Target(
                    channel=job.deliver_to.channel,
                    chat_id=job.deliver_to.chat,
                    thread_id=job.deliver_to.thread,
                ),
                cron=job.cron,
                every=None if job.every is None else parse_every(job.every).total_seconds(),
                at=job.at,
                timezone=job.timezone,
                conversation_key=job.conversation,
            )
            for job in self.scheduler.jobs
        ]

    def summary(self) -> str:
        channels = ", ".join(self.channels.enabled()) or "none"
        jobs = len(self.scheduler.jobs)
        return (
            f"channels: {channels}; provider: {self.model.provider} ({self.model.model_name}); "
            f"{jobs} scheduled job{'' if jobs == 1 else 's'}"
        )


# --------------------------------------------------------------------------- YAML with lines


class _LineDict(dict[Any, Any]):
    """A YAML mapping that knows its own line and the line of each of its keys."""

    line: int
    key_lines: dict[Any, int]


class _LineLoader(yaml.SafeLoader):
    """A SafeLoader whose mappings are ``_LineDict``s (1-based lines)."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> Iterator[_LineDict]:
    data = _LineDict()
    data.line = node.start_mark.line + 1
    data.key_lines = {}
    yield data
    data.update(loader.construct_mapping(node))  # flattens merge keys into node.value
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if isinstance(key, str | int | float | bool) or key is None:
            data.key_lines.setdefault(key, key_node.start_mark.line + 1)


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


def _line_of(root: Any, loc: tuple[str | int, ...]) -> int | None:
    """The line of the deepest key along ``loc`` that the file has."""
    line = root.line if isinstance(root, _LineDict) else None
    node = root
    for part in loc:
        if isinstance(node, _LineDict):
            key: Any = part
            if key not in node and isinstance(part, str):
                # Ids YAML read as numbers were turned into strings by validation.
                key = next((k for k in node if str(k) == part), part)
            if key not in node:
                break
            line = node.key_lines.get(key, line)
            node = node[key]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
            if isinstance(node, _LineDict):
                line = node.line
        else:
            break
    return line


def _format_path(loc: tuple[str | int, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


# --------------------------------------------------------------------------- interpolation

_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _interpolate(
    node: Any,
    env: Mapping[str, str],
    loc: tuple[str | int, ...],
    root: Any,
    problems: list[ConfigProblem],
    sourced: dict[tuple[str | int, ...], list[str]],
) -> Any:
    """``node`` with every ``${VAR}`` in its strings replaced; mappings edited in place."""
    if isinstance(node, dict):
        for key in list(node):
            node[key] = _interpolate(node[key], env, (*loc, key), root, problems, sourced)
        return node
    if isinstance(node, list):
        for index, item in enumerate(node):
            node[index] = _interpolate(item, env, (*loc, index), root, problems, sourced)
        return node
    if not isinstance(node, str) or "$" not in node:
        return node

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, default = match.group(1), match.group(2)
        sourced.setdefault(loc, []).append(name)
        if name in env:
            return env[name]
        if default is not None:
            return default
        problems.append(
            ConfigProblem(
                _format_path(loc),
                _line_of(root, loc),
                f"environment variable {name} is not set (set it, or write ${{{name}:-default}})",
            )
        )
        # A stand-in, so the missing variable is not reported again as a missing value.
        return f"<{name} unset>"

    return _VARIABLE.sub(replace, node)


# --------------------------------------------------------------------------- pydantic errors


def _unwrap_model(annotation: Any) -> Any:
    """The model type inside ``X | None``, ``list[X]`` or ``dict[str, X]`` (else None)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = get_origin(annotation)
    if origin is Annotated:
        return _unwrap_model(get_args(annotation)[0])
    if origin in (Union, list, dict) or str(origin) == "<class 'types.UnionType'>":
        for arg in reversed(get_args(annotation)):
            found = _unwrap_model(arg)
            if found is not None:
                return found
    return None


def _known_keys(loc: tuple[str | int, ...]) -> list[str]:
    """The keys allowed in the mapping at ``loc`` (a path into ``BotdConfig``)."""
    model: Any = BotdConfig
    for part in loc:
        if not isinstance(part, str) or model is None:
            continue  # list indexes and dict keys (group ids) do not change the model
        field = model.model_fields.get(part) or next(
            (f for f in model.model_fields.values() if f.alias == part), None
        )
        if field is None:
            continue  # a dict key such as a group id
        model = _unwrap_model(field.annotation)
    if model is None:
        return []
    return [f.alias or name for name, f in model.model_fields.items()]


_EXPECTED = {
    "int_parsing": "a whole number",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "float_parsing": "a number",
    "float_type": "a number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "text",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "datetime_parsing": "an ISO datetime like 2026-05-01T17:00",
    "datetime_type": "an ISO datetime like 2026-05-01T17:00",
    "datetime_from_date_parsing": "an ISO datetime like 2026-05-01T17:00",
    "path_type": "a file path",
}


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    return repr(value) if isinstance(value, str) else str(value)


def _message(error: Any, shown: bool, variables: list[str] | None) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    if variables:
        got = f"got the value of ${{{variables[0]}}}"
    elif shown:
        got = f"got {_describe(value)}"
    else:
        got = "got a value that is not shown"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, {got}"
    if kind == "literal_error":
        return f"expected {ctx.get('expected', 'one of the allowed values')}, {got}"
    if kind == "missing":
        return "required key is missing"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        words = {
            "greater_than_equal": "at least",
            "greater_than": "more than",
            "less_than_equal": "at most",
            "less_than": "less than",
        }[kind]
        limit = next(iter(ctx.values()), "?")
        return f"must be {words} {limit}, {got}"
    if kind == "value_error":
        text = str(ctx.get("error", error["msg"]))
        if variables and isinstance(value, str) and value:
            # The validator quoted what it got; that came from the environment.
            text = text.replace(repr(value), f"${{{variables[0]}}}").replace(value, "...")
        return text
    message = str(error["msg"])
    return message[:1].lower() + message[1:]


def _problems_from(
    exc: ValidationError,
    root: Any,
    sourced: dict[tuple[str | int, ...], list[str]],
) -> list[ConfigProblem]:
    problems = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        # Drop pydantic's function-validator markers from the path.
        loc = tuple(p for p in loc if not (isinstance(p, str) and p.startswith("function-")))
        path = _format_path(loc)
        line = _line_of(root, loc)
        if error["type"] == "extra_forbidden" and loc:
            key = str(loc[-1])
            known = _known_keys(loc[:-1])
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"
            problems.append(ConfigProblem(path, line, f"unknown key {key!r}{hint}"))
            continue
        last = loc[-1] if loc else ""
        shown = not (isinstance(last, str) and last in _SECRET_KEYS)
        problems.append(ConfigProblem(path, line, _message(error, shown, sourced.get(loc))))
    return problems


def _cross_checks(config: BotdConfig, root: Any) -> list[ConfigProblem]:
    """Rules that span sections: delivery targets exist, job ids are unique."""
    problems = []
    configured = set(config.channels.enabled())
    seen: set[str] = set()
    for index, job in enumerate(config.scheduler.jobs):
        loc: tuple[str | int, ...] = ("scheduler", "jobs", index)
        if job.id in seen:
            problems.append(
                ConfigProblem(
                    _format_path((*loc, "id")),
                    _line_of(root, (*loc, "id")),
                    f"job id {job.id!r} is used twice",
                )
            )
        seen.add(job.id)
        if job.deliver_to.channel not in configured:
            where = (*loc, "deliver_to", "channel")
            problems.append(
                ConfigProblem(
                    _format_path(where),
                    _line_of(root, where),
                    f"channel {job.deliver_to.channel!r} is not configured",
                )
            )
    return problems


# --------------------------------------------------------------------------- loading


def parse_config(
    text: str, env: Mapping[str, str] | None = None, source: str = "<config>"
) -> BotdConfig:
    """Validate config ``text``; raises ``ConfigError`` listing every problem."""
    environ = os.environ if env is None else env
    try:
        root = yaml.load(text, Loader=_LineLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        # Only the parser's words: its snippet of the file could show a secret.
        words = "; ".join(p for p in (exc.context, exc.problem) if p) or "not valid YAML"
        raise ConfigError(
            [ConfigProblem("", mark.line + 1 if mark else None, f"not valid YAML: {words}")],
            source,
        ) from None
    except yaml.YAMLError:
        raise ConfigError([ConfigProblem("", None, "not valid YAML")], source) from None
    if root is None:
        root = _LineDict()
        root.line, root.key_lines = 1, {}
    if not isinstance(root, dict):
        raise ConfigError([ConfigProblem("", 1, "the file must be a mapping of keys")], source)

    problems: list[ConfigProblem] = []
    sourced: dict[tuple[str | int, ...], list[str]] = {}
    _interpolate(root, environ, (), root, problems, sourced)
    unset = {p.path for p in problems}
    try:
        config = BotdConfig.model_validate(root)
    except ValidationError as exc:
        problems.extend(p for p in _problems_from(exc, root, sourced) if p.path not in unset)
        config = None
    if config is not None:
        problems.extend(_cross_checks(config, root))
    if problems or config is None:
        problems.sort(key=lambda p: (p.line or 0, p.path))
        raise ConfigError(problems, source)
    return config


def load_config(path: Path, env: Mapping[str, str] | None = None) -> BotdConfig:
    """Read and validate the config file at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            [ConfigProblem("", None, f"cannot read: {exc.strerror}")], str(path)
        ) from None
    except UnicodeDecodeError:
        raise ConfigError([ConfigProblem("", None, "not UTF-8 text")], str(path)) from None
    return parse_config(text, env, str(path))


def default_config(env: Mapping[str, str] | None = None) -> BotdConfig:
    """The embedded default: the console channel, Anthropic when ``ANTHROPIC_API_KEY`` is set
    (else the scripted provider), state in ``./var``."""
    environ = os.environ if env is None else env
    api_key = environ.get("ANTHROPIC_API_KEY")
    model = (
        ModelSection(provider="anthropic", api_key=api_key)
        if api_key
        else ModelSection(provider="scripted")
    )
    return BotdConfig(model=model, channels=ChannelsSection(console=ConsoleSection(enabled=True)))
