"""The channel registry: each channel described once, and found through entry points.

A ``ChannelSpec`` names a platform and brings all botd knows about it: the model of its
config sections, the factory that builds an adapter from a validated section, what must be
installed for its SDK, what its chat ids tell (``chat_kind``), how its conversation keys
(``conversation_key``) and messaging-tool targets (``targets``) are spelled, the doctor's live
probes of an account (``probe``) and whether it is the operator's own terminal (``local``).
The core names no platform: the wiring, the doctor and the subscriber's dedupe ask the specs.

A platform runs as one or more channel *instances* (``ChannelId``: a name and its platform),
one per ``channels.<name>`` section: ``channels.telegram`` is the instance ``telegram``, and
a section of another name with ``platform: telegram`` is another. The wiring builds each
through its platform's factory with a ``ChannelContext`` naming the instance
(``ChannelContext.channel``): the adapter gives that name to every message and target it
makes, and keys what it keeps per channel (offsets, leases, log lines) by it.

botd's own channels declare their specs in their packages (``botd.channels.<name>.spec``,
``SPEC``), found there without package metadata; a separate distribution (``botd-matrix``)
adds a channel without touching botd by registering its spec under the entry-point group
``botd.channels`` (``botd.config.channels.registrations``)::

    [project.entry-points."botd.channels"]
    matrix = "botd_matrix:SPEC"

The config validates sections against the registered models; the wiring builds adapters
through the factories. Probing for an SDK uses ``importlib.util.find_spec`` and imports
nothing, so ``botd check`` can name a missing extra without loading any SDK.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel

from ..chat import ChannelId
from ..config import ChannelSection
from ..config.channels import registrations
from ..config.extras import installed
from ..config.schema import ChannelsSection
from .base import ChannelAdapter, PlatformLink

if TYPE_CHECKING:
    import httpx

    from ..chat import ChatKindOf, ConversationKeyOf, InboundMessage, TargetForm
    from ..cluster.budget import SharedRate
    from ..cluster.leases import LeaseKeeper
    from ..http.routes import Routes
    from ..ops.doctor.checks import Check
    from ..store.protocols import CatchUpMarks, EditorSessions, Offsets

__all__ = [
    "ChannelContext",
    "ChannelSpec",
    "ChannelUnavailable",
    "InitQuestions",
    "Probe",
    "SecretQuestion",
    "channel_instances",
    "channel_specs",
    "load_channel_specs",
    "platform_specs",
    "target_forms",
]

log = logging.getLogger(__name__)

S = TypeVar("S", bound=ChannelSection)

Probe = Callable[["httpx.AsyncClient", S], Awaitable[list["Check"]]]
"""The doctor's live probe of a channel: read-only requests with the validated section's
credentials, one report line per finding (``botd.ops.doctor.checks``)."""


class ChannelUnavailable(RuntimeError):
    """A configured channel that cannot run here (its SDK is not installed, or it is unknown)."""


@dataclass(frozen=True, eq=False)
class ChannelContext:
    """What an adapter factory may use besides its section."""

    offsets: Offsets
    """Where a channel keeps its position in the platform's stream (Telegram's update offset)."""
    on_end_of_input: Callable[[], Awaitable[None]] | None = None
    """For a terminal channel: called when the operator closes its input (botd then stops)."""
    model: str | None = None
    """What answers, e.g. ``scripted provider (model scripted)``: a terminal channel's banner."""
    has_conversation: Callable[[str], Awaitable[bool]] | None = None
    """Whether botd has a conversation (a session) under a conversation key already."""
    admits: Callable[[InboundMessage], bool] | None = None
    """Whether the access policy lets a message through as a prompt (nothing recorded): for
    work an adapter does only for such a message (a Slack thread's fetch)."""
    held_back: Callable[[InboundMessage], Awaitable[object]] | None = None
    """Told of a message an adapter holds back, not handed to the sink, behind an earlier one
    the sink could not take (Telegram's polling keeps the order so): the router's
    ``held_back``, which tells its sender once, while the store refuses writes, that it
    could not be taken now. Nothing is recorded."""
    on_channel_down: Callable[[str, str], None] | None = None
    """Called with (channel, one-line reason) when a started channel stops working for good
    (its connection ended, its token was revoked); the daemon then restarts it with backoff."""

    leases: LeaseKeeper | None = None
    """This node's leases when it is one of several on a shared database (``store.backend:
    postgres``); None on a single node. An adapter whose platform allows one connection per
    account (or shard) runs it only while it holds that lease (``botd.cluster.holding``)."""

    shared_rate: SharedRate | None = None
    """Where the nodes sharing the store share each bot's platform rate (``botd.cluster.budget``:
    one budget per bot for the cluster); None on a single node (each bot's is in memory)."""

    channel: ChannelId | None = None
    """The channel instance being built (the wiring sets it for each adapter). None: the
    instance named after its platform (``instance_name``)."""

    http: Routes | None = None
    """Where an adapter serves HTTP (Telegram's webhook): routes added on botd's HTTP server
    at an address (``botd.http``); None where nothing can be served."""

    marks: CatchUpMarks | None = None
    """Where each chat's history was last taken from: what an adapter reads after a gap to
    take what it missed (``botd.channels.catch_up``); None: no catching up."""

    editor_sessions: EditorSessions | None = None
    """Where the ACP channel keeps its sessions and reads what a conversation said (to list
    and replay them after a restart); None: only what this process made is listed."""

    reasoning: Callable[[], str] | None = None
    """The config's ``agent.reasoning``, read live: whether a client that follows runs
    itself (an ACP editor) is shown the model's thinking, then and when it loads a session
    again (``base.thoughts_followed``); None: ``off``."""

    state_dir: Path | None = None
    """The daemon's state directory, where a channel keeps a file of its own (the ACP
    channel's socket); None where there is none (tests, ``botd doctor``)."""

    on_reachability: Callable[[str, str | None], None] | None = None
    """Called with (channel, error) when a running channel's platform could not be reached
    (its SDK retries by itself) and with (channel, None) once it answers again: see
    ``PlatformLink``."""

    def instance_name(self, platform: str) -> str:
        """The name of the channel instance being built: ``channel``'s, else ``platform``'s
        own (a context made without one, as a test or a plugin's own code may)."""
        return platform if self.channel is None else self.channel.name

    def link(self, channel: str) -> PlatformLink:
        """``on_reachability`` bound to ``channel`` (one that does nothing when nobody
        listens)."""
        report = self.on_reachability
        if report is None:
            return PlatformLink()

        def reachability(error: str | None) -> None:
            report(channel, error)

        return PlatformLink(reachability)

    def down_reporter(self, channel: str) -> Callable[[str], None] | None:
        """``on_channel_down`` bound to ``channel`` (None when nobody listens)."""
        report = self.on_channel_down
        if report is None:
            return None

        def down(reason: str) -> None:
            report(channel, reason)

        return down


@dataclass(frozen=True, slots=True)
class SecretQuestion:
    """A secret ``botd init`` refers to by an environment variable: the section's key, the
    variable it suggests, and what the secret is (``the token @BotFather gave``)."""

    key: str
    variable: str
    what: str


@dataclass(frozen=True, slots=True)
class InitQuestions:
    """What ``botd init`` asks for a channel and writes into its section. A section with a
    ``dm_policy`` is asked who may DM the bot too."""

    secrets: tuple[SecretQuestion, ...] = ()
    settings: tuple[tuple[str, str], ...] = ()
    """Keys written as they are: (key, YAML value)."""
    rank: int = 100
    """Where ``botd init`` lists the channel, lowest first; the first is the default answer."""


@dataclass(frozen=True, eq=False)
class ChannelSpec(Generic[S]):
    """One platform: its name, config section, adapter factory, SDK requirement and what its
    ids, conversation keys, targets and probes mean."""

    name: str
    """The platform's name: its own section's (``channels.<name>``) and what ``platform:``
    names in a section of another name."""
    section: type[S]
    factory: Callable[[S, ChannelContext], ChannelAdapter]
    """Builds the adapter; imports the adapter module (and so its SDK) only when called."""
    requirement: str | None = None
    """What provides the SDK, as pip takes it: ``botd[telegram]``."""
    modules: tuple[str, ...] = ()
    """Top-level modules the SDK provides, probed without importing them."""
    chat_kind: ChatKindOf | None = None
    """What a chat id tells of its chat (direct, with whom, or a group); None: ids tell
    nothing (every chat's kind is ``unknown``)."""
    conversation_key: ConversationKeyOf | None = None
    """The platform's one spelling of a conversation key from an instance's name, a chat and
    a thread (what its adapter gives every message); None: not told (a plugin's adapter
    spells its own)."""
    targets: TargetForm | None = None
    """How the platform's messaging-tool targets are spelled, for the dedupe of what the
    agent sent itself; None: targets compare as given."""
    probe: Probe[S] | None = None
    """The doctor's live probe (it imports what it needs when called); None: the doctor
    says it has none for this channel."""
    local: bool = False
    """The operator's own terminal (the console): nobody else reads it, and the logs share it."""
    init: InitQuestions | None = None
    """What ``botd init`` asks for the channel; None: ``botd init`` does not offer it."""

    def missing(self) -> str | None:
        """One sentence naming what to install before this channel can run; None if ready."""
        absent = [name for name in self.modules if not installed(name)]
        if not absent:
            return None
        install = self.requirement or absent[0]
        return (
            f"the {self.name} channel needs {install} ({', '.join(absent)} not installed): "
            f"pip install '{install}'"
        )

    def build(self, section: BaseModel, context: ChannelContext) -> ChannelAdapter:
        """The adapter of a validated section; ``ChannelUnavailable`` if its SDK is missing."""
        missing = self.missing()
        if missing is not None:
            raise ChannelUnavailable(missing)
        if not isinstance(section, self.section):
            raise TypeError(
                f"the {self.name} channel takes a {self.section.__name__}, "
                f"not a {type(section).__name__}"
            )
        return self.factory(section, context)


def load_channel_specs() -> dict[str, ChannelSpec[Any]]:
    """Every registered channel (botd's own, then the plugins'), by name.

    A plugin that fails to load is logged and left out: the config check reports it for a
    config that uses it.
    """
    specs: dict[str, ChannelSpec[Any]] = {}
    for point in registrations():
        try:
            spec = point.load()
        except Exception:
            log.exception("channel plugin %s (%s) cannot be loaded", point.name, point.value)
            continue
        if not isinstance(spec, ChannelSpec) or spec.name != point.name:
            log.error("channel plugin %s: %s is not its ChannelSpec", point.name, point.value)
            continue
        specs[point.name] = spec
    return specs


@functools.cache
def channel_specs() -> Mapping[str, ChannelSpec[Any]]:
    """``load_channel_specs()``, read once per process."""
    return load_channel_specs()


def channel_instances(channels: ChannelsSection) -> dict[str, ChannelId]:
    """Every channel ``channels`` configures as the instance it is (its name and platform),
    by name, in the file's order (``ChannelsSection.platforms``)."""
    return {name: ChannelId(name, platform) for name, platform in channels.platforms().items()}


def platform_specs(
    channels: ChannelsSection, specs: Mapping[str, ChannelSpec[Any]] | None = None
) -> dict[str, ChannelSpec[Any]]:
    """The spec of each configured channel's platform (from ``specs``, default: the
    registered ones), by channel name; a channel whose platform is not there is left out
    (the config check refuses it)."""
    registry = channel_specs() if specs is None else specs
    return {
        name: registry[platform]
        for name, platform in channels.platforms().items()
        if platform in registry
    }


def target_forms(
    specs: Mapping[str, ChannelSpec[Any]] | None = None, instances: Iterable[ChannelId] = ()
) -> dict[str, TargetForm]:
    """The target forms of ``specs`` (default: the registered platforms) by platform name (a
    tool named after a platform sends in its form), and of each of ``instances`` by its name
    (a channel's targets are spelled as its platform's)."""
    found = channel_specs() if specs is None else specs
    forms = {name: spec.targets for name, spec in found.items() if spec.targets is not None}
    for channel in instances:
        spec = found.get(channel.platform)
        if spec is not None and spec.targets is not None:
            forms[channel.name] = spec.targets
    return forms
