"""The Discord channel adapter, on discord.py (imported only in this package).

One ``DiscordAdapter`` is one bot account on the gateway. This module keeps its connection
lifecycle (log in, READY, reconnects, shards under leases, stop) and composes the parts it
hands each ``ChannelAdapter`` call to: ``inbound`` (``DiscordInbound``: messages, edits,
slash commands and button presses turned into ``InboundMessage``s, each with its id as the
dedupe key) and ``outbound`` (``DiscordOutbound``: sends split under 2000 characters and 17
lines, mentions limited to users, a reply piece's key as each message's ``nonce``, every
call in its turn in the bot's budget, answers first: ``budget``); Discord's refusals become
``DiscordError`` (``errors``).

The adapter is the channel instance it is built as (``channel``: ``discord``, or another
section's name): its messages and targets carry that name, and its conversation keys start
with it (``discord_conversation_key``: ``<channel>:dm:<user>``, ``<channel>:<channel id>``).

``api_base_url``/``gateway_url`` (a REST or gateway proxy, a test's fake) apply to this
adapter's clients alone (``routes``): discord.py's process-wide ``Route.BASE`` and
``DiscordWebSocket.DEFAULT_GATEWAY`` are never written, so two Discord bots in one process
can talk to two places.

A new gateway session (not a resumed one) reads what its chats received while no session
was open, and hands it on before their live messages (``history``, ``catching_up``).

discord.py reconnects by itself: a gateway connection that ended or could not be made again
tells ``link`` (a ``PlatformLink``) that Discord is unreachable, READY or RESUMED that it
answers again. A connection discord.py gave up on ends the channel (``on_down``).

Shards (``shard_count`` above 1, or several nodes: ``leases``): one client only logs in and
does every REST call (sends, edits, the command menu), and each gateway shard is a client of
its own (``shard_id``/``shard_count``) run while this node holds the lease
``<channel>:<account>:<shard>`` (``botd.cluster.holding``); a lost lease closes that shard's
session alone and another node's standby claims it. A shard with no gateway session for
``UNREACHABLE_TTLS`` lease TTLs (Discord unreachable from this node) gives its lease up.
One client per shard rather than an ``AutoShardedClient``: the shards a node holds change
one at a time, and an ``AutoShardedClient`` takes its ``shard_ids`` once, at construction.
On a single node with one shard it is one client for everything, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import aiohttp
import discord
from discord.gateway import ReconnectWebSocket
from discord.http import Route

from botd.channels.base import (
    InboundSink,
    LinkPreviews,
    OutboundFile,
    PlatformLink,
    SendScope,
)
from botd.channels.catch_up import CatchUpSettings
from botd.channels.discord.budget import discord_budget
from botd.channels.discord.buttons import is_press
from botd.channels.discord.commands import CommandFollowups, command_tree, publish_commands
from botd.channels.discord.errors import DiscordError, DiscordStartError, refusals
from botd.channels.discord.history import DiscordCatchUps
from botd.channels.discord.inbound import MESSAGE_CONTENT_INTENT_HELP, DiscordInbound
from botd.channels.discord.inbound_media import discord_download
from botd.channels.discord.markup import MARKDOWN
from botd.channels.discord.outbound import LINE_LIMIT, TEXT_LIMIT, DiscordOutbound
from botd.channels.discord.routes import DiscordRoutes, RoutedHTTPClient, check_fence
from botd.chat import Attachment, Button, Capabilities, InboundMessage, MessageRef, Target
from botd.cluster.holding import PlatformUnreachable, hold_lease
from botd.cluster.leases import Lease, LeaseKeeper, ProcessLeases
from botd.net.proxy import aiohttp_proxy, proxy_failure
from botd.ops.logging import not_botds_concern
from botd.store.protocols import CatchUpMarks

__all__ = [
    "LINE_LIMIT",
    "NONCE_WINDOW",
    "PLATFORM",
    "TEXT_LIMIT",
    "DiscordAdapter",
    "DiscordError",
    "DiscordStartError",
]

log = logging.getLogger(__name__)

# discord.py without PyNaCl or davey, its voice dependencies: botd joins no voice channel.
not_botds_concern("discord.client", "voice will NOT be supported")

PLATFORM = "discord"
"""The platform's name: a bot's channel name unless the wiring gives it another."""
NONCE_WINDOW = 120.0
"""Seconds within which a reply piece sent again is recognised by its nonce: Discord returns
the message a create with the same nonce made "in the past few minutes" (``enforce_nonce``)
instead of a new one. Two minutes stays safely inside that; past it, a piece a crash left
unconfirmed is treated as on Telegram."""
UNREACHABLE_TTLS = 2
"""Lease TTLs a shard may go without a gateway session (reconnecting in vain) before this
node gives its lease up to a node that can reach Discord (``_while_connected``)."""


class _QuietReconnects(logging.Filter):
    """discord.py logs each failed reconnect at ERROR with a traceback ("Attempting a
    reconnect in ..."): an expected fault while Discord is unreachable, told here in one
    WARNING line with the error's words (the shard's lease is given up past its bound:
    ``_while_connected``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            record.exc_info
            and isinstance(record.args, tuple)
            and str(record.msg).startswith("Attempting a reconnect")
        ):
            error = record.exc_info[1]
            record.msg = f"{record.msg} (%s)"
            record.args = (*record.args, f"{type(error).__name__}: {error}")
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


_QUIET_RECONNECTS = _QuietReconnects()
logging.getLogger("discord.client").addFilter(_QUIET_RECONNECTS)


class _Client(discord.Client):
    """Forwards the events the adapter needs; its requests go where the adapter's routes
    say (``routes``)."""

    def __init__(self, adapter: DiscordAdapter, **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        # A conversation's lease, given with a send, is checked again as each of its
        # requests starts, after discord.py's rate-limit wait (``routes.fenced_channel``):
        # a send held up past the lease's end is not written.
        trace = aiohttp.TraceConfig()
        trace.on_request_start.append(check_fence)
        # discord.py's own client with the same settings, on this adapter's URLs; its
        # connection state holds it too (the models' requests go through it).
        http = RoutedHTTPClient(
            adapter.routes, self.http.loop, http_trace=trace, proxy=adapter.proxy
        )
        self.http = self._connection.http = http
        self._adapter = adapter
        self.down_since: float | None = time.monotonic()
        """Since when (monotonic) this client has had no live gateway session (None: live)."""

    def dispatch(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        if event in ("connect", "resumed"):
            self.down_since = None
        elif event == "disconnect" and self.down_since is None:
            self.down_since = time.monotonic()
        if event == "connect" and self._adapter.connects(self):
            # A new session's READY (not a resume): its live messages wait for the catch-up
            # of what was missed (``history``).
            self._adapter.catching_up.connecting(self)
        if event == "disconnect" and self._adapter.connects(self):
            # discord.py dispatches it from inside its handler of what ended the connection
            # (or failed to make a new one), and tells it nowhere else but its log.
            self._adapter._on_disconnect(sys.exc_info()[1])
        super().dispatch(event, *args, **kwargs)

    async def on_ready(self) -> None:
        self._adapter.on_ready(self)

    async def on_resumed(self) -> None:
        self._adapter.catching_up.resumed(self)
        self._adapter._link.reachable()

    async def on_message(self, message: discord.Message) -> None:
        await self._adapter.catching_up.before_live(self, message)
        await self._adapter.inbound.on_message(message)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        await self._adapter.inbound.on_edit(payload)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        # Slash commands go to the command tree; a button pressed comes here.
        if is_press(interaction):
            await self._adapter.inbound.on_press(interaction)


class DiscordAdapter:
    """A ChannelAdapter for one Discord bot token."""

    capabilities = Capabilities(
        text_limit=TEXT_LIMIT,
        markup=MARKDOWN,
        line_limit=LINE_LIMIT,
        caption_limit=TEXT_LIMIT,
        resend_window=NONCE_WINDOW,
    )

    def __init__(
        self,
        token: str,
        *,
        channel: str = PLATFORM,
        api_base_url: str | None = None,
        gateway_url: str | None = None,
        allow_bots: bool = False,
        account_id: str = "default",
        ready_timeout: float = 60.0,
        guild_ready_timeout: float = 2.0,
        on_down: Callable[[str], None] | None = None,
        link: PlatformLink | None = None,
        auto_thread: bool = False,
        admits: Callable[[InboundMessage], bool] | None = None,
        command_menu: bool = True,
        pair_in_menu: bool = False,
        shard_count: int = 1,
        leases: LeaseKeeper | None = None,
        catch_up: CatchUpSettings | None = None,
        marks: CatchUpMarks | None = None,
        link_previews: LinkPreviews | None = None,
        proxy: str | None = None,
    ) -> None:
        """``channel``: the name of the channel instance this bot is (its messages' and
        targets' ``channel``, its conversation keys' and leases' start, its log lines'
        prefix). ``leases``: this node's, when it is one of several: each of the
        ``shard_count`` gateway shards runs here only while this node holds its lease.
        ``catch_up``, ``marks``: what each new gateway session reads of what it missed
        (``history``; without ``marks``, nothing). ``link_previews``: the chats (channel
        ids) whose messages show no embeds (None: every chat's do). ``proxy``: the
        section's ``proxy:`` for the REST API and the gateway (a URL, ``direct``; None: the
        environment's ``HTTPS_PROXY`` and the like, which discord.py itself does not read)."""
        self.name = channel
        self._label = f"{channel}[{account_id}]"
        """What the log lines of this bot start with: ``discord[default]``."""
        self._token = token
        self._leases_shared = leases is not None
        if leases is None and shard_count > 1:
            # One node runs every shard: leases of its own that nobody else claims.
            leases = LeaseKeeper(ProcessLeases(), "this node", ttl=30.0)
        self._leases = leases
        self._shard_count = shard_count
        self._shards: dict[int, _Client] = {}
        """The gateway clients of the shards this node holds (sharded mode)."""
        self._holding: list[asyncio.Task[None]] = []
        self._command_menu = command_menu
        self._pair_in_menu = pair_in_menu
        """Whether the commands include ``/pair`` (owners approve pairing codes)."""
        self._publishing: asyncio.Task[bool] | None = None
        self.followups = CommandFollowups()
        self._on_down = on_down
        self._link = link or PlatformLink()
        self.routes = DiscordRoutes.of(api_base_url, gateway_url)
        """Where this bot's clients send their requests (Discord's own URLs by default)."""
        self.proxy = aiohttp_proxy(proxy, self.routes.api or Route.BASE)
        """What this bot's clients' requests and gateway connections go through."""
        self._proxy = proxy
        self._proxy_key = f"channels.{channel}.proxy"
        self.account_id = account_id
        self._ready_timeout = ready_timeout
        # How long discord.py waits after the last GUILD_CREATE before firing on_ready.
        self._guild_ready_timeout = guild_ready_timeout
        self._client: _Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self.inbound = DiscordInbound(
            self._connected,
            self.routes,
            self.followups,
            channel=channel,
            account_id=account_id,
            allow_bots=allow_bots,
            auto_thread=auto_thread,
            admits=admits,
        )
        self.outbound = DiscordOutbound(
            self._connected,
            self.routes,
            self.followups,
            discord_budget(account_id),
            link_previews=link_previews,
        )
        self.catching_up = DiscordCatchUps(
            self._label,
            catch_up or CatchUpSettings(),
            marks,
            channel=channel,
            account=account_id,
            take=self.inbound.on_message,
            allow_bots=allow_bots,
            shard_count=shard_count,
        )

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self, sink: InboundSink) -> None:
        """Log in and connect; returns once READY and the guilds arrived (``on_ready``)."""
        if self._client is not None:
            raise RuntimeError("DiscordAdapter already started")
        self.inbound.sink = sink
        self._ready = asyncio.Event()
        intents = discord.Intents.none()
        intents.guilds = True
        intents.guild_messages = True
        intents.dm_messages = True
        intents.message_content = True
        self._intents = intents
        self._client = _Client(self, intents=intents, guild_ready_timeout=self._guild_ready_timeout)
        # Always there, so a command registered before (command_menu since turned off) is
        # still answered.
        self._tree = command_tree(self._client, self.inbound.on_command, pair=self._pair_in_menu)
        if self._leases is not None:
            await self._start_sharded(self._client, self._leases)
            return
        self._task = asyncio.create_task(self._run(self._client), name="discord-adapter")
        ready = asyncio.create_task(self._ready.wait())
        try:
            done, _ = await asyncio.wait(
                {self._task, ready},
                timeout=self._ready_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            ready.cancel()
            await asyncio.wait({ready})
        if ready in done:
            self._task.add_done_callback(self._on_task_done)
            return
        error: BaseException | None = None
        if self._task in done:
            error = self._task.exception()
        await self.stop()
        if isinstance(error, DiscordStartError):
            raise error
        proxied = None if error is None else proxy_failure(error, self._proxy, self._proxy_key)
        if proxied is not None:
            raise DiscordStartError(proxied) from error
        if isinstance(error, OSError):  # aiohttp's connection errors included
            raise DiscordStartError(f"cannot reach Discord: {error}") from error
        if error is not None:
            reason = str(error) or type(error).__name__
            raise DiscordStartError(f"Discord connection failed: {reason}") from error
        raise DiscordStartError(f"Discord did not become ready within {self._ready_timeout}s")

    async def _start_sharded(self, client: _Client, leases: LeaseKeeper) -> None:
        """Log the REST client in, then hold each shard's lease in the background; returns
        without waiting for a shard (another node may hold them all)."""
        try:
            await client.login(self._token)
        except discord.LoginFailure as exc:
            await self.stop()
            raise DiscordStartError(f"Discord rejected the bot token: {exc}") from exc
        except OSError as exc:
            await self.stop()
            proxied = proxy_failure(exc, self._proxy, self._proxy_key)
            raise DiscordStartError(proxied or f"cannot reach Discord: {exc}") from exc
        except BaseException:
            await self.stop()
            raise
        self._link.reachable()
        if self._command_menu:
            self._publishing = asyncio.create_task(
                publish_commands(self._tree, self._label), name="discord-commands"
            )
        for shard in range(self._shard_count):
            name = self._shard_lease(shard)
            self._holding.append(
                asyncio.create_task(
                    hold_lease(leases, name, "gateway", partial(self._run_shard, shard)),
                    name=f"discord-shard-{shard}",
                )
            )
        log.info(
            "%s: %d shard(s), each connected while this node holds its lease",
            self._label,
            self._shard_count,
        )

    def _shard_lease(self, shard: int) -> str:
        """The lease of shard ``shard``'s session: ``<channel>:<account>:<shard>``."""
        return f"{self.name}:{self.account_id}:{shard}"

    def input_leases(self) -> list[str]:
        """``LeasedInput``: each shard's lease, when this node connects them under leases."""
        if not self._leases_shared:
            return []
        return [self._shard_lease(shard) for shard in range(self._shard_count)]

    async def _run_shard(self, shard: int, lease: Lease) -> None:
        """Shard ``shard``'s gateway session until cancelled (the lease lost, or stopping);
        its end closes the session."""
        client = _Client(
            self,
            intents=self._intents,
            guild_ready_timeout=self._guild_ready_timeout,
            shard_id=shard,
            shard_count=self._shard_count,
        )
        # Its interactions come on this session.
        command_tree(client, self.inbound.on_command, pair=self._pair_in_menu)
        self._shards[shard] = client
        try:
            await client.login(self._token)
            async with asyncio.TaskGroup() as group:
                group.create_task(client.connect(reconnect=True))
                group.create_task(self._while_connected(client, lease))
        except* PlatformUnreachable as unreachable:
            raise unreachable.exceptions[0] from None
        finally:
            if self._shards.get(shard) is client:
                del self._shards[shard]
            await self.catching_up.forget(client)
            await client.close()

    async def _while_connected(self, client: _Client, lease: Lease) -> None:
        """Return never; raise ``PlatformUnreachable`` once the shard's client has had no
        gateway session for ``UNREACHABLE_TTLS`` lease TTLs (discord.py reconnecting in
        vain meanwhile), so that the shard's lease goes to a node that can reach Discord."""
        assert self._leases is not None
        if not self._leases.lapses:  # one node alone: no other node could take the shard
            await asyncio.Event().wait()
        bound = UNREACHABLE_TTLS * self._leases.ttl
        while True:
            await asyncio.sleep(self._leases.renew_every)
            down_since = client.down_since
            if down_since is not None and time.monotonic() - down_since > bound:
                raise PlatformUnreachable(
                    f"no gateway session for {time.monotonic() - down_since:.0f} s ({lease.name})"
                )

    def connects(self, client: discord.Client) -> bool:
        """Whether ``client`` is one of this adapter's live gateway connections."""
        return client is self._client or client in self._shards.values()

    async def _stop_shards(self) -> None:
        holding, self._holding = self._holding, []
        for task in holding:
            task.cancel()
        if holding:
            await asyncio.wait(holding)

    async def _run(self, client: _Client) -> None:
        try:
            await client.start(self._token)
        except discord.PrivilegedIntentsRequired as exc:
            raise DiscordStartError(
                "Discord refused the gateway intents (close code 4014, disallowed intents): "
                + MESSAGE_CONTENT_INTENT_HELP
            ) from exc
        except discord.LoginFailure as exc:
            raise DiscordStartError(f"Discord rejected the bot token: {exc}") from exc

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        """The connection's task ended: unless ``stop`` ended it, the channel is down."""
        if task is not self._task or task.cancelled():
            return  # stopped on purpose
        error = task.exception()
        reason = (
            f"Discord connection ended: {' '.join(str(error).split()) or type(error).__name__}"
            if error is not None
            else "Discord connection ended"
        )
        if self._on_down is None:
            log.error("%s", reason, exc_info=error)
        else:
            log.debug("%s", reason, exc_info=error)
            self._on_down(reason)

    def _on_disconnect(self, error: BaseException | None) -> None:
        """The gateway connection ended or a new one failed: discord.py reconnects (resumes)
        by itself; until READY or RESUMED the platform counts as unreachable."""
        if isinstance(error, ReconnectWebSocket):
            what = "the gateway closed the connection; resuming"
        elif isinstance(error, discord.ConnectionClosed):
            what = f"the gateway closed the connection (code {error.code})"
        elif error is None:
            what = "the gateway connection was lost"
        else:
            text = " ".join(str(error).split())
            what = f"cannot reach the gateway: {type(error).__name__}" + (
                f": {text}" if text else ""
            )
        self._link.unreachable(what)

    async def stop_inbound(self) -> None:
        """Stop taking messages; the connection stays up so replies can still be sent.
        Messages accepted already are handed on first. Shards held under leases are closed
        and their leases given up, so another node's gateway takes over at once."""
        self.inbound.sink = None
        await self._stop_shards()
        await self.catching_up.stop()
        await self.inbound.settle()

    async def stop(self) -> None:
        """Close the connection; safe to call more than once."""
        await self._stop_shards()
        await self.catching_up.stop()
        client, task = self._client, self._task
        self._client = self._task = None
        publishing, self._publishing = self._publishing, None
        if publishing is not None:
            publishing.cancel()
            await asyncio.wait({publishing})
        if client is not None:
            await client.close()
        if task is not None:
            if not task.done():
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.outbound.budget.close()

    def _connected(self) -> discord.Client | None:
        """The client that logged in and does the REST calls (None: not connected)."""
        return self._client

    def on_ready(self, client: discord.Client) -> None:
        """A gateway session (the one client's, or a shard's) is READY."""
        if self._client is None:
            return
        self.inbound.check_content_intent(client)
        self._link.reachable()
        self.catching_up.ready(client)
        if self._command_menu and self._publishing is None:  # once per start, not per resume
            self._publishing = asyncio.create_task(
                publish_commands(self._tree, self._label), name="discord-commands"
            )
        self._ready.set()

    # --- outbound ----------------------------------------------------------------------------

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """Post ``markdown`` as one or more messages; a 429 is waited out by discord.py."""
        return await self.outbound.send(target, markdown, scope=scope)

    async def send_buttons(
        self,
        target: Target,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """``send``, with ``rows`` as the components (action rows of buttons) of its last
        message."""
        return await self.outbound.send_buttons(target, markdown, rows, scope=scope)

    async def edit_buttons(
        self,
        ref: MessageRef,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> None:
        """``ref``'s message shows ``markdown`` (its first message's worth) with ``rows`` as
        its components (none: ``components: []``, the buttons removed)."""
        await self.outbound.edit_buttons(ref, markdown, rows, scope=scope)

    async def send_file(
        self,
        target: Target,
        file: OutboundFile,
        caption: str = "",
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """Post ``file`` as an attachment, the caption as the message's content."""
        return await self.outbound.send_file(target, file, caption, scope=scope)

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """Replace a posted message's text; what does not fit follows in new messages."""
        return await self.outbound.edit(ref, markdown, scope=scope)

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        """Delete a posted message; one that is already gone counts as deleted."""
        await self.outbound.delete(ref, scope=scope)

    async def react(self, ref: MessageRef, emoji: str) -> None:
        await self.outbound.set_reaction(ref, emoji)

    async def set_reaction(
        self, ref: MessageRef, emoji: str | None, *, replacing: str | None = None
    ) -> None:
        """Remove the bot's own reaction ``replacing``, then add ``emoji`` (both idempotent
        at Discord)."""
        await self.outbound.set_reaction(ref, emoji, replacing=replacing)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        return await discord_download(attachment, max_bytes, self._proxy)

    async def typing(self, target: Target) -> None:
        """Show "typing…" once (about 10 s); sessions refresh it while a run is active."""
        await self.outbound.typing(target)

    async def is_chat_admin(self, chat_id: str, user_id: str) -> bool:
        """Whether ``user_id`` owns the server of channel ``chat_id`` or has Manage Server
        there (``ChatAdmins``); a direct chat has no server, so no admins."""
        client = self._connected()
        if client is None:
            raise DiscordError("look up a member", 0, "not connected (yet)", retryable=True)
        with refusals("look up a member"):
            channel = client.get_channel(int(chat_id)) or await client.fetch_channel(int(chat_id))
            guild = getattr(channel, "guild", None)
            if not isinstance(guild, discord.Guild):
                return False
            if guild.owner_id == int(user_id):
                return True
            member = guild.get_member(int(user_id)) or await guild.fetch_member(int(user_id))
            return bool(member.guild_permissions.manage_guild)
