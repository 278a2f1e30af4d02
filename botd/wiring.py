"""Building a running botd from a validated config, in one place.

``build_runtime`` creates, in order: the store, the model provider, one adapter per enabled
channel (through the channel registry), the delivery layer, the sessions, the scheduler
and the router, and returns them as a ``Runtime``. The scheduler submits prompts into the
sessions, and the sessions' tools schedule jobs: the sessions are built first, and their
tool factory, which runs only once messages flow, reaches the scheduler built right after.

The functions that turn config sections into the runtime's settings (loop, subscriber and
session settings, access policies, delivery modes, provider settings, scheduled jobs) live
here too, so the config package stays plain data. ``Runtime`` offers what a reload needs:
building one channel's adapter, and pointing the delivery layer and the router at the live
channels and their new settings.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .agent.loop import LoopConfig
from .agent.mcp import McpManager, narrow
from .agent.message_tool import MessageTool
from .agent.providers import create_provider
from .agent.providers.failover import FailoverProvider, ModelChoice
from .agent.schedule_tool import ScheduleTool
from .agent.tools import Tool
from .agent.types import Provider
from .agent.web_fetch_tool import WebFetchTool
from .channels.base import ChannelAdapter
from .channels.registry import (
    ChannelContext,
    ChannelSpec,
    ChannelUnavailable,
    channel_specs,
    target_forms,
)
from .chat import Attachment, DownloadError, InboundMessage, MessageRef, Target
from .config import BotdConfig, ChannelSection, ChatChannelSection, parse_every
from .conversation import CoalesceSettings, Conversations, ResetPolicy, RunHooks, SessionSettings
from .delivery import ChannelDelivery, ChunkSettings, DeliveryMode, RetrySettings
from .delivery.media import MediaSettings
from .inbound.access import AccessPolicy, GroupRule
from .inbound.message_access import MessageAccess
from .inbound.pairing import PairingBook
from .inbound.router import Router
from .media import MediaResolver
from .media.sandbox import Sandbox
from .ops.metrics import Metrics
from .ops.outages import MODEL_DOWN_AFTER_CALLS, Reachability
from .scheduler import JobInfo, JobSpec, Scheduler
from .scheduler.store import LEGACY_DB_NAME
from .store import InboundPruner, Store
from .subscriber.payloads import ChunkingConfig, SubscriberConfig

__all__ = [
    "Runtime",
    "access_policies",
    "access_policy",
    "build_adapter",
    "build_adapters",
    "build_provider",
    "build_runtime",
    "build_scheduler",
    "delivery_modes",
    "delivery_retry",
    "loop_config",
    "model_names",
    "provider_settings",
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
        target_forms=target_forms(),
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
    )


def _coalesce_settings(config: BotdConfig) -> CoalesceSettings | None:
    streaming = config.agent.block_streaming
    section = streaming.coalesce
    if section is None:
        return None
    joiner = {"paragraph": "\n\n", "newline": "\n", "sentence": " "}[streaming.break_preference]
    return CoalesceSettings(section.min_chars, section.max_chars, section.idle_ms, joiner)


def access_policy(section: BaseModel) -> AccessPolicy:
    """Who may talk to the bot on a channel. A chat platform's section says so; a channel
    without access settings (the console) belongs to whoever runs it and is open."""
    if not isinstance(section, ChatChannelSection):
        return AccessPolicy(dm_policy="open")
    return AccessPolicy(
        dm_policy=section.dm_policy,
        allow_from=frozenset(section.allow_from),
        group_policy=section.group_policy,
        groups={
            chat: GroupRule(
                require_mention=rule.require_mention,
                allow_from=frozenset(rule.allow_from),
                enabled=rule.enabled,
                tools=None if rule.tools is None else tuple(rule.tools),
            )
            for chat, rule in section.groups.items()
        },
        require_mention=section.require_mention,
        mention_patterns=tuple(section.mention_patterns),
    )


def _enabled_sections(config: BotdConfig) -> dict[str, BaseModel]:
    sections = config.channels.sections()
    return {name: sections[name] for name in config.channels.enabled()}


def access_policies(config: BotdConfig) -> dict[str, AccessPolicy]:
    """One policy per enabled channel."""
    return {name: access_policy(s) for name, s in _enabled_sections(config).items()}


def media_settings(config: BotdConfig) -> MediaSettings:
    """Where uploaded files may come from: the address guard's allow list, the size cap and
    the one local directory."""
    return MediaSettings(
        allow_hosts=tuple(config.agent.web_fetch.allow_hosts),
        max_bytes=config.media.max_bytes,
        outbound_dir=config.media.outbound_dir,
        timeout=config.agent.web_fetch.timeout,
    )


def delivery_modes(config: BotdConfig) -> dict[str, DeliveryMode]:
    """How replies appear, for each enabled chat channel that sets it."""
    return {
        name: section.delivery
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
    return _api_settings(
        model.provider, model.api_key, model.base_url, model.max_retry_wait, model.idle_timeout
    )


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
    return _api_settings(
        fallback.provider,
        fallback.api_key,
        fallback.base_url,
        model.max_retry_wait if fallback.max_retry_wait is None else fallback.max_retry_wait,
        model.idle_timeout if fallback.idle_timeout is None else fallback.idle_timeout,
    )


def model_names(config: BotdConfig) -> list[str]:
    """The configured models' names: the primary, then its fallbacks in order."""
    return [config.model.model_name, *(f.name for f in config.model.fallbacks)]


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
    """The adapter of one enabled channel (None when it is not enabled).

    Raises ``ChannelUnavailable`` when the channel is unknown or its SDK is not installed.
    """
    section = config.channels.section(name)
    if section is None or name not in config.channels.enabled():
        return None
    registry = channel_specs() if specs is None else specs
    spec = registry.get(name)
    if spec is None:
        raise ChannelUnavailable(f"no channel named {name!r} is registered")
    return spec.build(section, context)


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
    store: Store,
    state_dir: Path,
    submit: Callable[[InboundMessage], Awaitable[None]],
) -> Scheduler:
    """The scheduler on the store's job tables; an old ``schedule.sqlite3`` is imported once."""
    return Scheduler(
        store,
        submit,
        timezone=config.scheduler.timezone,
        legacy_db=state_dir / LEGACY_DB_NAME,
    )


def describe_job(info: JobInfo) -> str:
    when = (
        info.next_run_time.isoformat(timespec="minutes")
        if info.next_run_time is not None
        else "not scheduled"
    )
    return f"{info.id}: {info.description} (next {when})"


# --------------------------------------------------------------------------- the runtime


@dataclass(eq=False)
class Runtime:
    """A built botd: its parts, the live adapters and the config they were built from."""

    config: BotdConfig
    specs: Specs
    context: ChannelContext
    store: Store
    provider: Provider
    adapters: dict[str, ChannelAdapter]
    """The live adapters by channel; a reload adds and removes entries in place."""
    delivery: ChannelDelivery
    sessions: Conversations
    scheduler: Scheduler
    router: Router
    pruner: InboundPruner
    """Forgets inbound ids past the platforms' redelivery windows (started by the daemon)."""
    mcp: McpManager = field(default_factory=lambda: McpManager({}))
    """The MCP servers whose tools runs get (started and closed by the daemon)."""
    model_health: dict[str, Reachability] = field(default_factory=dict)
    """Whether each model API answers, by ``model:<provider>/<model>`` (``/healthz``)."""

    def build_adapter(self, name: str, config: BotdConfig) -> ChannelAdapter | None:
        """A new adapter for channel ``name`` as ``config`` sets it up (None: not enabled)."""
        return build_adapter(name, config, self.context, self.specs)

    def update_channels(self, config: BotdConfig) -> None:
        """Point delivery at the live adapters and the router and delivery at ``config``'s
        access policies and delivery modes."""
        self.router.update_policies(access_policies(config))
        self.delivery.set_channels(
            self.adapters,
            delivery_modes(config),
            retry=delivery_retry(config),
            chunking=delivery_chunking(config),
        )
        self.delivery.media = media_settings(config)


def build_runtime(
    config: BotdConfig,
    *,
    metrics: Metrics | None = None,
    hooks: RunHooks | None = None,
    on_end_of_input: Callable[[], Awaitable[None]] | None = None,
    on_channel_down: Callable[[str, str], None] | None = None,
    on_reachability: Callable[[str, str | None], None] | None = None,
    channels_down: Callable[[], Mapping[str, str]] | None = None,
    specs: Specs | None = None,
) -> Runtime:
    """Every part of a botd for ``config``, connected and not yet started.

    ``on_end_of_input`` is called when the console's input ends; ``metrics`` counts the
    messages accepted and every message delivery posts. ``on_channel_down`` hears of a
    started channel that stopped working (channel, reason), ``on_reachability`` whether a
    running channel's platform answers (``PlatformLink``); ``channels_down`` tells ``/status``
    which channels are down and why.
    Raises ``ChannelUnavailable`` when an enabled channel's SDK is missing.
    """
    counters = Metrics() if metrics is None else metrics
    registry = channel_specs() if specs is None else specs
    state_dir = Path(config.state_dir)
    store = Store.open(state_dir)
    model_health: dict[str, Reachability] = {}
    try:
        provider = build_provider(config, model_health)
        context = ChannelContext(
            offsets=store,
            on_end_of_input=on_end_of_input,
            on_channel_down=on_channel_down,
            on_reachability=on_reachability,
            has_conversation=lambda key: store.active_session(key) is not None,
            # Asked once messages arrive, by when the router below exists.
            admits=lambda message: router.admits(message),
            model=f"{config.model.provider} provider (model {config.model.model_name})",
        )
        adapters = build_adapters(config, context, registry)
        mcp = McpManager(config.agent.mcp_servers)  # refused at once without the SDK
    except BaseException:
        store.close()
        raise
    delivery = ChannelDelivery(
        adapters,
        delivery_modes(config),
        retry=delivery_retry(config),
        media=media_settings(config),
        counts=counters,  # every message out, counted where it is sent
        chunking=delivery_chunking(config),
    )

    async def send(target: Target, text: str) -> MessageRef:
        refs = await delivery.send_text(target, text)
        return refs[0] if refs else MessageRef(target, "")

    async def send_media(target: Target, text: str, media: Sequence[str]) -> MessageRef:
        refs = await delivery.send_text(target, text, media=media)
        return refs[0] if refs else MessageRef(target, "")

    # One pool of reading workers for files users send and pages the model fetches: together
    # they never run more than its slots of parsing at once.
    reading = Sandbox()

    def tools(message: InboundMessage) -> Sequence[Tool]:
        # Read when a run starts: by then the runtime below exists.
        enabled = set(runtime.config.agent.tools)
        chosen: list[Tool] = []
        if "message" in enabled:
            chosen.append(MessageTool(send, refusal=message_access.refusal, send_media=send_media))
        if "schedule" in enabled:
            chosen.append(ScheduleTool(scheduler))
        if "web_fetch" in enabled:
            web = runtime.config.agent.web_fetch
            chosen.append(
                WebFetchTool(
                    allow_hosts=web.allow_hosts,
                    max_bytes=web.max_bytes,
                    max_chars=web.max_chars,
                    timeout=web.timeout,
                    sandbox=reading,
                )
            )
        chosen.extend(mcp.tools())  # the servers running now
        rule = None if message.is_direct else router.group_rule(message.channel, message.chat_id)
        if rule is not None and rule.tools is not None:
            return narrow(chosen, rule.tools)
        return chosen

    def jobs(conversation_key: str) -> list[str]:
        return [describe_job(info) for info in scheduler.list_jobs(conversation_key)]

    async def download(message: InboundMessage, attachment: Attachment, max_bytes: int) -> bytes:
        adapter = runtime.adapters.get(message.channel)
        if adapter is None:
            raise DownloadError(f"the {message.channel} channel is not running")
        return await adapter.download(attachment, max_bytes)

    sessions = Conversations(
        store,
        provider,
        delivery,
        session_settings(config, state_dir),
        tools=tools,
        jobs=jobs,
        hooks=hooks,
        channels_down=channels_down,
        servers_down=lambda: {n: s for n, s in mcp.states().items() if s != "running"},
        models=model_names(config),
        media=MediaResolver(lambda: runtime.config.media, download, sandbox=reading),
    )

    async def submit(message: InboundMessage) -> None:
        counters.message_in(message.channel)
        await sessions.submit(message)

    async def run_job(message: InboundMessage) -> None:
        # A scheduled job's prompt is no message in (not counted), but it is accepted into
        # the inbox like one: a run cut by a restart resumes, and is answered once.
        inbox_id = await store.accept_inbound(message.channel, [message.message_id], message)
        if inbox_id is not None:
            await sessions.submit(replace(message, inbox_id=inbox_id))

    scheduler = build_scheduler(config, store, state_dir, run_job)

    async def reply(target: Target, text: str) -> None:
        # In the background: a pairing reply retried through an outage of one chat must not
        # hold up the channel's input for the others.
        sessions.post_later(target, text)

    router = Router(
        store,
        submit,
        reply,
        access_policies(config),
        pairing=PairingBook(state_dir / "pairing.json"),
    )
    # Everything read live: the router's current policies, the current config's targets and
    # the adapter dict a reload adds channels to and removes them from.
    message_access = MessageAccess(router, lambda: runtime.config.agent.message_targets, adapters)
    runtime = Runtime(
        config=config,
        specs=registry,
        context=context,
        store=store,
        provider=provider,
        adapters=adapters,
        delivery=delivery,
        sessions=sessions,
        scheduler=scheduler,
        router=router,
        pruner=InboundPruner(store),
        mcp=mcp,
        model_health=model_health,
    )
    return runtime
