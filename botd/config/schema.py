"""The config file's models: every section, its defaults and its rules, as plain data.

Every section rejects unknown keys. ``channels`` holds one section per configured channel
instance, each validated by the model its platform registered (see ``botd.config.channels``):
a section named after a platform (``channels.telegram``) is that platform's instance of that
name; a section of any other name says which platform it runs on (``platform: telegram``), so
one platform can run several accounts (``ChannelsSection.platforms``). A chat platform's
section extends ``ChatChannelSection`` with its connection settings; ``agent.tools`` names
tools registered the same way (``botd.config.tools``). The runtime reads these models;
nothing here builds a runtime object.

It is long (some 1,000 lines) because it is the catalogue of the file, one small model per
section in the file's own order; split by section, the parts would import each other's base
model, id types and private validators, and a reader of one section would follow several
files to see what a key may hold.
"""

from __future__ import annotations

import difflib
import functools
import ipaddress
import re
import socket
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from .channels import ChannelEntry, registered_channels
from .cron import check_cron, parse_every, zone
from .problems import Loc
from .proxy import Proxy
from .secrets import OptionalSecret, Secret
from .tools import registered_tools

__all__ = [
    "CATCH_UP_AT_MOST",
    "CHAT_COMMANDS",
    "DEFAULT_TOOLS",
    "STATUSES",
    "WEB_CHANNEL",
    "AcpAgentName",
    "AcpAgentSection",
    "AgentBackend",
    "AgentSection",
    "ApprovalsSection",
    "BlockBreak",
    "BlockStreamingSection",
    "BotdConfig",
    "BreakPreference",
    "CatchUp",
    "CatchUpSection",
    "ChannelSection",
    "ChannelsSection",
    "ChatChannelSection",
    "ChunkMode",
    "CoalesceSection",
    "DeliverToSection",
    "DeliveryMode",
    "DmPolicy",
    "ExecSection",
    "FallbackModelSection",
    "GroupPolicy",
    "GroupSection",
    "HealthSection",
    "HeartbeatSection",
    "Id",
    "JobSection",
    "LoggingSection",
    "McpServerSection",
    "MediaSection",
    "MemorySection",
    "MessageTargetSection",
    "ModelSection",
    "QueueMode",
    "ReactionScope",
    "Reactions",
    "ReactionsSection",
    "ReasoningMode",
    "ResetMode",
    "ResetSection",
    "SchedulerSection",
    "Section",
    "SessionScope",
    "SpeechSection",
    "StoreBackendName",
    "StoreSection",
    "SystemPromptMode",
    "ToolProgressMode",
    "TopicSection",
    "TranscriptionSection",
    "TurnOverrides",
    "WebSection",
    "acp_agent_key",
    "channels_in",
    "configured_in",
    "is_loopback",
    "off_on",
]

DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-5"

QueueMode = Literal["steer", "followup", "collect", "interrupt"]
"""What a message arriving during a run does."""
DmPolicy = Literal["open", "allowlist", "pairing", "disabled"]
GroupPolicy = Literal["open", "allowlist", "disabled"]
DeliveryMode = Literal["blocks", "edit", "final", "stream"]
ReasoningMode = Literal["off", "on", "stream"]
ToolProgressMode = Literal["off", "status"]
BlockBreak = Literal["text_end", "message_end"]
ChunkMode = Literal["length", "newline"]
BreakPreference = Literal["paragraph", "newline", "sentence"]
ResetMode = Literal["off", "idle", "daily"]
ReactionScope = Literal["all", "dms", "groups", "mentions"]
"""Which messages show status reactions: every one, direct chats' only, groups' only, or
only those that mention the bot or reply to it."""
DEFAULT_TOOLS = ("message", "schedule")
"""The tools a run is offered when ``agent.tools`` is not set."""
AskIn = Literal["conversation", "approvers"]
SessionScope = Literal["group", "user"]
"""Whose conversation a group message addressed to the bot is: the group's one (``group``),
or its sender's own in that group (``user``; see ``botd.inbound.session_scope``)."""

CHANNELS_CONTEXT = "channels"
"""The validation-context key of the registered channels (default: the entry points)."""
CONFIGURED_CONTEXT = "configured"
"""The validation-context key of the channel names the file configures (its ``channels``
keys as written), which targets may name besides the registered platforms."""


def channels_in(context: Any) -> Mapping[str, ChannelEntry]:
    """The registered channels a validation runs against."""
    if isinstance(context, Mapping) and CHANNELS_CONTEXT in context:
        channels: Mapping[str, ChannelEntry] = context[CHANNELS_CONTEXT]
        return channels
    return registered_channels()


def configured_in(context: Any) -> frozenset[str]:
    """The channel names the file being validated configures (none when not told)."""
    if isinstance(context, Mapping) and CONFIGURED_CONTEXT in context:
        return frozenset(context[CONFIGURED_CONTEXT])
    return frozenset()


def _as_text(value: Any) -> Any:
    """Ids YAML reads as numbers (Telegram chat ids) are strings to botd."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def off_on(value: Any) -> Any:
    """YAML 1.1 reads a bare ``off``/``on`` as a boolean; these settings mean the word."""
    if value is False:
        return "off"
    if value is True:
        return "on"
    return value


def _check_timezone(name: str | None) -> str | None:
    if name is None:
        return None
    try:
        zone(name)
    except ValueError:
        raise ValueError(f"unknown time zone {name!r} (an IANA name like Europe/Berlin)") from None
    return name


Id = Annotated[str, BeforeValidator(_as_text)]
"""A chat, user or group id: numbers YAML read are taken as their text."""


def _http_url(value: str) -> str:
    if not re.match(r"https?://[^/\s]+", value):
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    return value


HttpUrl = Annotated[str, AfterValidator(_http_url)]
"""An ``http://`` or ``https://`` URL with a host, kept as written (an MCP server's ``url``,
a search provider's ``base_url``)."""


class Section(BaseModel):
    """A config section: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


# --------------------------------------------------------------------------- model and agent


class FallbackModelSection(Section):
    """One entry of ``model.fallbacks``: a model that answers when the ones before it fail.

    Retry waits and the idle timeout are the primary's unless set here.
    """

    provider: Literal["anthropic", "openai"]
    name: str = Field(min_length=1)
    api_key: OptionalSecret = None
    base_url: str | None = None
    max_retry_wait: float | None = Field(default=None, ge=0)
    idle_timeout: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _provider_needs(self) -> FallbackModelSection:
        if self.provider == "anthropic" and not self.api_key:
            raise ValueError("the anthropic provider needs api_key (e.g. ${ANTHROPIC_API_KEY})")
        return self


class ModelSection(Section):
    provider: Literal["anthropic", "openai", "scripted"] = "scripted"
    name: str | None = None
    api_key: OptionalSecret = None
    base_url: str | None = None
    max_tokens: int = Field(default=4096, ge=1)
    thinking: int | None = Field(default=None, ge=1)
    max_retry_wait: float = Field(default=60.0, ge=0)
    idle_timeout: float = Field(default=60.0, gt=0)
    """Seconds a model stream may stay silent before it is abandoned (and retried)."""
    script: str | None = None
    fallbacks: list[FallbackModelSection] = Field(default_factory=list)
    """Models that answer, in order, when the one before them gives up on a call."""
    proxy: Proxy = None
    """The proxy of every request to the model and its fallbacks: an ``http://``,
    ``https://``, ``socks5://`` or ``socks5h://`` URL, ``direct`` (none, whatever the
    environment says) or unset (the environment's ``HTTPS_PROXY`` and the like); see
    ``botd.config.proxy``."""

    @model_validator(mode="after")
    def _provider_needs(self) -> ModelSection:
        if self.provider == "anthropic" and not self.api_key:
            raise ValueError("the anthropic provider needs api_key (e.g. ${ANTHROPIC_API_KEY})")
        if self.provider == "openai" and not self.name:
            raise ValueError("the openai provider needs name (the model to ask for)")
        if self.script is not None and self.provider != "scripted":
            raise ValueError("script is only for the scripted provider")
        return self

    @model_validator(mode="after")
    def _no_model_twice(self) -> ModelSection:
        """A fallback that is the same model on the same server as the primary or an earlier
        fallback would only ask it again: a slip of the pen (a copied entry), refused."""
        seen = {(self.provider, self.model_name, self.base_url): "the primary model"}
        for index, fallback in enumerate(self.fallbacks):
            key = (fallback.provider, fallback.name, fallback.base_url)
            if key in seen:
                raise ValueError(
                    f"fallbacks[{index}] ({fallback.provider} {fallback.name}) repeats "
                    f"{seen[key]} on the same server, so it would only ask it again: remove "
                    "it, or give it another base_url"
                )
            seen[key] = f"fallbacks[{index}]"
        return self

    @property
    def model_name(self) -> str:
        if self.name:
            return self.name
        return DEFAULT_ANTHROPIC_MODEL if self.provider == "anthropic" else "scripted"


class ResetSection(Section):
    mode: Annotated[ResetMode, BeforeValidator(off_on)] = "off"
    idle_minutes: int = Field(default=0, ge=0)
    daily_hour: int = Field(default=4, ge=0, le=23)

    @model_validator(mode="after")
    def _idle_needs_minutes(self) -> ResetSection:
        if self.mode == "idle" and self.idle_minutes < 1:
            raise ValueError("mode idle needs idle_minutes of at least 1")
        return self


class CoalesceSection(Section):
    min_chars: int = Field(default=800, ge=1)
    max_chars: int = Field(default=1200, ge=1)
    idle_ms: float = Field(default=1000.0, ge=0)


class BlockStreamingSection(Section):
    break_: BlockBreak = Field(default="text_end", alias="break")
    min_chars: int = Field(default=800, ge=1)
    max_chars: int = Field(default=1200, ge=1)
    break_preference: BreakPreference = "paragraph"
    enabled: bool = True
    coalesce: CoalesceSection | None = None

    @model_validator(mode="after")
    def _sizes(self) -> BlockStreamingSection:
        if self.min_chars > self.max_chars:
            raise ValueError(f"min_chars ({self.min_chars}) is above max_chars ({self.max_chars})")
        return self


def _registered_channel(value: str, info: ValidationInfo) -> str:
    """``value`` when it names a registered platform or a channel the file configures."""
    known = sorted(set(channels_in(info.context)) | configured_in(info.context))
    if value not in known:
        close = difflib.get_close_matches(value, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"
        raise ValueError(f"unknown channel {value!r}{hint}")
    return value


def one_of(names: list[str]) -> str:
    """``'a', 'b' or 'c'``: the names a value may be, as a refusal lists them."""
    quoted = [repr(name) for name in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def _registered_tool(value: str) -> str:
    known = sorted(registered_tools())
    if value not in known:
        raise ValueError(f"expected {one_of(known)}, got {value!r}")
    return value


ToolName = Annotated[str, AfterValidator(_registered_tool)]
"""A tool ``agent.tools`` may list: one registered (``botd.config.tools``)."""


class MessageTargetSection(Section):
    """A chat the ``message`` tool may post to besides the run's own conversation: a mapping
    ``{channel, chat, thread}`` or the string ``channel/chat`` or ``channel/chat/thread``.
    Without ``thread`` it names the chat itself, not its threads."""

    channel: str
    chat: Id
    thread: Id | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        parts = [part.strip() for part in value.split("/")]
        if len(parts) not in (2, 3) or not all(parts):
            raise ValueError(
                f"{value!r} is not channel/chat or channel/chat/thread "
                "(or a mapping with channel, chat and thread)"
            )
        return dict(zip(("channel", "chat", "thread"), parts, strict=False))

    @field_validator("channel")
    @classmethod
    def _channel_registered(cls, value: str, info: ValidationInfo) -> str:
        return _registered_channel(value, info)

    def describe(self) -> str:
        """``channel/chat`` or ``channel/chat/thread``."""
        return "/".join(p for p in (self.channel, self.chat, self.thread) if p is not None)


MCP_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]+")
"""What an MCP server may be called: its tools are named ``mcp__<name>__<tool>``."""


def _server_name(name: str) -> str:
    if not MCP_SERVER_NAME.fullmatch(name):
        raise ValueError(f"MCP server name {name!r} may hold only letters, digits, '_' and '-'")
    return name


McpServerName = Annotated[str, AfterValidator(_server_name)]


ACP_AGENT_NAME = re.compile(r"[A-Za-z0-9_-]+")
"""What a named ACP agent (``agent.acp_agents``) may be called: ``backend: acp:<name>``."""


def _acp_agent_name(name: str) -> str:
    if not ACP_AGENT_NAME.fullmatch(name):
        raise ValueError(f"ACP agent name {name!r} may hold only letters, digits, '_' and '-'")
    return name


def _backend_spelled(value: str) -> str:
    if value in ("model", "acp"):
        return value
    prefix, _, name = value.partition(":")
    if prefix != "acp" or not ACP_AGENT_NAME.fullmatch(name):
        raise ValueError(
            f"{value!r} is not a backend: model, acp (agent.acp) or acp:<name> "
            "(one of agent.acp_agents)"
        )
    return value


AcpAgentName = Annotated[str, AfterValidator(_acp_agent_name)]
AgentBackend = Annotated[str, AfterValidator(_backend_spelled)]
"""What answers a chat: ``model`` (botd's own loop), ``acp`` (the agent ``agent.acp``) or
``acp:<name>`` (the agent ``agent.acp_agents.<name>``)."""


def acp_agent_key(backend: str) -> str:
    """The config key of the ACP agent an ``acp`` backend names (``agent.acp``, or
    ``agent.acp_agents.<name>``)."""
    _, _, name = backend.partition(":")
    return f"agent.acp_agents.{name}" if name else "agent.acp"


class McpServerSection(Section):
    """One MCP server whose tools the agent may use: a command botd runs and talks to over
    its stdin and stdout (``command``, ``args``, ``env``, ``cwd``), or a streamable-HTTP
    endpoint (``url``, ``headers``). ``env`` and ``headers`` values are secrets."""

    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, Secret] = Field(default_factory=dict)
    cwd: Path | None = None
    url: HttpUrl | None = None
    headers: dict[str, Secret] = Field(default_factory=dict)
    tools: list[str] | None = None
    """The server's tools to offer, by their own names (unset: all of them)."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds one call may take (unset: ``agent.tool_timeout``)."""

    @model_validator(mode="after")
    def _one_kind(self) -> McpServerSection:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                "give either command (a server botd runs) or url (a streamable-HTTP server)"
                + (", not both" if self.command is not None else "")
            )
        kind, other = ("url", ("args", "env", "cwd")) if self.url else ("command", ("headers",))
        wrong = [key for key in other if key in self.model_fields_set]
        if wrong:
            raise ValueError(f"{', '.join(wrong)} do(es) not go with {kind}")
        return self


class WebFetchSection(Section):
    """What the ``web_fetch`` tool (and media fetched from URLs) may reach and read."""

    allow_hosts: list[str] = Field(default_factory=list)
    """Host names (``*.example.com`` for subdomains), IP addresses or CIDR networks fetched even
    though they are not public (loopback, private, link-local): everything else non-public is
    refused."""
    max_bytes: int = Field(default=2_000_000, ge=1)
    max_chars: int = Field(default=20_000, ge=100)
    """Characters of text the tool hands the model (the rest is cut, and says so)."""
    timeout: float = Field(default=20.0, gt=0)


WebSearchProvider = Literal["searxng", "brave"]

BRAVE_SEARCH_URL = "https://api.search.brave.com"
"""The Brave Search API, the ``brave`` provider's ``base_url`` unless another is given."""


class WebSearchSection(Section):
    """``agent.web_search``: the search service the ``web_search`` tool asks.

    ``searxng``: a SearXNG instance's JSON API (its ``search.formats`` must list ``json``),
    ``base_url`` needed; ``brave``: the Brave Search API, ``api_key`` needed. The request
    goes through the same address check and size cap as ``web_fetch``."""

    provider: WebSearchProvider
    base_url: HttpUrl | None = None
    """Where the service answers (``searxng``: needed; ``brave``: its public API unless
    given)."""
    api_key: OptionalSecret = None
    """The provider's key (``brave``: its ``X-Subscription-Token``; needed)."""
    max_results: int = Field(default=5, ge=1, le=20)
    """Results the model gets per search."""
    allow_private: bool = False
    """Whether ``base_url``'s host may be a loopback or private address (a SearXNG on this
    machine or the local network). Off: only public addresses are asked, as ``web_fetch``
    does."""
    max_bytes: int = Field(default=1_000_000, ge=1)
    """The largest answer read from the service."""
    timeout: float = Field(default=15.0, gt=0)

    @model_validator(mode="after")
    def _what_the_provider_needs(self) -> WebSearchSection:
        if self.provider == "searxng" and self.base_url is None:
            raise ValueError("the searxng provider needs base_url (where SearXNG answers)")
        if self.provider == "brave" and not self.api_key:
            raise ValueError("the brave provider needs api_key (e.g. ${BRAVE_API_KEY})")
        return self


class ExecSection(Section):
    """What the ``exec`` tool's commands may take and reach: each runs in bubblewrap, the
    conversation's workspace its only writable place (docs/tools-and-media.md)."""

    network: bool = False
    """Whether commands reach the network (the host's, as botd does); off: none at all, not
    even loopback."""
    show_command: bool = False
    """Whether tool progress shows the command (secrets masked) instead of "a command"."""
    bwrap: str = Field(default="bwrap", min_length=1)
    """The bubblewrap program: a name looked up on ``PATH`` or a path."""
    timeout: float = Field(default=60.0, gt=0)
    """Seconds a command may run before it is killed with everything it started."""
    cpu_seconds: int = Field(default=60, ge=1)
    """CPU seconds each of its processes may use."""
    memory_mb: int = Field(default=1024, ge=16)
    """Megabytes of address space each of its processes may use."""
    max_processes: int = Field(default=64, ge=1)
    """Processes and threads it may run at once (not enforced when botd runs as root)."""
    max_file_mb: int = Field(default=100, ge=1)
    """The largest file it may write, in megabytes."""
    max_output_bytes: int = Field(default=16_000, ge=100)
    """Bytes of stdout, and as many of stderr, the model gets; the rest is cut and counted."""
    max_concurrent: int = Field(default=4, ge=1, le=64)
    """Commands run at once on this node, shared fairly between conversations: one holds at
    most all but one of them, and a call waits for a slot at most ``timeout`` seconds (then
    the model is told all are busy). Read at start."""


class WorkspaceSection(Section):
    """``agent.workspace``: where each conversation's files live (the file tools, ``exec``, an
    ACP agent) and how much the file tools read, write, list and search at a time
    (docs/tools-and-media.md)."""

    shared: bool = False
    """One workspace for every conversation (each chat sees the others' files); false: one
    per conversation."""
    root: Path | None = None
    """The directory the workspaces are made in (None: ``<state_dir>/workspaces``); a volume
    every node mounts (NFS) lets all nodes see the same files."""
    max_file_kb: int = Field(default=1024, ge=1)
    """The largest file ``read_file`` reads, ``write_file`` and ``edit_file`` write, in KiB."""
    max_list_entries: int = Field(default=200, ge=1)
    """Entries ``list_files`` names at most; it says how many more there were."""
    max_search_matches: int = Field(default=100, ge=1)
    """Matching lines ``search_files`` gives at most; it stops at the last."""
    max_search_files: int = Field(default=2000, ge=1)
    """Files ``search_files`` looks into at most (those larger than ``max_file_kb`` or not
    text are skipped, and counted)."""

    @field_validator("root")
    @classmethod
    def _expand_root_home(cls, value: Path | None) -> Path | None:
        return None if value is None else value.expanduser()


def _seconds(value: Any) -> Any:
    """A duration written as an interval (``10m``, ``1h30m``, ``90s``) or as seconds."""
    if isinstance(value, str):
        try:
            return parse_every(value).total_seconds()
        except ValueError:
            if not value.strip().replace(".", "", 1).isdigit():
                raise
    return value


class ApprovalsSection(Section):
    """``agent.approvals``: tool calls a person must approve before they run.

    A call to a listed tool posts "Approve <tool>(<arguments>)?" with Approve / Deny buttons
    and waits for a press; the model gets the tool's result, or "denied by <who>", or "not
    approved in time". Nothing is asked when ``tools`` is empty.
    """

    tools: list[str] = Field(default_factory=list)
    """The tools that need an approval: built-ins by name (``web_fetch``), MCP tools by their
    full name (``mcp__<server>__<tool>``), ``mcp__<server>__*`` for all of a server's."""
    approvers: list[Id] = Field(default_factory=list)
    """Who may decide: platform user ids as ``allow_from`` names them, optionally as
    ``<channel>:<id>`` to name a user of one channel only. Empty: anyone allowed to talk to
    the bot in the conversation."""
    timeout: Annotated[float, BeforeValidator(_seconds)] = Field(default=600.0, gt=0)
    """How long a request waits for a decision (``10m``, ``1h``, or seconds) before the
    model is told "not approved in time"."""
    ask_in: AskIn = "conversation"
    """Where the request is posted: ``conversation`` (the run's own chat) or ``approvers``
    (each approver's direct chat on the conversation's platform; needs ``approvers``)."""
    always_allow: list[str] = Field(default_factory=list)
    """Tools among ``tools`` whose requests offer a third button, *Always allow here*: the
    exact call (every argument, to the byte) then runs without asking in that chat until
    ``/allowed revoke``. Offered only when the whole call fits in the request and shows no
    masked secret. Empty (the default): every call is asked about."""

    @model_validator(mode="after")
    def _approvers_to_ask(self) -> ApprovalsSection:
        if self.ask_in == "approvers" and not self.approvers:
            raise ValueError("ask_in approvers needs approvers: the people to ask")
        unasked = [name for name in self.always_allow if name not in self.tools]
        if unasked:
            raise ValueError(
                f"always_allow names {', '.join(unasked)}, which tools does not list: "
                "only a call that is asked about can be allowed for good"
            )
        return self


class AcpAgentSection(Section):
    """``agent.acp`` (or one of ``agent.acp_agents``): an ACP agent that answers instead of
    botd's own model where the backend is ``acp`` (or ``acp:<name>``); botd is its client,
    docs/acp.md. A command botd starts once and talks to over its stdin and stdout. ``env``
    values are secrets (an API key)."""

    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, Secret] = Field(default_factory=dict)
    """Added to the few variables the agent inherits (``HOME``, ``PATH``, ``USER``…)."""
    cancel_wait: Annotated[float, BeforeValidator(_seconds)] = Field(default=30.0, gt=0)
    """How long ``/stop`` waits for the agent to end its turn as ``cancelled`` before the
    run is ended as cancelled all the same."""
    terminals: bool = False
    """Whether the agent may ask botd to run commands (ACP terminals) in the conversation's
    workspace. Not a sandbox: the commands reach the host's files and network as botd's
    user (docs/acp.md)."""


class MemorySection(Section):
    """``agent.memory``: how much the ``remember``, ``recall`` and ``forget`` tools keep
    (``botd.memory``), and how much of it each turn's system prompt is given."""

    max_items: int = Field(default=50, ge=1, le=1000)
    """Items kept per person (their direct chats) or per group; a full memory refuses more
    until one is forgotten."""
    max_chars: int = Field(default=500, ge=20, le=4000)
    """Characters one item may have."""
    prompt_items: int = Field(default=5, ge=0, le=50)
    """Items at most given with each turn's system prompt: those sharing the most words with
    the turn, the newest first among equals (0: none; ``recall`` still reads them all)."""
    prompt_chars: int = Field(default=1500, ge=0, le=20_000)
    """Characters at most of those items, together."""


class AgentSection(Section):
    system_prompt: str = ""
    tools: list[ToolName] = Field(default_factory=lambda: list(DEFAULT_TOOLS))
    """The tools the agent may use, each registered by its package (``botd.agent.tools``):
    ``message`` and ``schedule`` (both by default), and ``web_fetch``, ``web_search``,
    ``exec``, the memory tools, ``skill`` and the file tools (``read_file``, ``write_file``,
    ``edit_file``, ``list_files``, ``search_files``) when listed."""
    web_fetch: WebFetchSection = Field(default_factory=WebFetchSection)
    web_search: WebSearchSection | None = None
    """The ``web_search`` tool's service; needed when ``tools`` lists ``web_search``."""
    exec: ExecSection = Field(default_factory=ExecSection)
    """The ``exec`` tool's sandbox and budgets (used when ``tools`` lists ``exec``)."""
    message_targets: list[MessageTargetSection] = Field(default_factory=list)
    """Chats the ``message`` tool may post to besides the run's own conversation (the access
    policy still has to allow each)."""
    queue_mode: QueueMode = "collect"
    debounce: float = Field(default=0.0, ge=0, le=60)
    """Seconds a new message waits for more from its conversation before its run starts, so
    a thought typed as several quick messages gets one answer (0: off)."""
    max_concurrent_runs: int = Field(default=8, ge=1)
    max_turn_requests: int = Field(default=25, ge=1)
    tool_timeout: float = Field(default=120.0, gt=0)
    record_events: bool = False
    reasoning: Annotated[ReasoningMode, BeforeValidator(off_on)] = "off"
    """The model's reasoning in the chat: ``off``; ``on``, a message of its own when each of
    the model's messages ends; ``stream``, a message of its own as soon as it is complete,
    before its answer (above an ``edit`` preview; in ``final`` delivery as ``on``)."""
    tool_progress: Annotated[ToolProgressMode, BeforeValidator(off_on)] = "off"
    """Which tool runs, shown in the chat while one takes longer than a second: ``off``;
    ``status``, Slack's assistant thread status or a status line edited in place, removed
    when the run ends (``status`` is recommended; ``off`` keeps older configs as they were)."""
    enforce_final_tag: bool = False
    reset: ResetSection = Field(default_factory=ResetSection)
    block_streaming: BlockStreamingSection = Field(default_factory=BlockStreamingSection)
    mcp_servers: dict[McpServerName, McpServerSection] = Field(default_factory=dict)
    """MCP servers whose tools the agent may use, by name (tools ``mcp__<name>__<tool>``)."""
    approvals: ApprovalsSection = Field(default_factory=ApprovalsSection)
    backend: AgentBackend = "model"
    """What answers: ``model``, botd's own agent loop on ``model``; ``acp``, the ACP agent
    ``agent.acp`` names (Claude Code, Gemini CLI…), with botd as its client; ``acp:<name>``,
    the agent ``acp_agents.<name>``."""
    acp: AcpAgentSection | None = None
    acp_agents: dict[AcpAgentName, AcpAgentSection] = Field(default_factory=dict)
    """More ACP agents, by name, for chats that name theirs (``backend: acp:<name>``): two
    groups can be answered by two agents, each its own process."""
    memory: MemorySection = Field(default_factory=MemorySection)
    """What the memory tools keep (``remember``, ``recall``, ``forget``: listed in ``tools``)."""
    skills_dir: Path | None = None
    """A directory of skill folders in the Agent Skills format (``botd.config.skills``), read
    at start and on each reload; the ``skill`` tool (listed in ``tools``) loads them."""

    @field_validator("skills_dir")
    @classmethod
    def _expand_skills_home(cls, value: Path | None) -> Path | None:
        return None if value is None else value.expanduser()

    workspace: WorkspaceSection = Field(default_factory=WorkspaceSection)
    """Where conversations' files live and the file tools' caps (``read_file``,
    ``write_file``, ``edit_file``, ``list_files``, ``search_files``: listed in ``tools``)."""

    @model_validator(mode="after")
    def _web_search_has_a_service(self) -> AgentSection:
        if "web_search" in self.tools and self.web_search is None:
            raise ValueError(
                "tools lists web_search: set web_search (provider searxng or brave) too"
            )
        return self

    @model_validator(mode="after")
    def _skill_tool_has_skills(self) -> AgentSection:
        if "skill" in self.tools and self.skills_dir is None:
            raise ValueError("tools lists skill: set skills_dir (a directory of skills) too")
        if self.skills_dir is not None and "skill" not in self.tools:
            raise ValueError(
                "skills_dir is set but tools does not list skill, which loads them: add it"
            )
        return self

    def acp_sections(self) -> dict[str, AcpAgentSection]:
        """Every configured ACP agent's section, by the backend that names it (``acp``,
        ``acp:<name>``)."""
        sections = {} if self.acp is None else {"acp": self.acp}
        sections.update({f"acp:{name}": s for name, s in self.acp_agents.items()})
        return sections


# --------------------------------------------------------------------------- channels


MIN_TEXT_CHUNK_LIMIT = 100
"""The shortest ``text_chunk_limit``: below it a reply becomes a flood of messages."""


class ChannelSection(Section):
    """The base of every channel's section, a plugin's too: which platform it runs on, and
    how replies are cut into messages (delivery does the cutting, for every channel alike)."""

    platform: str | None = None
    """The registered platform this channel runs on. Needed by a section not named after its
    platform (``support: {platform: telegram, ...}``, a second Telegram bot); a section named
    after one is that platform's (``platform`` may repeat its name, nothing else)."""
    chunk_mode: ChunkMode = "length"
    """``length``: a reply is one message unless it outgrows the limit; ``newline``: one
    message per paragraph (per line on the console), each still cut at the limit."""
    text_chunk_limit: int | None = None
    """The longest message in characters, from ``MIN_TEXT_CHUNK_LIMIT`` up to the platform's
    own limit (None: the platform's limit)."""
    platform_text_limit: ClassVar[int | None] = None
    """The platform's own limit, which ``text_chunk_limit`` may not exceed (None: unknown)."""

    @field_validator("text_chunk_limit")
    @classmethod
    def _limit_in_range(cls, value: int | None) -> int | None:
        if value is None:
            return None
        if value < MIN_TEXT_CHUNK_LIMIT:
            raise ValueError(f"must be at least {MIN_TEXT_CHUNK_LIMIT} characters, got {value}")
        top = cls.platform_text_limit
        if top is not None and value > top:
            raise ValueError(f"must be at most {top}, the platform's own limit, got {value}")
        return value


STATUSES: tuple[str, ...] = ("taken", "done", "failed")
"""The statuses a message shows by reaction, in the order it goes through them."""


class ReactionsSection(Section):
    """``reactions``: the emoji a message the bot answers shows as its status. A key left
    out is the platform's default (``ChatChannelSection.default_reactions``)."""

    taken: str | None = Field(default=None, min_length=1)
    """Set when the message is accepted (it will be answered)."""
    done: str | None = Field(default=None, min_length=1)
    """Replaces ``taken`` once the answer is complete (its last part sent)."""
    failed: str | None = Field(default=None, min_length=1)
    """Replaces ``taken`` when the run failed (the user was told in one line)."""
    scope: ReactionScope | None = None
    """Which messages show them: ``all``, ``dms``, ``groups`` or ``mentions`` (only a
    message that mentions the bot or replies to it, in a direct chat too). Unset: the
    channel's (``all`` when it sets none)."""


def _reactions_branch(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """``true``/``false`` as they are, a mapping as a ``ReactionsSection``: a wrong key or
    value is named under its own key, not once per kind ``reactions`` may be."""
    if isinstance(value, bool | ReactionsSection):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(
            f"expected true, false or a mapping of taken, done, failed and scope, got {value!r}"
        )
    return ReactionsSection.model_validate(value)


Reactions = Annotated[ReactionsSection | bool, WrapValidator(_reactions_branch)]
"""``reactions:``: the emoji, ``true`` (the platform's defaults) or ``false`` (none)."""


SystemPromptMode = Literal["append", "replace"]
"""How a channel's, group's or topic's ``system_prompt`` meets the one beneath it."""


class TurnOverrides(Section):
    """What a chat's turns read that a channel, a group or a Telegram forum topic may set
    over the one beneath it (topic over group over channel over ``agent``); unset: the one
    beneath. ``botd.config.overrides`` resolves them."""

    system_prompt: str | None = None
    """Given to the model with every turn here, never written into the transcript: after
    the prompt beneath it (``system_prompt_mode: append``, the default) or instead of it
    (``replace``; ``system_prompt: ""`` with ``replace``: none at all)."""
    system_prompt_mode: SystemPromptMode | None = None
    """``append`` (unset: append) or ``replace``; only with ``system_prompt``."""
    model: str | None = None
    """The model asked first here: one of the configured ones (``model.name`` or a
    fallback's ``name``). A ``/model`` choice in the conversation still wins."""
    queue_mode: QueueMode | None = None
    """What a message arriving during a run does here (unset: the one beneath)."""
    skills: list[str] | None = None
    """The skills of ``agent.skills_dir`` offered here, by name (unset: the one beneath;
    ``[]``: none)."""

    @model_validator(mode="after")
    def _mode_needs_prompt(self) -> TurnOverrides:
        if self.system_prompt_mode is not None and self.system_prompt is None:
            raise ValueError("system_prompt_mode needs system_prompt here")
        return self


class TopicSection(TurnOverrides):
    """One forum topic of a Telegram group (``groups.<id>.topics.<thread id>``; the General
    topic is ``1``): what it sets over its group. Unset keys are the group's."""

    require_mention: bool | None = None
    allow_from: list[Id] | None = None
    """Senders allowed to address the bot in this topic (unset: the group's)."""
    enabled: bool | None = None
    """``false``: the bot ignores this topic (unset: the group's)."""
    tools: list[str] | None = None
    """The tools a run in this topic is offered (unset: the group's)."""
    backend: AgentBackend | None = None
    """What answers in this topic (unset: the group's)."""


class GroupSection(TurnOverrides):
    require_mention: bool | None = None
    """Answer only when addressed here (unset: the channel's ``require_mention``)."""
    allow_from: list[Id] = Field(default_factory=list)
    enabled: bool = True
    tools: list[str] | None = None
    """The tools a run in this group is offered: built-ins by name, MCP tools by full name,
    ``mcp__<server>__*`` for all of a server's (unset: every tool the agent has)."""
    reactions: Reactions | None = None
    """The status reactions in this group (unset: the channel's ``reactions``)."""
    delivery: DeliveryMode | None = None
    """How replies appear in this group (unset: the channel's ``delivery``). Only for a
    group named by its id: a reply's chat is not known to be a group under ``"*"``."""
    backend: AgentBackend | None = None
    """What answers in this group: ``model``, ``acp`` or ``acp:<name>`` (unset: the
    channel's ``backend``)."""
    link_previews: bool | None = None
    """Whether links in botd's messages here show a preview (unset: the channel's
    ``link_previews``). Only for a group named by its id, like ``delivery``."""
    topics: dict[Id, TopicSection] = Field(default_factory=dict)
    """Telegram forum topics of this group by thread id, each with its own settings over
    the group's (only on platforms with forum topics)."""
    session_scope: SessionScope | None = None
    """``user``: each sender has a conversation of their own here (history, queue, ``/new``,
    ``/model``, usage), the group's chatter shared by all; ``group``: one for the group
    (unset: ``"*"``'s, else the channel's ``session_scope``)."""


BUTTONS_KEPT_AT_MOST = 7 * 24 * 3600.0
"""The longest ``buttons_expire_after``: the inbound ids that record a message's buttons as
answered are pruned after a week (``DEFAULT_INBOUND_RETENTION_SECONDS``)."""


CATCH_UP_AT_MOST = 7 * 24 * 3600.0
"""The longest ``catch_up.max_age``: a message older than the inbound ids botd keeps (a
week) could be one it answered already."""


class CatchUpSection(Section):
    """``catch_up``: after a start (or a reconnect that could not resume), read the history
    of each chat botd has taken messages in since the last one it took there, and take what
    it missed (Discord, Slack). ``off`` (or ``0``) turns it off; a duration alone is
    ``max_age``."""

    max_age: Annotated[float, BeforeValidator(_seconds)] = Field(
        default=3600.0, ge=0, le=CATCH_UP_AT_MOST
    )
    """Seconds: a missed message older than this is not taken (it is counted in the log);
    0: no catch-up."""
    max_chats: int = Field(default=100, ge=1)
    """The most chats (and threads) read at one catch-up, the most recently active first."""


def _catch_up_shorthand(value: Any) -> Any:
    """``catch_up: off`` / ``false`` / ``0`` / ``30m``: the section those mean."""
    if value is False or value == "off":
        return {"max_age": 0}
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return {"max_age": value}
    return value


CatchUp = Annotated[CatchUpSection, BeforeValidator(_catch_up_shorthand)]
"""A platform section's ``catch_up`` key (Discord, Slack)."""


CHAT_COMMANDS = (
    "/new",
    "/reset",
    "/stop",
    "/status",
    "/model",
    "/usage",
    "/whoami",
    "/help",
    "/allowed",
    "/start",
    "/pair",
    "/memory",
    "/voice",
    "/forget",
)
"""Every chat command, as typed (lower case, without a bot name): what ``commands.owner_only``
may name. Kept here because the config imports nothing else of botd; ``botd.commands``, where
the commands are read, takes its list from here."""

OwnerOnlyIn = Literal["groups", "everywhere"]


class CommandsSection(Section):
    """A chat channel's ``commands``: which chat commands only its owners may use.

    Nothing is owner-only on a channel without owners (no ``owners`` and no
    ``admins_are_owners``): the commands stay open to everyone admitted, as before owners.
    """

    owner_only: list[str] = Field(default_factory=lambda: ["/model", "/usage"])
    """The commands only an owner may use (with or without the slash); anyone else gets one
    line saying they are for the bot's owners, and nothing is done."""
    owner_only_in: OwnerOnlyIn = "groups"
    """Where ``owner_only`` holds: ``groups`` (a direct chat with an admitted user is that
    user's own conversation, its model and usage theirs) or ``everywhere``."""

    @field_validator("owner_only")
    @classmethod
    def _commands_spelled(cls, commands: list[str]) -> list[str]:
        spelled = []
        for command in commands:
            word = "/" + command.strip().lower().removeprefix("/")
            if word not in CHAT_COMMANDS:
                known = ", ".join(CHAT_COMMANDS)
                raise ValueError(f"{command!r} is not one of botd's chat commands ({known})")
            spelled.append(word)
        return spelled


class ChatChannelSection(ChannelSection, TurnOverrides):
    """A chat platform's section: who may talk to the bot, how replies appear, which account.

    ``account`` names the bot account the section connects (``default`` unless set); it
    keeps the stored state of two accounts of one platform apart. Its ``system_prompt``,
    ``model`` and ``queue_mode`` (``TurnOverrides``) are set over ``agent``'s for every
    chat of the account; each group's and topic's over those.
    """

    account: str = Field(default="default", min_length=1)
    dm_policy: DmPolicy = "pairing"
    allow_from: list[Id] = Field(default_factory=list)
    group_policy: GroupPolicy = "allowlist"
    groups: dict[Id, GroupSection] = Field(default_factory=dict)
    require_mention: bool = True
    delivery: DeliveryMode = "blocks"
    """How replies appear: ``blocks``, ``edit``, ``final``, or ``stream`` (the platform's
    native streaming where it has it, else as ``edit``; see ``botd.delivery.previews``)."""
    delivery_retry_for: float = Field(default=300.0, ge=0)
    backend: AgentBackend | None = None
    """What answers on this channel: ``model``, ``acp`` or ``acp:<name>`` (unset:
    ``agent.backend``); a group's ``backend`` overrides it there."""
    mention_patterns: list[str] = Field(default_factory=list)
    reactions: Reactions = True
    """Status reactions on the messages the bot answers: ``taken`` when one is accepted,
    replaced by ``done`` or ``failed`` when its answer is complete or failed (none when a
    ``/stop`` cut it); ``false``: none."""
    default_reactions: ClassVar[tuple[str, str, str]] = ("👀", "✅", "❌")
    """The platform's taken, done and failed emoji when the config names none."""
    link_previews: bool = True
    """Whether links in the messages botd posts show a preview (Telegram's link preview,
    Slack's unfurls, Discord's embeds); ``false``: none, in every chat of the channel but
    the groups that set their own."""
    proxy: Proxy = None
    """The proxy of this account's connections to its platform (API calls, the long poll,
    Socket Mode, the gateway, file downloads): a URL, ``direct`` or unset (the
    environment's); see ``botd.config.proxy``."""

    @classmethod
    def reaction_refusal(cls, emoji: str) -> str | None:
        """Why the platform cannot set ``emoji`` as a reaction (None: it can). A plugin's
        platform overrides this; the default takes any emoji."""
        return None

    def status_reactions(self, group: str | None = None) -> tuple[str, str, str] | None:
        """The taken, done and failed emoji in ``group`` (None: a direct chat), or None when
        reactions are off there. A group's ``reactions`` replaces the channel's; keys it
        leaves out are the channel's (or the platform's defaults)."""
        own = self.reactions
        channel: tuple[str, str, str] | None = None
        if own is True:
            channel = self.default_reactions
        elif isinstance(own, ReactionsSection):
            channel = _filled(own, self.default_reactions)
        rule = None if group is None else self.groups.get(group)
        if rule is None or rule.reactions is None:
            return channel
        if rule.reactions is False:
            return None
        base = channel or self.default_reactions
        return base if rule.reactions is True else _filled(rule.reactions, base)

    def reaction_scope(self, group: str | None = None) -> ReactionScope:
        """Which messages show status reactions in ``group`` (None: a direct chat): the
        group's ``reactions.scope`` if it sets one, else the channel's, else ``all``."""
        rule = None if group is None else self.groups.get(group)
        for reactions in (None if rule is None else rule.reactions, self.reactions):
            if isinstance(reactions, ReactionsSection) and reactions.scope is not None:
                return reactions.scope
        return "all"

    def reactions_for(
        self, group: str | None, *, mentions_bot: bool
    ) -> tuple[str, str, str] | None:
        """The status reactions a message in ``group`` (None: a direct chat) gets, or None:
        reactions are off there, or its ``reactions.scope`` leaves the message out."""
        scope = self.reaction_scope(group)
        if scope == "dms" and group is not None:
            return None
        if scope == "groups" and group is None:
            return None
        if scope == "mentions" and not mentions_bot:
            return None
        return self.status_reactions(group)

    def group_link_previews(self) -> dict[str, bool]:
        """The groups that set their own ``link_previews``, by id (every other chat: the
        channel's ``link_previews``)."""
        return {
            chat: rule.link_previews
            for chat, rule in self.groups.items()
            if rule.link_previews is not None
        }

    @model_validator(mode="after")
    def _reactions_settable(self) -> ChatChannelSection:
        """Refuse an emoji the platform cannot set, under its own key and line."""
        errors: list[InitErrorDetails] = []
        places: list[tuple[Loc, Reactions | None]] = [(("reactions",), self.reactions)]
        places += [(("groups", gid, "reactions"), g.reactions) for gid, g in self.groups.items()]
        for loc, reactions in places:
            if not isinstance(reactions, ReactionsSection):
                continue
            for status in STATUSES:
                emoji = getattr(reactions, status)
                refusal = None if emoji is None else self.reaction_refusal(emoji)
                if refusal is not None:
                    error = PydanticCustomError("value_error", "{refusal}", {"refusal": refusal})
                    errors.append(InitErrorDetails(type=error, loc=(*loc, status), input=emoji))
        if errors:
            # Raised as a ValidationError so that each problem keeps its own key (and line).
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    buttons_expire_after: float = Field(default=86400.0, gt=0, le=BUTTONS_KEPT_AT_MOST)
    """Seconds the buttons of a message can be pressed after it was posted (a press later,
    or after a ``/new`` since, is answered "These buttons have expired."). At most 7 days:
    the ids that make a message's buttons count once are kept that long."""
    session_scope: SessionScope = "group"
    """The groups' default ``session_scope`` (a group's own, or ``"*"``'s, wins there);
    direct chats are one conversation per person whatever it says."""

    def group_session_scope(self, group: str) -> SessionScope:
        """``group``'s ``session_scope``: its own, else the channel's; a group not listed
        takes ``"*"``'s. A listed group takes nothing from ``"*"``, as for every other key
        (``botd.config.overrides``)."""
        rule = self.groups.get(group) or self.groups.get("*")
        if rule is not None and rule.session_scope is not None:
            return rule.session_scope
        return self.session_scope

    @field_validator("groups")
    @classmethod
    def _by_group_id_only(cls, groups: dict[str, GroupSection]) -> dict[str, GroupSection]:
        every = groups.get("*")
        for key in ("delivery", "link_previews"):
            if every is not None and getattr(every, key) is not None:
                raise ValueError(
                    f'{key} cannot be set for "*" (every group not listed): set it for each '
                    f"group by its id, or the channel's {key} for all its chats"
                )
        return groups

    @field_validator("mention_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"bad regular expression {pattern!r}: {exc}") from None
        return patterns

    forum_topics: ClassVar[bool] = False
    """Whether the platform's groups have forum topics (``groups.<id>.topics``: Telegram's)."""

    @model_validator(mode="after")
    def _topics_where_the_platform_has_them(self) -> ChatChannelSection:
        """Refuse ``topics`` on a platform without forum topics, under its own key (and line)."""
        if self.forum_topics:
            return self
        errors: list[InitErrorDetails] = []
        for gid, group in self.groups.items():
            if group.topics:
                error = PydanticCustomError(
                    "value_error",
                    "this platform has no forum topics: a thread here takes its group's settings",
                    {},
                )
                errors.append(
                    InitErrorDetails(type=error, loc=("groups", gid, "topics"), input=group.topics)
                )
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    owners: list[Id] = Field(default_factory=list)
    """The bot's owners on this channel: user ids in the platform's form (as ``allow_from``
    takes them). Owners may use the ``commands.owner_only`` commands, approve a pairing code
    in the chat (``/pair <code>``) and, when ``agent.approvals`` names no approvers, decide
    tool approvals."""
    admins_are_owners: bool = False
    """Whether the chat's own admins count as owners too: Telegram's chat administrators
    (in that group), Slack's workspace admins and owners (everywhere), Discord's members
    with Manage Server and the server's owner (in that server). Looked up when needed and
    remembered for a while; a failed lookup counts as "not an owner" (logged)."""
    commands: CommandsSection = Field(default_factory=lambda: CommandsSection())
    """Which chat commands only the owners may use."""


def _filled(reactions: ReactionsSection, defaults: tuple[str, str, str]) -> tuple[str, str, str]:
    taken, done, failed = defaults
    return (reactions.taken or taken, reactions.done or done, reactions.failed or failed)


@functools.lru_cache(maxsize=64)
def _sections_model(fields: tuple[tuple[str, type[BaseModel]], ...]) -> type[BaseModel]:
    """A model with one required field per configured channel, of the model ``fields`` name.

    Fields are ``c0``, ``c1``, ... aliased to the channel names, so a channel may have any
    name, even one a pydantic model reserves (``schema``, ``copy``).
    """
    definitions: dict[str, Any] = {
        f"c{index}": (section, Field(alias=name)) for index, (name, section) in enumerate(fields)
    }
    return create_model("channels", __config__=ConfigDict(extra="forbid"), **definitions)


class ChannelsSection(BaseModel):
    """``channels``: one section per configured channel instance, each validated by the model
    its platform registered. A section left empty (``telegram:`` alone) is not configured."""

    model_config = ConfigDict(extra="allow", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _validate_sections(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, Mapping):
            return data  # pydantic reports "expected a mapping"
        registered = channels_in(info.context)
        present = {str(name): value for name, value in data.items() if value is not None}
        fields = tuple(
            (name, _section_model(name, value, registered)) for name, value in present.items()
        )
        # Errors raised here keep their paths (channels.<name>.<key>).
        validated = _sections_model(fields).model_validate(present, context=info.context)
        return {name: getattr(validated, f"c{index}") for index, (name, _) in enumerate(fields)}

    def sections(self) -> dict[str, BaseModel]:
        """Every configured channel's section, in the file's order."""
        return dict(self.__pydantic_extra__ or {})

    def section(self, name: str) -> BaseModel | None:
        return self.sections().get(name)

    def enabled(self) -> list[str]:
        """The channels to run: configured, and not switched off with ``enabled: false``."""
        return [
            name
            for name, section in self.sections().items()
            if getattr(section, "enabled", True) is not False
        ]

    def platforms(self) -> dict[str, str]:
        """Each configured channel's platform by the channel's name, in the file's order:
        the one place a channel instance's name is mapped to its platform (the runtime
        reads it as ``ChannelId``s: ``botd.wiring.channel_instances``)."""
        return {
            name: getattr(section, "platform", None) or name
            for name, section in self.sections().items()
        }


def _section_model(
    name: str, value: Any, registered: Mapping[str, ChannelEntry]
) -> type[BaseModel]:
    """The model of section ``channels.<name>``: its platform's (the one it is named after,
    or the one its ``platform`` key names), or one refusing its ``platform`` key with why."""
    said = value.get("platform") if isinstance(value, Mapping) else None
    known = sorted(name for name in registered if name != WEB_CHANNEL)  # web.enabled's own
    if name in registered:
        if said is None or said == name:
            return registered[name].section
        return _platform_refused(
            f"a section named {name!r} is the {name} platform's: give a channel of "
            f"platform {said!r} another name"
        )
    if said is None:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return _platform_refused(
            f"required key is missing: {name!r} is no platform's name{hint}, so the section "
            f"says which platform it runs on (one of {', '.join(known)})"
        )
    if isinstance(said, str) and said in registered:
        return registered[said].section
    close = difflib.get_close_matches(str(said), known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"
    return _platform_refused(f"unknown platform {said!r}{hint}")


@functools.lru_cache(maxsize=64)
def _platform_refused(why: str) -> type[BaseModel]:
    """A section model whose ``platform`` key is refused with ``why`` (missing or not), under
    that key and its line; the section's other keys are not read (no model would fit them)."""

    def refuse(value: Any) -> Any:
        raise ValueError(why)

    platform: Any = (Annotated[Any, BeforeValidator(refuse)], Field(None, validate_default=True))
    return create_model("refused_platform", __config__=ConfigDict(extra="allow"), platform=platform)


# --------------------------------------------------------------------------- scheduler


class DeliverToSection(Section):
    channel: str
    chat: Id
    thread: Id | None = None

    @field_validator("channel")
    @classmethod
    def _channel_registered(cls, value: str, info: ValidationInfo) -> str:
        return _registered_channel(value, info)


DEFAULT_ACK_MAX_CHARS = 300


class HeartbeatSection(Section):
    """A job's ``heartbeat``: ``true`` for the defaults, or a mapping of them."""

    ack_max_chars: int = Field(default=DEFAULT_ACK_MAX_CHARS, ge=0, le=4000)
    """A reply that is ``HEARTBEAT_OK`` with a remark of at most this many characters is an
    acknowledgement too, and is not posted (models like to add "all quiet")."""


def _heartbeat_switch(value: Any) -> Any:
    """``heartbeat: true`` is a heartbeat check with the defaults; ``false``, an ordinary job."""
    if value is True:
        return {}
    if value is False:
        return None
    if value is None or isinstance(value, Mapping):
        return value
    raise ValueError(f"expected true, false or a mapping with ack_max_chars, got {value!r}")


class JobSection(Section):
    id: Id
    cron: str | None = None
    every: str | None = None
    at: datetime | None = None
    timezone: str | None = None
    prompt: str
    conversation: str | None = None
    deliver_to: DeliverToSection
    heartbeat: Annotated[HeartbeatSection | None, BeforeValidator(_heartbeat_switch)] = None
    """A heartbeat check: the prompt asks the agent to answer ``HEARTBEAT_OK`` when nothing
    needs attention, and such an answer is not posted (None: an ordinary job)."""

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
            check_cron(value)
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


class SchedulerSection(Section):
    timezone: str | None = None
    jobs: list[JobSection] = Field(default_factory=list)

    @field_validator("timezone")
    @classmethod
    def _timezone_exists(cls, value: str | None) -> str | None:
        return _check_timezone(value)


# --------------------------------------------------------------------------- operations


# --------------------------------------------------------------------------- media


class TranscriptionSection(Section):
    """Where voice notes and audio files are turned into text."""

    provider: Literal["openai"] = "openai"
    """An OpenAI-compatible ``POST {base_url}/audio/transcriptions``."""
    base_url: str = "https://api.openai.com/v1"
    api_key: Secret
    model: str = "whisper-1"
    timeout: float = Field(default=60.0, gt=0)


SpeechFormat = Literal["opus", "mp3"]
"""The audio a voice reply is made in: Ogg Opus (what a Telegram voice note is) or MP3."""


class SpeechSection(Section):
    """Where voice replies are spoken: ``[[tts]]`` in an answer, or ``/voice on``."""

    provider: Literal["openai"] = "openai"
    """An OpenAI-compatible ``POST {base_url}/audio/speech``."""
    base_url: str = "https://api.openai.com/v1"
    api_key: Secret
    model: str = "gpt-4o-mini-tts"
    voice: str = "alloy"
    format: SpeechFormat = "opus"
    max_chars: int = Field(default=1500, ge=1, le=100_000)
    """The longest answer spoken; a longer one is sent as text only (a clipped recording
    would pass for the whole answer)."""
    timeout: float = Field(default=60.0, gt=0)


class MediaSection(Section):
    """Files in and out: the size limit, how audio is read, where local files may come from."""

    max_bytes: int = Field(default=20 * 1024 * 1024, ge=1)
    """The largest file read, whether users send it (declared size before the download, actual
    bytes during it) or the agent names it for upload (fetched or local)."""
    transcription: TranscriptionSection | None = None
    """Not set: voice notes and audio are answered with a line saying they cannot be read."""
    speech: SpeechSection | None = None
    """Not set: answers are never spoken (``/voice on`` says so in one line)."""
    read_timeout: float = Field(default=30.0, gt=0, le=3600)
    """Seconds reading one PDF or image may take (in a worker process of its own, which may
    use as much CPU time); past them the worker is killed and the user told in one line."""
    outbound_dir: Path | None = None
    """Where local files the agent names (``MEDIA: /path``) may come from; None: nowhere.
    ``botd check`` refuses one that is or holds a place with secrets (``config.paths``)."""

    @field_validator("outbound_dir")
    @classmethod
    def _expand_outbound_home(cls, value: Path | None) -> Path | None:
        return None if value is None else value.expanduser()


class LoggingSection(Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["text", "json"] = "text"

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class HealthSection(Section):
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(default=8480, ge=1, le=65535)
    down_after: float = Field(default=30.0, ge=0)
    """Seconds a platform (or the model API) may fail to answer before ``/healthz`` shows it
    down: shorter outages are the SDKs' reconnects."""
    stuck_after: float = Field(default=600.0, gt=0)
    """Seconds the oldest accepted message may wait for its answer before ``/healthz`` shows
    the inbox stuck."""


# --------------------------------------------------------------------------- web (issue 39)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class WebSection(Section):
    """The web page (``botd.web``): status, conversations, approvals and chat on botd's HTTP
    server (the chat is the ``web`` channel, ``botd.channels.web``). Off loopback it needs
    ``token``."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=8480, ge=1, le=65535)
    """The health endpoint's default port: one server when both are at the same address."""
    token: OptionalSecret = None
    """What a browser or client shows to be let in (``Authorization: Bearer``, or the page's
    login); required when ``host`` is not loopback."""

    openai_api: bool = False
    """Serve ``POST /v1/chat/completions``: the agent answers in a ``web`` conversation."""

    @model_validator(mode="after")
    def _token_off_loopback(self) -> WebSection:
        if self.enabled and not is_loopback(self.host) and self.token is None:
            raise ValueError(
                f"web.host {self.host} is not loopback: set web.token (e.g. ${{BOTD_WEB_TOKEN}})"
                " or bind 127.0.0.1"
            )
        return self


WEB_CHANNEL = "web"
"""The channel ``web.enabled`` runs (``botd.channels.web``); never a ``channels:`` section."""


def _web_channel(data: Any, info: ValidationInfo) -> Any:
    """``data`` with the ``web`` channel's section put under ``channels`` when ``web.enabled``
    (the page's chat is a channel like any other from there on); a ``channels.web`` written
    in the file is refused, under its own key: ``web.enabled`` alone turns it on."""
    if not isinstance(data, Mapping):
        return data
    channels = data.get("channels")
    if isinstance(channels, Mapping) and channels.get(WEB_CHANNEL) is not None:
        error = PydanticCustomError(
            "value_error", "the web chat is not set here: it runs when web.enabled is true", {}
        )
        details = InitErrorDetails(
            type=error, loc=("channels", WEB_CHANNEL), input=channels[WEB_CHANNEL]
        )
        raise ValidationError.from_exception_data("BotdConfig", [details])
    web = data.get("web")
    if not (isinstance(web, Mapping) and web.get("enabled") is True):
        return data
    if WEB_CHANNEL not in channels_in(info.context):
        return data
    taken = dict(channels) if isinstance(channels, Mapping) else {}
    return {**data, "channels": {**taken, WEB_CHANNEL: {"enabled": True}}}


StoreBackendName = Literal["sqlite", "postgres"]
"""The backends ``store.backend`` may name (``botd.store.backends``: what each one is)."""


def _host_name() -> str:
    return socket.gethostname()


class StoreSection(Section):
    """Where botd keeps its state: SQLite in ``state_dir`` (one node), or PostgreSQL (the
    ``postgres`` extra), which several nodes can share."""

    backend: StoreBackendName = "sqlite"
    dsn: OptionalSecret = None
    """The PostgreSQL connection string (``postgresql://user:password@host:5432/db``), read
    from the environment (``${BOTD_DATABASE_URL}``); needed by the postgres backend only."""
    node_id: str = Field(default_factory=_host_name, min_length=1)
    """This node's name among the nodes sharing the database (the host name by default)."""
    lease_ttl: float = Field(default=15.0, gt=0)
    """Seconds a node's claim on shared work (a conversation, a poller) lasts unrenewed."""

    @model_validator(mode="after")
    def _dsn_for_postgres(self) -> StoreSection:
        if self.backend == "postgres" and self.dsn is None:
            raise ValueError("the postgres backend needs dsn (e.g. ${BOTD_DATABASE_URL})")
        return self


class BotdConfig(Section):
    """The whole validated config file."""

    state_dir: Path = Path("./var")
    """Relative to the config file's directory; ``~`` is the home directory (``config.paths``)."""
    shutdown_grace: float = Field(default=10.0, ge=0)
    """Seconds running answers get to finish when botd stops; what still runs is cancelled."""
    model: ModelSection = Field(default_factory=ModelSection)
    agent: AgentSection = Field(default_factory=AgentSection)
    channels: ChannelsSection = Field(default_factory=ChannelsSection)
    scheduler: SchedulerSection = Field(default_factory=SchedulerSection)
    logging: LoggingSection = Field(default_factory=LoggingSection)
    health: HealthSection = Field(default_factory=HealthSection)
    web: WebSection = Field(default_factory=WebSection)
    media: MediaSection = Field(default_factory=MediaSection)
    store: StoreSection = Field(default_factory=StoreSection)
    retention: int | None = Field(default=None, ge=1)
    """Days botd keeps people's words: transcript turns, kept chatter, memories and event
    recordings older than this are pruned daily (``botd.store.pruner``); null keeps them."""

    @model_validator(mode="before")
    @classmethod
    def _web_chat(cls, data: Any, info: ValidationInfo) -> Any:
        return _web_channel(data, info)

    @field_validator("state_dir")
    @classmethod
    def _expand_state_home(cls, value: Path) -> Path:
        return value.expanduser()

    def backends(self) -> dict[Loc, str]:
        """Every backend the config names, by its key: ``agent.backend``, each chat channel's
        and each of its groups' and topics' that is set."""
        named: dict[Loc, str] = {("agent", "backend"): self.agent.backend}
        for name, section in self.channels.sections().items():
            if not isinstance(section, ChatChannelSection):
                continue
            if section.backend is not None:
                named[("channels", name, "backend")] = section.backend
            for group, rule in section.groups.items():
                if rule.backend is not None:
                    named[("channels", name, "groups", group, "backend")] = rule.backend
                for topic, own in rule.topics.items():
                    if own.backend is not None:
                        loc = ("channels", name, "groups", group, "topics", topic, "backend")
                        named[loc] = own.backend
        return named

    @model_validator(mode="after")
    def _acp_agent_for_every_acp_backend(self) -> BotdConfig:
        """Refuse a backend naming an ACP agent the config does not have, under its own key
        (and line)."""
        sections = self.agent.acp_sections()
        errors: list[InitErrorDetails] = []
        for loc, backend in self.backends().items():
            if backend == "model" or backend in sections:
                continue
            error = PydanticCustomError(
                "value_error",
                "{backend} names the ACP agent {key}, which is not set",
                {"backend": backend, "key": acp_agent_key(backend)},
            )
            errors.append(InitErrorDetails(type=error, loc=loc, input=backend))
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    def model_names(self) -> list[str]:
        """The configured models' names: the primary, then its fallbacks in order."""
        return [self.model.model_name, *(f.name for f in self.model.fallbacks)]

    def override_places(self) -> list[tuple[Loc, TurnOverrides]]:
        """Every chat channel, group and topic section (what may set ``TurnOverrides``),
        each with its key."""
        places: list[tuple[Loc, TurnOverrides]] = []
        for name, section in self.channels.sections().items():
            if not isinstance(section, ChatChannelSection):
                continue
            places.append((("channels", name), section))
            for gid, group in section.groups.items():
                places.append((("channels", name, "groups", gid), group))
                places += [
                    (("channels", name, "groups", gid, "topics", tid), topic)
                    for tid, topic in group.topics.items()
                ]
        return places

    def models_named(self) -> dict[Loc, str]:
        """Every ``model`` a chat channel, a group or a topic sets, by its key."""
        return {
            (*loc, "model"): o.model for loc, o in self.override_places() if o.model is not None
        }

    @model_validator(mode="after")
    def _models_configured(self) -> BotdConfig:
        """Refuse a channel's, group's or topic's ``model`` that is not a configured one,
        under its own key (and line)."""
        known = self.model_names()
        errors: list[InitErrorDetails] = []
        for loc, model in self.models_named().items():
            if model in known:
                continue
            close = difflib.get_close_matches(model, known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            why = (
                f"unknown model {model!r}: not one of the configured models "
                f"({', '.join(known)}: model.name and model.fallbacks' names){hint}"
            )
            error = PydanticCustomError("value_error", "{why}", {"why": why})
            errors.append(InitErrorDetails(type=error, loc=loc, input=model))
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    def summary(self) -> str:
        channels = ", ".join(self.channels.enabled()) or "none"
        jobs = len(self.scheduler.jobs)
        return (
            f"channels: {channels}; provider: {self.model.provider} ({self.model.model_name}); "
            f"{jobs} scheduled job{'' if jobs == 1 else 's'}"
        )
