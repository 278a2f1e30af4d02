"""The runtime: every part of a botd, built from a validated config and connected, not yet
started (``build_runtime``); the App (``botd.app``) starts and stops it.

The parts are built in dependency order, each from parts already built: the model provider,
the MCP servers, delivery, the intake (where accepted messages go), the scheduler and the
router (both handing to the intake), the channel keeper (which builds the adapters and hears
their events), the tools, the owners (``botd.owners``: who they are, for the commands and the
approvals, and the welcomes of senders approved by pairing, handed to the router), the
approvals, the sessions and the dispatcher (the one door from the inbox into them,
``botd.conversation.dispatcher``); the intake is connected to the dispatcher last
(``Intake.connect``: the sessions' tools need the router and the scheduler). The store comes
in opened, with its backend (``botd.store.backends``), whose ``cluster`` decides whether
pollers and the schedule go by lease among several nodes and whether the conversations'
leases lapse. The HTTP servers
the channels and the health endpoint serve routes on (``botd.http``) are made here, empty.

The tools a run gets are built through their specs (``Toolbox``): no tool is named here, nor
a backend, nor a platform. The memory (``botd.memory``) is built over the store and given to
the memory tools (``ToolDeps.memory``), to each turn's system prompt (its note, when the run
is offered one of ``MEMORY_TOOLS``) and to ``/memory``. The skills (``botd.skills``) are
read at build and again by each reload (``Runtime.skills``); a run offered the ``skill`` tool
gets its chat's skills named in its system prompt and loads them through that tool. A
resumed run offered a tool that reaches the workspace is told, on several nodes, what its
workspace here holds (``Toolbox.resumed_note``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from .agent.mcp import McpManager, allowed, narrow
from .agent.tools.base import Tool
from .agent.tools.registry import ToolDeps, ToolSpec, tool_specs
from .agent.types import Provider
from .approvals import PREFIX, Approvals
from .buttons.layout import ButtonRows
from .channel_keeper import ChannelKeeper
from .channels.base import ChannelAdapter, InboundSink
from .channels.registry import ChannelContext, channel_specs, platform_specs
from .chat import Attachment, DownloadError, InboundMessage, MessageRef, Target
from .cluster.fencing import RunScope
from .cluster.leases import LeaseKeeper
from .config import BotdConfig
from .config.extras import installed
from .config.overrides import Defaults
from .config.schema import acp_agent_key
from .conversation import Conversations, RunHooks
from .conversation.dispatcher import Dispatcher
from .conversation.reactions import StatusReactions
from .delivery import ChannelDelivery
from .delivery.voice import Voice, speech_dir
from .forget import PREFIX as FORGET_PREFIX
from .forget import Forgetter, dm_spelling
from .http.routes import HttpServers
from .inbound.message_access import MessageAccess
from .inbound.router import Router
from .media import MediaResolver
from .media.sandbox import Sandbox
from .memory import MEMORY_TOOLS, Memory
from .ops.metrics import Metrics
from .ops.outages import Reachability
from .owners import AdminLookups, OwnerDesk, PairingWelcomes, owner_rules
from .scheduler import Scheduler
from .skills import SKILL_TOOL, Skills
from .store import ConversationLedger, InboundLedger, InboundPruner, Store
from .store.backends import StoreBackend, store_backend
from .wiring import (
    PlaceSettings,
    Specs,
    access_policies,
    approval_rules,
    build_adapter,
    build_provider,
    build_scheduler,
    delivery_chunking,
    delivery_modes,
    delivery_retry,
    describe_job,
    group_delivery_modes,
    media_settings,
    model_names,
    place_settings,
    reaction_rules,
    session_settings,
)
from .workspace import WORKSPACE_TOOLS, moved_note, workspace_dir

if TYPE_CHECKING:
    from .agent.acp.agent import AcpAgent

__all__ = ["AcpUnavailable", "Intake", "LiveConfig", "Runtime", "Toolbox", "build_runtime"]


class AcpUnavailable(RuntimeError):
    """An ACP agent is configured but the ACP SDK is not installed."""


class LiveConfig:
    """The config in force: the one botd started with, until a reload replaces it. The parts
    that read settings when they are used (the tools, the message targets, media) hold this."""

    def __init__(self, config: BotdConfig) -> None:
        self.current = config

    def get(self) -> BotdConfig:
        return self.current


class Intake:
    """Where accepted messages and scheduled prompts go: to the dispatcher, the one door
    into the sessions (``Dispatcher.arrived``: the entry is in the inbox already).

    Built before the router and the scheduler (they hand to it) and connected to the
    sessions and the dispatcher once those exist (``connect``): the sessions' tools need the
    router and the scheduler, so one side of that cycle is joined after construction.
    """

    def __init__(self, store: InboundLedger, metrics: Metrics) -> None:
        self._store = store
        self._metrics = metrics
        self._sessions: Conversations | None = None
        self._dispatcher: Dispatcher | None = None

    def connect(self, sessions: Conversations, dispatcher: Dispatcher) -> None:
        self._sessions = sessions
        self._dispatcher = dispatcher

    async def _hand_on(self, message: InboundMessage) -> None:
        if self._dispatcher is None:
            raise RuntimeError("the intake is not connected to the dispatcher yet")
        await self._dispatcher.arrived(message)

    @property
    def sessions(self) -> Conversations:
        if self._sessions is None:
            raise RuntimeError("the intake is not connected to the sessions yet")
        return self._sessions

    async def submit(self, message: InboundMessage) -> None:
        """An accepted message in from a channel (counted)."""
        self._metrics.message_in(message.channel)
        await self._hand_on(message)

    async def reply(self, target: Target, text: str) -> None:
        """A router's own answer (a pairing code), sent in the background: one retried
        through an outage of its chat must not hold up the channel's input for the others."""
        self.sessions.post_later(target, text)

    async def run_job(self, message: InboundMessage) -> None:
        """A scheduled job's prompt, accepted into the inbox by the scheduler's fire (so a
        run cut by a restart resumes and is answered once): handed to its conversation, not
        counted as a message in."""
        await self._hand_on(message)


class Channels:
    """The live adapters and what follows them: delivery posts through them, the router
    takes their access policies (the ``ChannelKeeper``'s host)."""

    def __init__(
        self, specs: Specs, router: Router, delivery: ChannelDelivery, sink: InboundSink
    ) -> None:
        self.specs = specs
        self.adapters: dict[str, ChannelAdapter] = {}
        self.sink = sink
        self._router = router
        self._delivery = delivery

    def build_adapter(
        self, name: str, config: BotdConfig, context: ChannelContext
    ) -> ChannelAdapter | None:
        """A new adapter for channel ``name`` as ``config`` sets it up (None: not enabled)."""
        return build_adapter(name, config, context, self.specs)

    def update_channels(self, config: BotdConfig) -> None:
        """Point delivery at the live adapters and the router and delivery at ``config``'s
        access policies and delivery modes."""
        self._router.update_policies(access_policies(config, self.specs))
        self._delivery.set_channels(
            self.adapters,
            delivery_modes(config),
            retry=delivery_retry(config),
            chunking=delivery_chunking(config),
            group_modes=group_delivery_modes(config),
        )
        self._delivery.media = media_settings(config)

    async def download(
        self, message: InboundMessage, attachment: Attachment, max_bytes: int
    ) -> bytes:
        """A file a user sent, fetched through its channel."""
        adapter = self.adapters.get(message.channel)
        if adapter is None:
            raise DownloadError(f"the {message.channel} channel is not running")
        return await adapter.download(attachment, max_bytes)


class Toolbox:
    """The tools a run gets, chosen when it starts: those ``agent.tools`` lists (read live),
    each built through its spec (``botd.agent.tools.registry``), then the running MCP
    servers' tools, narrowed by the group's (or forum topic's) ``tools`` list."""

    def __init__(
        self,
        live: LiveConfig,
        delivery: ChannelDelivery,
        scheduler: Scheduler,
        router: Router,
        message_access: MessageAccess,
        mcp: McpManager,
        sandbox: Sandbox,
        place: PlaceSettings,
        specs: Mapping[str, ToolSpec] | None = None,
        memory: Memory | None = None,
        skills: Skills | None = None,
    ) -> None:
        self._live = live
        self._memory = memory
        self._skills = skills or Skills()
        self._place = place
        self._delivery = delivery
        self._scheduler = scheduler
        self._router = router
        self._message_access = message_access
        self._mcp = mcp
        self._sandbox = sandbox
        self._specs = tool_specs() if specs is None else specs

    async def _send(self, target: Target, text: str, scope: RunScope) -> MessageRef:
        refs = await self._delivery.send_text(target, text, scope=scope)
        return refs[0] if refs else MessageRef(target, "")

    async def _send_media(
        self, target: Target, text: str, media: Sequence[str], scope: RunScope
    ) -> MessageRef:
        refs = await self._delivery.send_text(target, text, media=media, scope=scope)
        return refs[0] if refs else MessageRef(target, "")

    async def _send_buttons(
        self, target: Target, text: str, media: Sequence[str], rows: ButtonRows, scope: RunScope
    ) -> MessageRef:
        refs = await self._delivery.send_text(target, text, media=media, buttons=rows, scope=scope)
        return refs[-1] if refs else MessageRef(target, "")  # the message with the buttons

    def for_message(self, message: InboundMessage) -> Sequence[Tool]:
        config = self._live.current
        enabled = set(config.agent.tools)
        deps = ToolDeps(
            config=config,
            section=None,
            send=self._send,
            send_media=self._send_media,
            send_buttons=self._send_buttons,
            refusal=self._message_access.refusal,
            reminders=self._scheduler,
            sandbox=self._sandbox,
            memory=None if self._memory is None else self._memory.here(message),
            skills=self._skills.here(self._place(message).skills.value),
        )
        # In the registry's order (botd's own by name, then plugins), whatever the list's.
        chosen: list[Tool] = [
            spec.factory(replace(deps, section=spec.settings(config)))
            for name, spec in self._specs.items()
            if name in enabled
        ]
        chosen.extend(self._mcp.tools())  # the servers running now
        allowed = self._place(message).tools.value  # the group's or topic's list, if any
        return chosen if allowed is None else narrow(chosen, allowed)

    def offers(self, message: InboundMessage, names: Sequence[str]) -> bool:
        """Whether a run answering ``message`` is offered one of the built-in tools
        ``names`` (``agent.tools`` lists it, and the group's list, if any, allows it)."""
        listed = set(self._live.current.agent.tools).intersection(names)
        patterns = self._place(message).tools.value
        return any(patterns is None or allowed(name, patterns) for name in listed)

    async def memory_note(self, message: InboundMessage, text: str) -> str:
        """The memory note of a turn answering ``message`` (``botd.memory``): "" unless
        the run is offered a memory tool."""
        if self._memory is None or not self.offers(message, MEMORY_TOOLS):
            return ""
        return await self._memory.note(message, text)

    def skills_note(self, message: InboundMessage) -> str:
        """The list of the skills offered to a run answering ``message`` (``botd.skills``):
        "" unless the run is offered the ``skill`` tool."""
        if not self.offers(message, (SKILL_TOOL,)):
            return ""
        return self._skills.here(self._place(message).skills.value).note()

    async def prompt_note(self, message: InboundMessage, text: str) -> str:
        """What a turn answering ``message`` and saying ``text`` is given after its chat's
        system prompt: the skills offered, then the memory relevant to it."""
        notes = (self.skills_note(message), await self.memory_note(message, text))
        return "\n\n".join(note for note in notes if note)

    async def resumed_note(self, message: InboundMessage, conversation_key: str) -> str:
        """What a resumed run answering ``message`` is told of its workspace
        (``botd.workspace.moved_note``): "" unless several nodes may have run it (the
        postgres store), each keeps its own workspaces (no ``agent.workspace.root``) and the
        run is offered a tool that reaches them."""
        config = self._live.current
        section = config.agent.workspace
        if config.store.backend != "postgres" or section.root is not None:
            return ""
        if not self.offers(message, WORKSPACE_TOOLS):
            return ""
        directory = workspace_dir(config.state_dir, conversation_key, shared=section.shared)
        return await asyncio.to_thread(moved_note, directory, config.store.node_id)

    async def jobs(self, conversation_key: str) -> list[str]:
        return [describe_job(info) for info in await self._scheduler.list_jobs(conversation_key)]


@dataclass(eq=False)
class Runtime:
    """A built botd: its parts, connected and not yet started."""

    live: LiveConfig
    store: Store
    provider: Provider
    channels: Channels
    keeper: ChannelKeeper
    delivery: ChannelDelivery
    sessions: Conversations
    scheduler: Scheduler
    router: Router
    pruner: InboundPruner
    """Forgets inbound ids past the platforms' redelivery windows (started by the App)."""
    mcp: McpManager
    """The MCP servers whose tools runs get (started and closed by the App)."""
    leases: LeaseKeeper
    """This node's leases (renewed by the App's task while it runs, released at its stop)."""
    backend: StoreBackend
    """What the store is: whether this node shares it with others (``cluster``)."""
    http: HttpServers
    """The HTTP servers health and the channels serve routes on (closed by the App)."""
    dispatcher: Dispatcher
    """The one door from the inbox into the sessions: the conversations this node holds by
    lease, their accepted entries pulled, claims and takeovers (started by the App)."""
    approvals: Approvals
    """The requests to approve tool calls (decided by presses, or from the web page)."""
    model_health: dict[str, Reachability] = field(default_factory=dict)
    """Whether each model API answers, by ``model:<provider>/<model>`` (``/healthz``)."""
    acp: dict[str, AcpAgent] = field(default_factory=dict)
    """The ACP agents answering instead of the model, by the backend that names them
    (``acp``, ``acp:<name>``); each one's process is started by the first run that needs it
    and stopped by the App."""

    welcomes: PairingWelcomes | None = None
    """Tells each sender approved by pairing that they can talk now (started by the App)."""
    skills: Skills = field(default_factory=Skills)
    """The skills of ``agent.skills_dir`` (read again by each reload: ``Skills.load``)."""

    async def close_acp(self) -> None:
        """Stop the ACP agents' processes, those that run."""
        await asyncio.gather(*(agent.close() for agent in self.acp.values()))

    @property
    def config(self) -> BotdConfig:
        return self.live.current

    @config.setter
    def config(self, config: BotdConfig) -> None:
        self.live.current = config

    @property
    def adapters(self) -> dict[str, ChannelAdapter]:
        """The live adapters by channel (the keeper adds and removes entries)."""
        return self.channels.adapters

    def update_channels(self, config: BotdConfig) -> None:
        self.channels.update_channels(config)

    async def aclose(self) -> None:
        """Close what construction opened (the store, the provider's client)."""
        await self.provider.aclose()
        await self.store.aclose()


def build_runtime(
    config: BotdConfig,
    *,
    metrics: Metrics | None = None,
    hooks: RunHooks | None = None,
    on_end_of_input: Callable[[], Awaitable[None]] | None = None,
    debug: bool = False,
    specs: Specs | None = None,
    store: Store,
    backend: StoreBackend | None = None,
    leases: LeaseKeeper | None = None,
) -> Runtime:
    """Every part of a botd for ``config``, connected and not yet started.

    Built in dependency order, each part from parts already built; the one cycle (the
    sessions' tools reach the router and the scheduler, which hand messages to the
    sessions) is closed by ``Intake.connect``. ``on_end_of_input`` is called when the
    console's input ends; ``metrics`` counts messages in and out, channels down and
    unreachable. Raises ``ChannelUnavailable`` when an enabled channel's SDK is missing.
    ``store``: the store ``open_store`` opened for the config (the runtime's close closes
    it), of ``backend`` (default: the one ``store.backend`` names), whose ``cluster`` decides
    whether pollers and the schedule go by lease. ``leases``: this node's lease keeper
    (``open_leases``); without one, the in-process one of a node alone.
    """
    counters = Metrics() if metrics is None else metrics
    registry = channel_specs() if specs is None else specs
    backend = store_backend(config.store) if backend is None else backend
    state_dir = Path(config.state_dir)
    live = LiveConfig(config)
    if leases is None:
        leases = LeaseKeeper.alone(config.store.node_id)
    shared = leases if backend.cluster else None  # what goes by lease among the nodes
    http = HttpServers()
    model_health: dict[str, Reachability] = {}
    provider = build_provider(config, model_health)
    mcp = McpManager(config.agent.mcp_servers)  # refused at once without the SDK
    acp = acp_agents(config, state_dir)  # refused at once without the SDK too
    delivery = ChannelDelivery(
        {},  # the channels, once built (``Channels.update_channels``)
        delivery_modes(config),
        retry=delivery_retry(config),
        media=media_settings(config),
        counts=counters,  # every message out, counted where it is sent
        chunking=delivery_chunking(config),
        group_modes=group_delivery_modes(config),
        buttons=store,  # each message's buttons: what a press of it may be
    )
    intake = Intake(store, counters)
    scheduler = build_scheduler(config, store, state_dir, intake.run_job, shared)
    pairing = backend.pairing(config, store)
    router = Router(
        store,
        intake.submit,
        intake.reply,
        access_policies(config, registry),
        pairing=pairing,
        session_started=partial(session_started, store),
    )
    channels = Channels(registry, router, delivery, router.handle)
    keeper = ChannelKeeper(
        channels,
        live.get,
        ChannelContext(
            offsets=store,
            marks=store,
            on_end_of_input=on_end_of_input,
            has_conversation=partial(has_conversation, store),
            editor_sessions=store,
            reasoning=lambda: live.current.agent.reasoning,
            admits=router.admits,
            held_back=router.held_back,
            model=f"{config.model.provider} provider (model {config.model.model_name})",
            leases=shared,
            shared_rate=backend.shared_rate(store),
            http=http,
            state_dir=state_dir,
        ),
        debug=debug,
        on_down=partial(counters.error, kind="channel_down"),
        on_unreachable=partial(counters.error, kind="unreachable"),
        on_reachable=delivery.platform_back,
    )
    # Everything read live: the router's current policies, the current config's targets
    # and the adapters a reload adds channels to and removes them from.
    message_access = MessageAccess(
        router, lambda: live.current.agent.message_targets, channels.adapters
    )
    # One pool of reading workers for files users send and pages the model fetches: a
    # lane of slots each (a page never waits behind documents), shared fairly between
    # conversations; and the exec tool's lane of commands, as fairly shared.
    reading = Sandbox(command_slots=config.agent.exec.max_concurrent)
    # Each chat's settings (its topic's, group's, channel's) read live over the agent's.
    place = place_settings(live.get, Defaults.of(config))
    # What botd keeps for people and groups (the memory tools, the prompt's note, /memory).
    memory = Memory(store, lambda: live.current.agent.memory)
    # The skills of agent.skills_dir: read now, and again by each reload.
    skills = Skills()
    skills.load(config)
    toolbox = Toolbox(
        live,
        delivery,
        scheduler,
        router,
        message_access,
        mcp,
        reading,
        place,
        memory=memory,
        skills=skills,
    )
    # An approved sender is told, and what they wrote meanwhile handed on; owners are asked
    # about by the commands (their admin lookups through the live adapters).
    welcomes = PairingWelcomes(pairing, partial(tell, delivery), router.release)
    owners = OwnerDesk(
        lambda channel: owner_rules(live.current.channels.section(channel)),
        AdminLookups(channels.adapters),
        pairing,
        approved=welcomes.wake,
    )
    # Asks a person before a listed tool runs (the owners, where there are any and no
    # approvers are named); presses of its buttons come to it.
    approvals = Approvals(
        store, delivery, lambda: approval_rules(live.current), owners=owners.decides
    )
    router.press_handlers.register(PREFIX, approvals.press)
    # /forget me, and its confirmation's button.
    forgetter = Forgetter(
        store,
        state_dir,
        dm_spelling(lambda: platform_specs(live.current.channels)),
        workspaces=lambda: live.current.agent.workspace,
    )
    router.press_handlers.register(FORGET_PREFIX, forgetter.press)
    sessions = Conversations(
        store,
        provider,
        delivery,
        replace(
            session_settings(config, state_dir),
            speech=Voice(lambda: live.current.media.speech, speech_dir(state_dir)),
        ),
        tools=toolbox.for_message,
        jobs=toolbox.jobs,
        hooks=hooks,
        channels_down=keeper.down,
        servers_down=mcp.down,
        models=model_names(config),
        media=MediaResolver(lambda: live.current.media, channels.download, sandbox=reading),
        reactions=StatusReactions(channels.adapters, reaction_rules(live.get)),
        approvals=approvals,
        acp=acp,
        answered_by=lambda message: place(message).backend.value,
        place=place,
        owners=owners,
        prompt_note=toolbox.prompt_note,
        resumed_note=toolbox.resumed_note,
        memory_command=memory.command,
        forget_command=forgetter.command,
    )
    forgetter.drop = sessions.forget
    dispatcher = Dispatcher(sessions, backend.inbox(store), leases)
    intake.connect(sessions, dispatcher)
    keeper.build_all(config)
    return Runtime(
        live=live,
        store=store,
        provider=provider,
        channels=channels,
        keeper=keeper,
        delivery=delivery,
        sessions=sessions,
        scheduler=scheduler,
        router=router,
        pruner=InboundPruner(
            store, kept_for=lambda: live.current.retention, recordings=state_dir / "events"
        ),
        mcp=mcp,
        leases=leases,
        backend=backend,
        http=http,
        dispatcher=dispatcher,
        approvals=approvals,
        model_health=model_health,
        acp=acp,
        welcomes=welcomes,
        skills=skills,
    )


def acp_agents(config: BotdConfig, state_dir: Path) -> dict[str, AcpAgent]:
    """The ACP agents the config has (``agent.acp``, ``agent.acp_agents``) by the backend
    that names them; none started yet (empty: the model answers everywhere). The sessions of
    ``agent.acp`` are kept in ``acp/sessions.json`` under the state dir, those of a named
    agent in ``acp/agents/<name>/sessions.json``. Raises ``AcpUnavailable`` when the SDK
    (``botd[acp]``) is not installed."""
    sections = config.agent.acp_sections()
    if not sections:
        return {}
    if not installed("acp"):
        raise AcpUnavailable(
            "an ACP agent is configured but the ACP SDK is not installed: pip install 'botd[acp]'"
        )
    from .agent.acp.agent import AcpAgent  # the SDK, imported only when configured

    agents = {}
    for backend, section in sections.items():
        _, _, name = backend.partition(":")
        sessions = state_dir / "acp" / "agents" / name / "sessions.json" if name else None
        agents[backend] = AcpAgent(
            section,
            state_dir,
            key=acp_agent_key(backend),
            sessions_file=sessions,
            workspaces=config.agent.workspace,
        )
    return agents


async def tell(delivery: ChannelDelivery, target: Target, text: str) -> None:
    """Send ``text`` to ``target`` now (raises when it could not be sent)."""
    await delivery.send_text(target, text)


async def session_started(store: Store, conversation_key: str) -> float | None:
    """When ``conversation_key``'s current session began (a ``/new`` starts another): its
    buttons from before then are expired."""
    session = await store.stored_session(conversation_key)
    return None if session is None else session.created_at


async def has_conversation(store: ConversationLedger, conversation_key: str) -> bool:
    """Whether ``store`` has a session under ``conversation_key`` (a thread's context
    is fetched only for a conversation botd does not know yet)."""
    return await store.stored_session(conversation_key) is not None
