"""The Discord channel adapter, on discord.py (imported only here).

One ``DiscordAdapter`` is one bot account on the gateway. It maps inbound messages to
conversations (a DM per user, a guild channel, a thread of its own), drops its own messages
and, unless ``allow_bots``, other bots', and gives each message its id as the dedupe key, so
the router drops a gateway replay, after a restart too. Outbound Markdown is rendered for
Discord and split under 2000 characters and 17 lines a message; mentions are limited to
users, so model output never pings @everyone, @here or a role. Each message of a reply piece
carries the piece's key (given with the send: ``SendScope``) as its ``nonce``: Discord answers
a send of it again (a retry, a resend after a crash) with the message it already made. A reply
carries the message it answers, quoted (``quotes``; fetched when Discord did not send it along).

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
session alone and another node's standby claims it. One client per shard rather than an
``AutoShardedClient``: the shards a node holds change one at a time, and an
``AutoShardedClient`` takes its ``shard_ids`` once, at construction. On a single node with
one shard it is one client for everything, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import secrets
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import aiohttp
import discord
from discord.gateway import ReconnectWebSocket

from botd.channels.base import (
    InboundSink,
    OutboundFile,
    PlatformLink,
    SendScope,
    UntilAccepted,
    fence_of,
    key_of,
    without_mention,
)
from botd.channels.catch_up import CatchUpSettings
from botd.channels.discord.buttons import (
    PRESS_NOT_TAKEN,
    PRESS_NOT_TAKEN_NOW,
    acknowledge,
    button_view,
    chosen_view,
    is_press,
    press_message,
)
from botd.channels.discord.commands import (
    NOT_ADMITTED_TEXT,
    NOT_TAKEN_TEXT,
    CommandFollowups,
    answer,
    command_message,
    command_tree,
    publish_commands,
)
from botd.channels.discord.conversations import conversation_of
from botd.channels.discord.history import DiscordCatchUps
from botd.channels.discord.inbound_media import discord_attachments, discord_download
from botd.channels.discord.markup import MARKDOWN
from botd.channels.discord.quotes import fetch_quote, quote_of, unresolved_reply
from botd.channels.discord.routes import (
    DiscordRoutes,
    RoutedHTTPClient,
    check_fence,
    fenced_channel,
)
from botd.channels.errors import ChannelError, ChannelStartError
from botd.chat import (
    Attachment,
    Button,
    Capabilities,
    InboundMessage,
    MessageKey,
    MessageRef,
    PressAnswer,
    Target,
)
from botd.cluster.holding import PlatformUnreachable, hold_lease
from botd.cluster.leases import Lease, LeaseKeeper, ProcessLeases
from botd.ops.logging import not_botds_concern
from botd.retry import retry_after
from botd.store.protocols import CatchUpMarks
from botd.text.markup import RenderedChunk

log = logging.getLogger(__name__)

# discord.py without PyNaCl or davey, its voice dependencies: botd joins no voice channel.
not_botds_concern("discord.client", "voice will NOT be supported")

PLATFORM = "discord"
"""The platform's name: a bot's channel name unless the wiring gives it another."""
TEXT_LIMIT = 2000
LINE_LIMIT = 17
UPLOAD_LIMIT = 10 * 1024 * 1024
NONCE_WINDOW = 120.0
"""Seconds within which a reply piece sent again is recognised by its nonce: Discord returns
the message a create with the same nonce made "in the past few minutes" (``enforce_nonce``)
instead of a new one. Two minutes stays safely inside that; past it, a piece a crash left
unconfirmed is treated as on Telegram."""
UNREACHABLE_TTLS = 2
"""Lease TTLs a shard may go without a gateway session (reconnecting in vain) before this
node gives its lease up to a node that can reach Discord (``_while_connected``)."""
MESSAGE_CONTENT_INTENT_HELP = (
    'enable "Message Content Intent" for this bot in the Discord developer portal '
    "(Applications > your app > Bot > Privileged Gateway Intents)"
)

# Model output may mention users, never @everyone/@here or roles; replies don't ping.
ALLOWED_MENTIONS = discord.AllowedMentions(
    everyone=False, roles=False, users=True, replied_user=False
)


class DiscordError(ChannelError):
    """Discord refused a call; the message carries its HTTP status and Discord's own text.

    ``status`` is 0 when no HTTP answer came (the connection failed or timed out).
    """

    def __init__(
        self,
        action: str,
        status: int,
        text: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        maybe_delivered: bool = False,
    ) -> None:
        super().__init__(
            f"Discord {action}: {status or 'no answer:'} {text}".rstrip(),
            retryable=retryable,
            retry_after=retry_after,
            maybe_delivered=maybe_delivered,
        )
        self.status = status
        self.text = text


class DiscordStartError(ChannelStartError):
    """The adapter could not connect: bad token, refused intents, or no READY in time."""


@contextlib.contextmanager
def _refusals(action: str) -> Iterator[None]:
    """Turn discord.py's errors into ``DiscordError`` (no SDK object leaves the adapter).

    discord.py already waits out 429s and retries some 5xx itself; what still comes out as a
    5xx, a 429 (``RateLimited``) or a failed connection may pass and is marked retryable.
    A 4xx is Discord refusing the request (missing permissions, an unknown channel).
    """
    try:
        yield
    except discord.RateLimited as exc:
        hint = retry_after(exc.retry_after)
        raise DiscordError(action, 429, str(exc), retryable=True, retry_after=hint) from exc
    except discord.HTTPException as exc:
        transient = exc.status >= 500 or exc.status == 429
        hint = retry_after(exc.response.headers) if exc.status == 429 else None
        raise DiscordError(
            action, exc.status, exc.text, retryable=transient, retry_after=hint
        ) from exc
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        never_sent = isinstance(exc, aiohttp.ClientConnectorError | ConnectionRefusedError)
        reason = str(exc) or type(exc).__name__
        raise DiscordError(
            action,
            0,
            f"cannot reach Discord: {reason}",
            retryable=True,
            maybe_delivered=not never_sent,
        ) from exc


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
        http = RoutedHTTPClient(adapter.routes, self.http.loop, http_trace=trace)
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
        await self._adapter._on_message(message)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        await self._adapter._on_edit(payload)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        # Slash commands go to the command tree; a button pressed comes here.
        if is_press(interaction):
            await self._adapter._on_press(interaction)


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
        shard_count: int = 1,
        leases: LeaseKeeper | None = None,
        catch_up: CatchUpSettings | None = None,
        marks: CatchUpMarks | None = None,
    ) -> None:
        """``channel``: the name of the channel instance this bot is (its messages' and
        targets' ``channel``, its conversation keys' and leases' start, its log lines'
        prefix). ``leases``: this node's, when it is one of several: each of the
        ``shard_count`` gateway shards runs here only while this node holds its lease.
        ``catch_up``, ``marks``: what each new gateway session reads of what it missed
        (``history``; without ``marks``, nothing)."""
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
        self._publishing: asyncio.Task[bool] | None = None
        self._handing = UntilAccepted(channel)
        self._until_accepted = self._handing.hand
        self.followups = CommandFollowups()
        self._auto_thread = auto_thread
        self._admits = admits
        self._on_down = on_down
        self._link = link or PlatformLink()
        self.routes = DiscordRoutes.of(api_base_url, gateway_url)
        """Where this bot's clients send their requests (Discord's own URLs by default)."""
        self._allow_bots = allow_bots
        self.account_id = account_id
        self._ready_timeout = ready_timeout
        # How long discord.py waits after the last GUILD_CREATE before firing on_ready.
        self._guild_ready_timeout = guild_ready_timeout
        self._client: _Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._sink: InboundSink | None = None
        self._warned_content = False
        self._pressing: set[int] = set()
        """The ids of the interactions (button presses) being handled."""
        self.catching_up = DiscordCatchUps(
            self._label,
            catch_up or CatchUpSettings(),
            marks,
            channel=channel,
            account=account_id,
            take=self._on_message,
            allow_bots=allow_bots,
            shard_count=shard_count,
        )

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self, sink: InboundSink) -> None:
        """Log in and connect; returns once READY and the guilds arrived (``on_ready``)."""
        if self._client is not None:
            raise RuntimeError("DiscordAdapter already started")
        self._sink = sink
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
        self._tree = command_tree(self._client, self._on_command)
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
            raise DiscordStartError(f"cannot reach Discord: {exc}") from exc
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
        command_tree(client, self._on_command)  # its interactions come on this session
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
        self._sink = None
        await self._stop_shards()
        await self.catching_up.stop()
        await self._handing.settle()

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

    # --- inbound -----------------------------------------------------------------------------

    def on_ready(self, client: discord.Client) -> None:
        """A gateway session (the one client's, or a shard's) is READY."""
        if self._client is None:
            return
        flags = client.application_flags
        if not (flags.gateway_message_content or flags.gateway_message_content_limited):
            log.warning(
                "Discord bot %s may not receive guild message text: %s",
                client.user,
                MESSAGE_CONTENT_INTENT_HELP,
            )
            self._warned_content = True
        self._link.reachable()
        self.catching_up.ready(client)
        if self._command_menu and self._publishing is None:  # once per start, not per resume
            self._publishing = asyncio.create_task(
                publish_commands(self._tree, self._label), name="discord-commands"
            )
        self._ready.set()

    async def _on_command(self, interaction: discord.Interaction, text: str) -> None:
        """A slash command used (``commands``): handed on like a typed one, and the
        interaction answered, for its user only, once it was taken or could not be."""
        with self.routes.interactions():
            await self._take_command(interaction, text)

    async def _take_command(self, interaction: discord.Interaction, text: str) -> None:
        client, sink = self._client, self._sink
        me = client.user if client is not None else None
        message = command_message(
            interaction,
            text,
            instance=self.name,
            account_id=self.account_id,
            bot_name=me.name if me else "",
        )
        if sink is None or message is None:
            await answer(interaction, "Not taken: botd is not taking messages now.")
            return
        self.followups.remember(message.thread_id or message.chat_id, interaction)
        # A sender the policy refuses is handed on all the same: the router may answer
        # (a pairing code, say).
        admitted = self._admitted(message)
        try:
            await self._until_accepted(sink, message)
        except Exception as exc:
            log.warning("%s: slash command %s was not taken: %s", self.name, text.split()[0], exc)
            await answer(interaction, NOT_TAKEN_TEXT)
            return
        await answer(interaction, f"Taken: {text}" if admitted else NOT_ADMITTED_TEXT)

    async def _on_press(self, interaction: discord.Interaction) -> None:
        """A button of the bot's pressed (``buttons``): handed to the sink like the
        presser's message, and the interaction acknowledged as the router decided; a press
        that counted has its buttons replaced by the choice made.

        A delivery of a press whose first delivery is still being handled here is left to
        that one: both carry the same token, and only the first callback counts, which must
        be the one saying what the press did."""
        if interaction.id in self._pressing:
            log.debug("%s: press %s delivered again while handled", self.name, interaction.id)
            return
        self._pressing.add(interaction.id)
        try:
            with self.routes.interactions():
                await self._take_press(interaction)
        finally:
            self._pressing.discard(interaction.id)

    async def _take_press(self, interaction: discord.Interaction) -> None:
        client, sink = self._client, self._sink
        me = client.user if client is not None else None
        press = press_message(
            interaction,
            instance=self.name,
            account_id=self.account_id,
            bot_name=me.name if me else "",
        )
        if sink is None:
            await acknowledge(interaction, PressAnswer(PRESS_NOT_TAKEN_NOW))
            return
        if press is None:
            await acknowledge(interaction, PressAnswer())
            return
        try:
            decided = await sink(press)
        except Exception as exc:
            log.warning("%s: a button press was not taken: %s", self.name, exc)
            await acknowledge(interaction, PressAnswer(PRESS_NOT_TAKEN))
            return
        answer = getattr(decided, "answer", None)
        if not isinstance(answer, PressAnswer):
            answer = PressAnswer()
        await acknowledge(interaction, answer)
        if answer.chosen and interaction.message is not None:
            try:
                with _refusals("edit"):
                    await interaction.message.edit(
                        view=chosen_view(answer.label, press.sender_name)
                    )
            except DiscordError as exc:
                log.warning("%s: showing the choice made failed: %s", self.name, exc)

    def _taking(self, message: discord.Message) -> tuple[InboundSink, discord.ClientUser] | None:
        """The sink and the bot's user, when ``message`` is one to hand on: not the bot's
        own, nor another bot's unless ``allow_bots``."""
        client, sink = self._client, self._sink
        if client is None or client.user is None or sink is None:
            return None
        if message.author.id == client.user.id or (message.author.bot and not self._allow_bots):
            return None
        return sink, client.user

    async def _on_message(self, message: discord.Message) -> None:
        # No await before the sink (but for a fetch of a replied-to message Discord did
        # not send along), so messages reach it in gateway order.
        taking = self._taking(message)
        if taking is None:
            return
        sink, me = taking
        inbound = replace(
            self._inbound(message, me.id), bot_name=me.name, quoted=quote_of(message, me)
        )
        blank = not message.content and not message.attachments
        if inbound.mentions_bot and blank and message.guild is not None:
            self._warn_blank_content()
        reference = unresolved_reply(message)
        if reference is not None and self._client is not None and self._admitted(inbound):
            # Only for a message the policy takes: the others' quotes would not be shown.
            quoted = await fetch_quote(self._client, reference, me)
            inbound = replace(inbound, quoted=quoted)
        if self._auto_thread and self._starts_thread(message, inbound):
            # (An await before the sink: this message may reach it after a later one of
            # its channel, which is another conversation from now on.)
            inbound = await self._in_new_thread(message, inbound)
        await sink(inbound)

    async def _on_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        """A message whose text its sender edited, handed on as an edit. Discord also sends
        an update when it adds a link preview: no ``edited_at``, or the text as it was."""
        message, before = payload.message, payload.cached_message
        edited_at = message.edited_at
        if edited_at is None or (before is not None and before.content == message.content):
            return
        taking = self._taking(message)
        if taking is None:
            return
        sink, me = taking
        key = f"{message.id}:edit:{edited_at.timestamp():.3f}"
        inbound = self._inbound(message, me.id)
        await sink(replace(inbound, bot_name=me.name, dedupe_keys=(key,), edited=True))

    def _starts_thread(self, message: discord.Message, inbound: InboundMessage) -> bool:
        """Whether ``message`` gets a thread of its own: a mention of the bot in a server's
        text or news channel (a thread is neither), from a sender the access policy lets in
        (asked before the thread exists: a stranger's mention must not leave an empty
        thread behind)."""
        channel_type = getattr(message.channel, "type", None)
        return (
            inbound.mentions_bot
            and message.guild is not None
            and channel_type in (discord.ChannelType.text, discord.ChannelType.news)
            and self._admitted(inbound)
        )

    def _admitted(self, message: InboundMessage) -> bool:
        """Whether the access policy lets ``message``'s sender address the bot there."""
        return self._admits is None or self._admits(message)

    async def _in_new_thread(
        self, message: discord.Message, inbound: InboundMessage
    ) -> InboundMessage:
        """``inbound`` moved into a new thread started on ``message``; where it was when
        Discord refuses one (a missing permission, say), with a log line in its words."""
        try:
            thread = await message.create_thread(
                name=_thread_name(inbound.text, inbound.sender_name), auto_archive_duration=1440
            )
        except discord.HTTPException as exc:
            log.warning(
                "%s: no thread started on message %s (%s %s); answering in the channel",
                self.name,
                message.id,
                exc.status,
                exc.text or exc,
            )
            return inbound
        where = conversation_of(self.name, thread, thread.id, dm_user_id=None)
        return replace(inbound, thread_id=where.thread_id, conversation_key=where.key)

    def _inbound(self, message: discord.Message, me_id: int) -> InboundMessage:
        channel = message.channel
        author = message.author
        reference = message.reference
        replied = reference.resolved if reference is not None else None
        mentions_bot = (
            any(u.id == me_id for u in message.mentions)
            or (isinstance(replied, discord.Message) and replied.author.id == me_id)
            # A thread the bot started (``auto_thread``) is a conversation with it.
            or (isinstance(channel, discord.Thread) and channel.owner_id == me_id)
        )
        where = conversation_of(
            self.name, channel, channel.id, dm_user_id=author.id if message.guild is None else None
        )
        # The bot's own mention is addressing, not content.
        text = without_mention(message.content, rf"<@!?{me_id}>")
        return InboundMessage(
            channel=self.name,
            chat_id=where.chat_id,
            sender_id=str(author.id),
            text=text,
            message_id=str(message.id),
            conversation_key=where.key,
            account_id=self.account_id,
            thread_id=where.thread_id,
            sender_name=author.display_name,
            is_direct=message.guild is None,
            mentions_bot=mentions_bot,
            dedupe_keys=(str(message.id),),
            in_history=True,
            reply_to_message_id=(
                str(reference.message_id)
                if reference is not None and reference.message_id is not None
                else None
            ),
            attachments=discord_attachments(message),
        )

    def _warn_blank_content(self) -> None:
        if not self._warned_content:
            self._warned_content = True
            log.warning(
                "Discord delivered a message mentioning the bot with empty content: "
                + MESSAGE_CONTENT_INTENT_HELP
            )

    # --- outbound ----------------------------------------------------------------------------

    def _channel(
        self, target: Target, scope: SendScope | None = None
    ) -> discord.PartialMessageable:
        """``target``'s channel, its calls made under the fence of ``scope`` (if any)."""
        client = self._client
        if client is None:
            # Starting, or being restarted after it went down: a send waits (is retried) for it.
            raise ChannelError("discord is not connected (yet)", retryable=True)
        assert isinstance(client.http, RoutedHTTPClient)
        channel_id = int(target.thread_id or target.chat_id)
        return fenced_channel(client._connection, client.http, channel_id, fence_of(scope))

    def _chunks(self, markdown: str) -> list[RenderedChunk]:
        chunks = MARKDOWN.chunks(markdown, TEXT_LIMIT, line_limit=LINE_LIMIT)
        return [chunk for chunk in chunks if chunk.text.strip()]

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """Post ``markdown`` as one or more messages; a 429 is waited out by discord.py."""
        chunks = self._chunks(markdown)
        return await self._post(target, chunks, reply_to=target.reply_to_id, scope=scope)

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
        chunks = self._chunks(markdown)
        return await self._post(target, chunks, reply_to=target.reply_to_id, rows=rows, scope=scope)

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
        chunks = self._chunks(markdown)
        message = self._channel(ref.target, scope).get_partial_message(int(ref.message_id))
        view = button_view(rows)
        with _refusals("edit"):
            if chunks:
                await message.edit(
                    content=chunks[0].text, view=view, allowed_mentions=ALLOWED_MENTIONS
                )
            else:
                await message.edit(view=view)

    async def _post(
        self,
        target: Target,
        chunks: list[RenderedChunk],
        *,
        reply_to: str | None,
        rows: Sequence[Sequence[Button]] = (),
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        channel = self._channel(target, scope)
        key = key_of(scope)
        refs: list[MessageRef] = []
        for number, chunk in enumerate(chunks):
            # A reply piece's message carries a nonce of its own, the same in every retry
            # and after a restart: Discord answers a repeat with the message it made.
            nonce = _nonce(key, number)
            # The buttons go under the last message.
            view = button_view(rows) if number == len(chunks) - 1 else None
            extra: dict[str, Any] = {} if view is None else {"view": view}
            try:
                with _refusals("send"):
                    if reply_to is None:
                        sent = await channel.send(
                            chunk.text, allowed_mentions=ALLOWED_MENTIONS, nonce=nonce, **extra
                        )
                    else:
                        reference = discord.MessageReference(
                            message_id=int(reply_to),
                            channel_id=channel.id,
                            fail_if_not_exists=False,
                        )
                        sent = await channel.send(
                            chunk.text,
                            allowed_mentions=ALLOWED_MENTIONS,
                            reference=reference,
                            nonce=nonce,
                            **extra,
                        )
            except DiscordError as exc:
                if exc.status == 403:  # a slash command's user is told, if any
                    with self.routes.interactions():
                        await self.followups.tell_cannot_post(str(channel.id), exc.text)
                raise
            reply_to = None  # only the first message replies
            refs.append(MessageRef(target, str(sent.id)))
        return refs

    async def send_file(
        self,
        target: Target,
        file: OutboundFile,
        caption: str = "",
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """Post ``file`` as an attachment (``discord.File``) in ``target``'s channel or thread,
        the caption as the message's content.

        Discord takes attachments of up to 10 MiB from a bot in a server without boosts; a
        larger file is refused before anything is sent.
        """
        if len(file.data) > UPLOAD_LIMIT:
            raise DiscordError(
                "upload", 413, f"file too large: {file.filename} is {len(file.data)} bytes"
            )
        channel = self._channel(target, scope)
        chunks = self._chunks(caption) if caption.strip() else []
        content = chunks[0].text if chunks else None
        attachment = discord.File(io.BytesIO(file.data), filename=file.filename)
        key = key_of(scope)
        nonce = _nonce(key, 0)
        with _refusals("upload"):
            if target.reply_to_id is None:
                sent = await channel.send(
                    content, file=attachment, allowed_mentions=ALLOWED_MENTIONS, nonce=nonce
                )
            else:
                reference = discord.MessageReference(
                    message_id=int(target.reply_to_id),
                    channel_id=channel.id,
                    fail_if_not_exists=False,
                )
                sent = await channel.send(
                    content,
                    file=attachment,
                    allowed_mentions=ALLOWED_MENTIONS,
                    reference=reference,
                    nonce=nonce,
                )
        return [MessageRef(target, str(sent.id))]

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """Replace a posted message's text; what does not fit follows in new messages.

        A Discord message holds 2000 characters and the adapter keeps it under 17 lines,
        so a longer text continues in messages posted after the edited one.
        """
        chunks = self._chunks(markdown)
        if not chunks:
            return [ref]
        message = self._channel(ref.target, scope).get_partial_message(int(ref.message_id))
        with _refusals("edit"):
            await message.edit(content=chunks[0].text, allowed_mentions=ALLOWED_MENTIONS)
        overflow = SendScope(fence_of(scope))  # new messages, of no piece's key
        return [ref, *await self._post(ref.target, chunks[1:], reply_to=None, scope=overflow)]

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        """Delete a posted message; one that is already gone counts as deleted."""
        message = self._channel(ref.target, scope).get_partial_message(int(ref.message_id))
        try:
            with _refusals("delete"):
                await message.delete()
        except DiscordError as exc:
            if exc.status != 404:
                raise

    async def react(self, ref: MessageRef, emoji: str) -> None:
        await self.set_reaction(ref, emoji)

    async def set_reaction(
        self, ref: MessageRef, emoji: str | None, *, replacing: str | None = None
    ) -> None:
        """Remove the bot's own reaction ``replacing``, then add ``emoji`` (both idempotent
        at Discord). Needs Add Reactions and Read Message History where the message is."""
        message = self._channel(ref.target).get_partial_message(int(ref.message_id))
        client = self._client
        if replacing is not None and replacing != emoji and client is not None:
            me = client.user
            if me is not None:
                with _refusals("remove reaction"):
                    await message.remove_reaction(replacing, me)
        if emoji is not None:
            with _refusals("react"):
                await message.add_reaction(emoji)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        return await discord_download(attachment, max_bytes)

    async def typing(self, target: Target) -> None:
        """Show "typing…" once (about 10 s); sessions refresh it while a run is active."""
        with _refusals("typing"):
            await self._channel(target).typing()


def _nonce(key: MessageKey | None, part: int) -> str | int:
    """The nonce of a message: its key's token for a reply piece's message, else a random
    one (as discord.py picks by itself)."""
    return secrets.randbits(64) if key is None else key.token(part)


def _thread_name(text: str, sender: str) -> str:
    """A thread's name from the message it starts on: its first line, at most 80 characters
    (Discord allows 100), cut at a word."""
    line = next((" ".join(part.split()) for part in text.splitlines() if part.strip()), "")
    if not line:
        return f"Question from {sender}"[:80] if sender else "A question"
    if len(line) <= 80:
        return line
    cut = line[:79].rsplit(" ", 1)[0] or line[:79]
    return cut + "…"
