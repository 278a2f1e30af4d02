"""Factories from a validated config: the runtime's settings and its stand-alone parts.

``open_store`` opens the configured store through its backend (``store.backend``, chosen once:
``botd.store.backends``), and the leases follow from what that backend is (shared by the
nodes, or a node's alone); no backend is named here.

The functions that turn config sections into settings (loop, subscriber and session
settings, access policies, each chat's own settings by its topic, group and channel
(``place_settings``), delivery modes and retries, media, provider settings, scheduled jobs)
and the parts built from the config alone (the model provider with its fallbacks, one
channel's adapter through the channel registry, the scheduler) live here, so the config
package stays plain data. ``botd.app`` puts the parts together in dependency order.

Channels are instances (``channel_instances`` in ``botd.channels.registry``: each
``channels.<name>`` section's name and platform): what a channel's platform decides (its
adapter, what its chat ids tell, how its targets are spelled) comes from the spec of the
instance's platform, never from its name.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel

from .agent.loop import LoopConfig
from .agent.providers import create_provider
from .agent.providers.failover import FailoverProvider, ModelChoice
from .agent.tools.registry import ToolSpec, tool_specs
from .agent.types import Provider
from .approvals import ApprovalRules
from .channels.base import ChannelAdapter
from .channels.registry import (
    ChannelContext,
    ChannelSpec,
    ChannelUnavailable,
    channel_instances,
    channel_specs,
    platform_specs,
    target_forms,
)
from .chat import InboundMessage, Target
from .cluster.leases import LeaseKeeper
from .config import BotdConfig, ChannelSection, ChatChannelSection, parse_every
from .config.overrides import Defaults, Effective, resolve
from .conversation import CoalesceSettings, ResetPolicy, SessionSettings
from .conversation.reactions import ReactionRules, StatusEmoji
from .delivery import ChunkSettings, DeliveryMode, RetrySettings
from .delivery.media import MediaSettings
from .delivery.voice import speech_dir
from .inbound.access import AccessPolicy, GroupRule
from .ops.outages import MODEL_DOWN_AFTER_CALLS, Reachability
from .scheduler import JobInfo, JobSpec, Scheduler
from .scheduler.store import LEGACY_DB_NAME
from .store import JobLedger, Store
from .store.backends import StoreBackend, store_backend
from .subscriber.payloads import ChunkingConfig, SubscriberConfig
from .workspace import workspaces_root

__all__ = [
    "access_policies",
    "access_policy",
    "build_adapter",
    "build_adapters",
    "build_provider",
    "build_scheduler",
    "delivery_modes",
    "delivery_retry",
    "group_delivery_modes",
    "loop_config",
    "model_names",
    "open_store",
    "place_settings",
    "provider_settings",
    "reaction_rules",
    "scheduler_jobs",
    "session_settings",
    "subscriber_config",
]

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"

Specs = Mapping[str, ChannelSpec[Any]]


# --------------------------------------------------------------------------- settings


def loop_config(config: BotdConfig) -> LoopConfig:
    return LoopConfig(
        model=config.model.model_name,
        system=config.agent.system_prompt,
        max_tokens=config.model.max_tokens,
        thinking_budget=config.model.thinking,
        max_turn_requests=config.agent.max_turn_requests,
        tool_timeout=config.agent.tool_timeout,
    )


def subscriber_config(config: BotdConfig) -> SubscriberConfig:
    streaming = config.agent.block_streaming
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
        reasoning=config.agent.reasoning,
        enforce_final_tag=config.agent.enforce_final_tag,
        target_forms=target_forms(instances=channel_instances(config.channels).values()),
    )


def approval_rules(
    config: BotdConfig, tools: Mapping[str, ToolSpec] | None = None
) -> ApprovalRules:
    """``agent.approvals`` as the gate reads it, with the tools whose spec says every call
    needs an approval (``ToolSpec.needs_approval``; ``tools``: the registered ones)."""
    section = config.agent.approvals
    registry = tool_specs() if tools is None else tools
    always = [name for name, spec in registry.items() if spec.needs_approval]
    return ApprovalRules(
        tools=tuple(dict.fromkeys([*section.tools, *always])),
        approvers=frozenset(section.approvers),
        timeout=section.timeout,
        ask_in=section.ask_in,
        always_allow=tuple(section.always_allow),
    )


def session_settings(config: BotdConfig, state_dir: Path | None = None) -> SessionSettings:
    """Session settings; ``state_dir`` overrides the configured one (e.g. resolved)."""
    root = config.state_dir if state_dir is None else state_dir
    reset = config.agent.reset
    return SessionSettings(
        loop=loop_config(config),
        subscriber=subscriber_config(config),
        queue_mode=config.agent.queue_mode,
        debounce=config.agent.debounce,
        max_concurrent_runs=config.agent.max_concurrent_runs,
        reset=ResetPolicy(
            mode=reset.mode, idle_minutes=reset.idle_minutes, daily_hour=reset.daily_hour
        ),
        record_events_dir=root / "events" if config.agent.record_events else None,
        coalesce=_coalesce_settings(config),
        tool_status=config.agent.tool_progress == "status",
        show_command=config.agent.exec.show_command,
    )


def _coalesce_settings(config: BotdConfig) -> CoalesceSettings | None:
    streaming = config.agent.block_streaming
    section = streaming.coalesce
    if section is None:
        return None
    joiner = {"paragraph": "\n\n", "newline": "\n", "sentence": " "}[streaming.break_preference]
    return CoalesceSettings(section.min_chars, section.max_chars, section.idle_ms, joiner)


def access_policy(section: BaseModel, spec: ChannelSpec[Any] | None = None) -> AccessPolicy:
    """Who may talk to the bot on a channel. A chat platform's section says so; a channel
    without access settings (the console) belongs to whoever runs it and is open. ``spec``:
    the channel's platform, which tells what its chat ids mean. Each group's rule, and each
    forum topic's, is what ``resolve`` makes of its layers."""
    chat_kind = None if spec is None else spec.chat_kind
    if not isinstance(section, ChatChannelSection):
        return AccessPolicy(dm_policy="open", chat_kind=chat_kind)
    return AccessPolicy(
        dm_policy=section.dm_policy,
        allow_from=frozenset(section.allow_from),
        group_policy=section.group_policy,
        groups={
            chat: _group_rule(section, chat, topics=tuple(rule.topics))
            for chat, rule in section.groups.items()
        },
        require_mention=section.require_mention,
        mention_patterns=tuple(section.mention_patterns),
        buttons_expire_after=section.buttons_expire_after,
        chat_kind=chat_kind,
        session_scopes={chat: section.group_session_scope(chat) for chat in section.groups},
        session_scope=section.group_session_scope("*"),
    )


def _group_rule(
    section: ChatChannelSection, chat: str, topic: str | None = None, topics: tuple[str, ...] = ()
) -> GroupRule:
    """The access rule of group ``chat`` (its topic ``topic``), with its topics' rules."""
    here = resolve(section, Defaults(), channel="", group=chat, topic=topic)
    return GroupRule(
        require_mention=here.require_mention.value,
        allow_from=here.allow_from.value,
        enabled=here.enabled.value,
        topics={thread: _group_rule(section, chat, thread) for thread in topics},
    )


def _enabled_sections(config: BotdConfig) -> dict[str, BaseModel]:
    sections = config.channels.sections()
    return {name: sections[name] for name in config.channels.enabled()}


def access_policies(config: BotdConfig, specs: Specs | None = None) -> dict[str, AccessPolicy]:
    """One policy per enabled channel (its chat ids read as its platform's)."""
    platforms = platform_specs(config.channels, specs)
    return {
        name: access_policy(section, platforms.get(name))
        for name, section in _enabled_sections(config).items()
    }


def media_settings(config: BotdConfig) -> MediaSettings:
    """Where uploaded files may come from: the address guard's allow list, the size cap, the
    one local directory and the conversations' workspaces."""
    workspace = config.agent.workspace
    return MediaSettings(
        allow_hosts=tuple(config.agent.web_fetch.allow_hosts),
        max_bytes=config.media.max_bytes,
        outbound_dir=config.media.outbound_dir,
        timeout=config.agent.web_fetch.timeout,
        workspaces=workspaces_root(config.state_dir, workspace.root),
        shared_workspace=workspace.shared,
        speech_dir=speech_dir(Path(config.state_dir)),
    )


def delivery_modes(config: BotdConfig) -> dict[str, DeliveryMode]:
    """How replies appear, for each enabled channel whose section says (a chat channel's
    ``delivery``; the web channel's, fixed to ``edit``)."""
    modes: dict[str, DeliveryMode] = {}
    for name, section in _enabled_sections(config).items():
        mode = getattr(section, "delivery", None)
        if isinstance(mode, str):
            modes[name] = cast("DeliveryMode", mode)
    return modes


def reaction_rules(config: Callable[[], BotdConfig]) -> ReactionRules:
    """The status reactions a message gets under the config in force (``config()``, read
    at each message, so a reload applies to the next): its channel's ``reactions``, or its
    group's, and their ``scope``."""

    def rules(message: InboundMessage) -> StatusEmoji | None:
        section = config().channels.section(message.channel)
        if not isinstance(section, ChatChannelSection):
            return None
        group = None if message.is_direct else message.chat_id
        return section.reactions_for(group, mentions_bot=message.mentions_bot)

    return rules


PlaceSettings = Callable[[InboundMessage], Effective]
"""The settings of an inbound message's chat (``botd.config.overrides``)."""


def place_settings(config: Callable[[], BotdConfig], defaults: Defaults) -> PlaceSettings:
    """The settings of a message's chat (its topic, group, channel), resolved under the
    config in force (``config()``, read at each message, so a reload applies to the next)
    over ``defaults`` (``agent``'s and the primary model's: those of the config botd started
    with, since those sections apply after a restart)."""

    def settings(message: InboundMessage) -> Effective:
        group = None if message.is_direct else message.chat_id
        return resolve(
            config().channels.section(message.channel),
            defaults,
            channel=message.channel,
            group=group,
            topic=None if group is None else message.thread_id,
        )

    return settings


def group_delivery_modes(config: BotdConfig) -> dict[str, dict[str, DeliveryMode]]:
    """How replies appear in the groups that set their own ``delivery``, by channel and
    group id (every other chat: the channel's)."""
    return {
        name: {chat: rule.delivery for chat, rule in section.groups.items() if rule.delivery}
        for name, section in _enabled_sections(config).items()
        if isinstance(section, ChatChannelSection)
    }


def delivery_chunking(config: BotdConfig) -> dict[str, ChunkSettings]:
    """How each enabled channel cuts replies into messages."""
    return {
        name: ChunkSettings(section.chunk_mode, section.text_chunk_limit)
        for name, section in _enabled_sections(config).items()
        if isinstance(section, ChannelSection)
    }


def delivery_retry(config: BotdConfig) -> dict[str, RetrySettings]:
    """How long failed replies are retried, for each enabled chat channel."""
    return {
        name: RetrySettings(budget=section.delivery_retry_for)
        for name, section in _enabled_sections(config).items()
        if isinstance(section, ChatChannelSection)
    }


def provider_settings(config: BotdConfig) -> dict[str, Any]:
    """Keyword settings for ``create_provider(config.model.provider, **settings)``."""
    model = config.model
    if model.provider == "scripted":
        return {} if model.script is None else {"script": model.script}
    settings = _api_settings(
        model.provider, model.api_key, model.base_url, model.max_retry_wait, model.idle_timeout
    )
    return _proxied(settings, model.proxy)


def _watched(
    settings: dict[str, Any],
    provider: str,
    model: str,
    config: BotdConfig,
    health: dict[str, Reachability] | None,
) -> dict[str, Any]:
    """``settings`` with a ``Reachability`` following the model API's calls, kept in
    ``health`` under ``model:<provider>/<model>`` (the scripted provider calls nothing)."""
    if health is None or provider == "scripted":
        return settings
    name = f"model:{provider}/{model}"
    health[name] = Reachability(
        name, down_after=config.health.down_after, after_failures=MODEL_DOWN_AFTER_CALLS
    )
    return {**settings, "health": health[name]}


def _api_settings(
    provider: str,
    api_key: str | None,
    base_url: str | None,
    max_retry_wait: float,
    idle_timeout: float,
) -> dict[str, Any]:
    """A model API's keyword settings for ``create_provider``: its key, its base URL (the
    OpenAI-compatible provider's default spelled out) and its waits."""
    settings: dict[str, Any] = {"max_retry_wait": max_retry_wait, "idle_timeout": idle_timeout}
    if api_key:
        settings["api_key"] = api_key
    if provider == "openai":
        settings["base_url"] = base_url or DEFAULT_OPENAI_BASE_URL
    elif base_url:
        settings["base_url"] = base_url
    return settings


def _proxied(settings: dict[str, Any], proxy: str | None) -> dict[str, Any]:
    """``settings`` with ``model.proxy`` (the primary's and every fallback's) when it is set."""
    return settings if proxy is None else {**settings, "proxy": proxy}


def scheduler_jobs(config: BotdConfig) -> list[JobSpec]:
    """The configured jobs as the scheduler's ``JobSpec``s."""
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
            heartbeat=None if job.heartbeat is None else job.heartbeat.ack_max_chars,
        )
        for job in config.scheduler.jobs
    ]


# --------------------------------------------------------------------------- parts


def fallback_settings(config: BotdConfig, index: int) -> dict[str, Any]:
    """Keyword settings for ``create_provider`` of ``model.fallbacks[index]``."""
    model = config.model
    fallback = model.fallbacks[index]
    settings = _api_settings(
        fallback.provider,
        fallback.api_key,
        fallback.base_url,
        model.max_retry_wait if fallback.max_retry_wait is None else fallback.max_retry_wait,
        model.idle_timeout if fallback.idle_timeout is None else fallback.idle_timeout,
    )
    return _proxied(settings, model.proxy)


def model_names(config: BotdConfig) -> list[str]:
    """The configured models' names: the primary, then its fallbacks in order."""
    return config.model_names()


def build_provider(config: BotdConfig, health: dict[str, Reachability] | None = None) -> Provider:
    """The model provider; with fallbacks, one that fails over from model to model. With
    ``health``, each model's calls are followed there (``/healthz``: ``model:<name>``)."""
    model = config.model
    settings = _watched(provider_settings(config), model.provider, model.model_name, config, health)
    primary = create_provider(model.provider, **settings)
    if not model.fallbacks:
        return primary
    choices = [ModelChoice(model.model_name, primary)]
    for index, fallback in enumerate(model.fallbacks):
        settings = fallback_settings(config, index)
        settings = _watched(settings, fallback.provider, fallback.name, config, health)
        provider = create_provider(fallback.provider, **settings)
        choices.append(ModelChoice(fallback.name, provider))
    return FailoverProvider(choices)


def build_adapter(
    name: str, config: BotdConfig, context: ChannelContext, specs: Specs | None = None
) -> ChannelAdapter | None:
    """The adapter of one enabled channel (None when it is not enabled), built by its
    platform's factory with ``context`` naming the instance.

    Raises ``ChannelUnavailable`` when its platform is unknown or its SDK is not installed.
    """
    section = config.channels.section(name)
    if section is None or name not in config.channels.enabled():
        return None
    channel = channel_instances(config.channels)[name]
    registry = channel_specs() if specs is None else specs
    spec = registry.get(channel.platform)
    if spec is None:
        raise ChannelUnavailable(f"no channel platform named {channel.platform!r} is registered")
    return spec.build(section, replace(context, channel=channel))


def build_adapters(
    config: BotdConfig, context: ChannelContext, specs: Specs | None = None
) -> dict[str, ChannelAdapter]:
    """One adapter per enabled channel."""
    adapters: dict[str, ChannelAdapter] = {}
    for name in config.channels.enabled():
        adapter = build_adapter(name, config, context, specs)
        if adapter is not None:
            adapters[name] = adapter
    return adapters


def build_scheduler(
    config: BotdConfig,
    store: JobLedger,
    state_dir: Path,
    submit: Callable[[InboundMessage], Awaitable[None]],
    leases: LeaseKeeper | None = None,
) -> Scheduler:
    """The scheduler on the store's job tables; an old ``schedule.sqlite3`` is imported once.
    With ``leases`` (cluster mode) it runs the schedule while this node holds the lease
    ``scheduler``; without, the node is alone and runs it from its start."""
    return Scheduler(
        store,
        submit,
        timezone=config.scheduler.timezone,
        legacy_db=state_dir / LEGACY_DB_NAME,
        leases=leases,
    )


def describe_job(info: JobInfo) -> str:
    when = (
        info.next_run_time.isoformat(timespec="minutes")
        if info.next_run_time is not None
        else "not scheduled"
    )
    return f"{info.id}: {info.description} (next {when})"


# --------------------------------------------------------------------------- the store


def open_leases(config: BotdConfig, store: Store, backend: StoreBackend) -> LeaseKeeper:
    """This node's leases, where its backend keeps them: in the shared database (every node
    claims from one table, ``store.lease_ttl``), or in memory with an infinite TTL (the state
    dir's lock already makes the node the only one: its leases never lapse,
    ``LeaseKeeper.lapses``)."""
    section = config.store
    ttl = section.lease_ttl if backend.cluster else math.inf
    return LeaseKeeper(backend.lease_table(store), section.node_id, ttl)


async def open_store(config: BotdConfig) -> Store:
    """The store ``config.store`` names, open and migrated (``StoreBackend.open``). Raises
    ``StoreOpenError`` (one line, no password) when it cannot be used, or when the backend's
    extra is missing."""
    return await store_backend(config.store).open(config)
