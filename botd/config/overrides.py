"""Which settings apply in one chat: the layers of the config, resolved by one function.

A chat's settings may be set at four layers; the innermost one that sets a key wins:

    topic    channels.<name>.groups.<id>.topics.<thread id>   (Telegram forum topics)
    group    channels.<name>.groups.<id>, else groups."*"
    channel  channels.<name>                                   (one bot account)
    agent    agent: (and model.name, the primary model)

A group listed by its id takes nothing from ``"*"``: ``"*"`` is the rule of the groups not
listed, as access has always read it. A direct chat has no group and no topic layer.

Not every key is at every layer (the channel's ``allow_from`` is its direct chats'
allowlist, another thing than a group's):

    key                  topic  group  channel  beneath all
    system_prompt        yes    yes    yes      agent.system_prompt
    model                yes    yes    yes      model.name (the primary)
    queue_mode           yes    yes    yes      agent.queue_mode
    backend              yes    yes    yes      agent.backend
    require_mention      yes    yes    yes      (the channel always sets one)
    allow_from           yes    yes    no       everyone
    enabled              yes    yes    no       true
    tools                yes    yes    no       every tool the agent has
    skills               yes    yes    yes      every skill of agent.skills_dir

System prompts compose: each layer's ``system_prompt`` comes after the one beneath it (a
blank line apart) unless its ``system_prompt_mode`` is ``replace``. The result is given to
the model with each turn, never written into the transcript.

``resolve`` is the one place this order is written: the access policies (``botd.wiring``),
the tools and the backend a run gets, the system prompt, the model and the queue mode of a
turn and ``/status`` all read it. Each value comes with where it came from
(``Setting.source``), which ``/status`` names. Pure data: nothing here reads a message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Literal, TypeVar, cast

from pydantic import BaseModel

from .schema import BotdConfig, ChatChannelSection, QueueMode, TurnOverrides

__all__ = ["Defaults", "Effective", "PromptPart", "Setting", "SystemPrompt", "resolve"]

T = TypeVar("T")

AGENT = "agent"
"""The source of a value no channel, group or topic sets."""


@dataclass(frozen=True, slots=True)
class Setting(Generic[T]):
    """An effective value and the layer it came from (``agent``, ``channel telegram``,
    ``group -1001``, ``group "*"``, ``topic 7``)."""

    value: T
    source: str

    @property
    def whose(self) -> str:
        """``agent's``, ``group -1001's``: the source as ``/status`` names it."""
        return f"{self.source}'s"


@dataclass(frozen=True, slots=True)
class PromptPart:
    """One layer's share of the system prompt."""

    source: str
    mode: Literal["base", "append", "replace"]
    text: str


@dataclass(frozen=True, slots=True)
class SystemPrompt:
    """The system prompt of a chat and the layers it is made of, beneath first."""

    parts: tuple[PromptPart, ...]

    @property
    def text(self) -> str:
        return "\n\n".join(part.text for part in self.parts if part.text)

    def describe(self) -> str:
        """``agent's``, ``agent's, then group -1001's (appended)``, ``topic 7's
        (replacing)``, or ``none``."""
        shown = [part for part in self.parts if part.text]
        if not shown:
            return "none"
        said = {"base": "", "append": " (appended)", "replace": " (replacing)"}
        return ", then ".join(f"{part.source}'s{said[part.mode]}" for part in shown)


@dataclass(frozen=True, slots=True)
class Defaults:
    """The values beneath every channel: ``agent``'s and the primary model."""

    system_prompt: str = ""
    model: str = "scripted"
    queue_mode: QueueMode = "collect"
    backend: str = "model"

    @classmethod
    def of(cls, config: BotdConfig) -> Defaults:
        agent = config.agent
        return cls(agent.system_prompt, config.model.model_name, agent.queue_mode, agent.backend)


@dataclass(frozen=True, slots=True)
class Effective:
    """Every setting a chat resolves to, each with where it came from."""

    system_prompt: SystemPrompt
    model: Setting[str]
    queue_mode: Setting[QueueMode]
    backend: Setting[str]
    require_mention: Setting[bool]
    allow_from: Setting[frozenset[str]]
    """Who may address the bot in the group (empty: everyone)."""
    enabled: Setting[bool]
    tools: Setting[tuple[str, ...] | None]
    """The tools offered (names or ``*`` prefixes; None: every tool the agent has)."""
    skills: Setting[tuple[str, ...] | None]
    """The skills offered, by name (None: every skill of ``agent.skills_dir``)."""


def _group_layers(
    section: BaseModel | None, group: str | None, topic: str | None
) -> list[tuple[str, TurnOverrides]]:
    """The layers inside the channel, innermost first: the topic's, then the group's (the
    one listed by id, else ``"*"``); none in a direct chat."""
    if not isinstance(section, ChatChannelSection) or group is None:
        return []
    rule, name = section.groups.get(group), group
    if rule is None:
        rule, name = section.groups.get("*"), '"*"'
    if rule is None:
        return []
    own = None if topic is None else rule.topics.get(topic)
    layers: list[tuple[str, TurnOverrides]] = [] if own is None else [(f"topic {topic}", own)]
    return [*layers, (f"group {name}", rule)]


def _pick(layers: list[tuple[str, TurnOverrides]], key: str, default: T) -> Setting[T]:
    """The value of ``key`` in the innermost of ``layers`` that sets it, else ``default``
    (the agent's)."""
    for source, layer in layers:
        value = getattr(layer, key, None)
        if value is not None:
            return Setting(cast(T, value), source)
    return Setting(default, AGENT)


def _prompt(layers: list[tuple[str, TurnOverrides]], base: str) -> SystemPrompt:
    parts: list[PromptPart] = []
    for source, layer in layers:  # innermost first, down to the first that replaces
        if layer.system_prompt is None:
            continue
        mode: Literal["append", "replace"] = (
            "replace" if layer.system_prompt_mode == "replace" else "append"
        )
        parts.append(PromptPart(source, mode, layer.system_prompt))
        if mode == "replace":
            break
    else:
        parts.append(PromptPart(AGENT, "base", base))
    return SystemPrompt(tuple(reversed(parts)))


def resolve(
    section: BaseModel | None,
    defaults: Defaults,
    *,
    channel: str,
    group: str | None = None,
    topic: str | None = None,
) -> Effective:
    """The settings of a chat on channel ``channel`` (whose section is ``section``): in
    group ``group`` (None: a direct chat), in its forum topic ``topic`` (None: none)."""
    inner = _group_layers(section, group, topic)
    every = inner + (
        [(f"channel {channel}", section)] if isinstance(section, TurnOverrides) else []
    )
    allow_from = _pick(inner, "allow_from", list[str]())
    tools = _pick(inner, "tools", cast(list[str] | None, None))
    skills = _pick(every, "skills", cast(list[str] | None, None))
    return Effective(
        system_prompt=_prompt(every, defaults.system_prompt),
        model=_pick(every, "model", defaults.model),
        queue_mode=_pick(every, "queue_mode", defaults.queue_mode),
        backend=_pick(every, "backend", defaults.backend),
        require_mention=_pick(every, "require_mention", True),
        allow_from=Setting(frozenset(allow_from.value), allow_from.source),
        enabled=_pick(inner, "enabled", True),
        tools=Setting(None if tools.value is None else tuple(tools.value), tools.source),
        skills=Setting(None if skills.value is None else tuple(skills.value), skills.source),
    )
