"""Telegram: one bot with python-telegram-bot, inside the daemon's own event loop.

The PTB ``Application`` is driven by hand (``initialize``/``start``/``updater.start_polling``,
never ``run_polling``, which would own the loop and its signals). One adapter is one bot,
the channel instance it is built as (``channel``: ``telegram``, or another section's name).
This module keeps the bot's lifecycle (start and stop, the two modes, the poller's lease) and
composes the parts: ``polling`` (``PollingBot``: ``getUpdates`` confirms only what botd
accepted, resuming from the saved offset), ``inbound`` (the handlers that turn updates into
``InboundMessage``s keyed ``<channel>:<chat>`` or ``<channel>:<chat>:topic:<thread>``, and
hand them to the sink) and ``outbound`` (the Bot API calls that send, edit, draft, delete
and react, with the per-chat flood waits). The adapter's ``ChannelAdapter`` methods hand
each call to its part.

With ``mode="webhook"`` Telegram POSTs the updates instead (``webhook``): at start botd
serves the route on its HTTP server at the ``listen`` address (``http``), then registers
``webhook_url`` with ``setWebhook`` (its secret token, the same
updates as polling, one connection at a time); each update goes through the same handlers and
is answered 200 only once it was accepted, 503 when not (Telegram sends it again). At
shutdown botd stops serving the route and leaves the webhook set, so what comes meanwhile waits with
Telegram for the next start.

On several nodes (``leases``) one node polls: the holder of the lease ``<channel>:<account>``
(``botd.cluster.holding``). It starts from the stored offset; once its lease is past its
deadline it sends no ``getUpdates`` (PTB's last confirming one at a stop included) and saves
no offset, and a lost lease stops polling; the other nodes only send. A holder whose polls
Telegram leaves unanswered for ``UNANSWERED_TTLS`` lease TTLs past the poll's own timeout
(its link to Telegram is down) gives the lease up, so a node that reaches Telegram polls.
The database keeps the offset from moving back when a node paused mid-poll saves an older
one.

Every Bot API call is paced by the bot's budget (``budget``: Telegram's limits, shared by the
nodes, answers first). Polling never gives up (a token revoked while running is reported through
``on_down``, and the daemon restarts the channel); whether Telegram answers the polls goes to
``link`` (a ``PlatformLink``). Failures of a call raise ``TelegramAPIError`` (a
``ChannelError``) with Telegram's description, marked retryable for a 5xx, a 429 or a lost
connection and not for Telegram's refusals (see ``api_error`` in ``errors``); a start that fails
raises ``TelegramStartError`` (a ``ChannelStartError``) saying whether the token was refused or
the URL is wrong; no PTB object leaves this package.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from telegram.error import NetworkError, TelegramError
from telegram.ext import Application

from ...chat import Attachment, Button, Capabilities, InboundMessage, MessageRef, Target
from ...cluster.budget import SharedRate
from ...cluster.holding import PlatformUnreachable, hold_lease
from ...cluster.leases import Lease, LeaseKeeper
from ...net.proxy import proxy_failure
from ...ops.logging import not_botds_concern
from ...retry import Backoff
from ...store.protocols import Offsets
from ..base import InboundSink, LinkPreviews, OutboundFile, PlatformLink, SendScope
from ..budget import Budget
from ..errors import ChannelError
from . import uploads
from .budget import TelegramBudget
from .errors import (
    TelegramAPIError,
    TelegramStartError,
    api_error,
    quiet_non_json_error_tracebacks,
    start_failure,
)
from .inbound import TelegramInbound
from .inbound_media import telegram_download
from .markup import HTML
from .menu import publish_commands
from .outbound import TelegramOutbound
from .polling import PollingBot
from .transport import sends_request, updates_request

if TYPE_CHECKING:
    from ...http.routes import Route, Routes

__all__ = [
    "ALLOWED_UPDATES",
    "PLATFORM",
    "TEXT_LIMIT",
    "TelegramAPIError",
    "TelegramAdapter",
    "TelegramStartError",
    "api_error",
]

log = logging.getLogger(__name__)

# PTB logs the failed deleteWebhook that begins a poll with its traceback, at ERROR; botd
# tells that failure in a line of its own (a start error, or the poller lease given up).
not_botds_concern("telegram.ext", "Network Retry Loop (Bootstrap delete Webhook)")

UNANSWERED_TTLS = 2
"""Lease TTLs past a long poll's own timeout that Telegram may leave this node's polls
unanswered before the node gives the poller lease up (several nodes)."""
PLATFORM = "telegram"
"""The platform's name: a bot's channel name unless the wiring gives it another."""
TEXT_LIMIT = 4096
"""Telegram's message length limit, in UTF-16 code units of the text after entity parsing."""
ALLOWED_UPDATES = ("message", "edited_message", "callback_query")
"""The update kinds botd asks for: messages, their edits, and presses of its buttons."""

_App: TypeAlias = Application[Any, Any, Any, Any, Any, Any]


class TelegramAdapter:
    """A Telegram bot account as a ``ChannelAdapter``; see the module docstring.

    ``conflict_backoff`` is (first delay, cap) in seconds for 409 and stall retries;
    ``stall_grace`` is how long past its own timeout a long poll may go unanswered.
    """

    capabilities = Capabilities(
        text_limit=TEXT_LIMIT, markup=HTML, caption_limit=uploads.CAPTION_LIMIT
    )

    def __init__(
        self,
        token: str,
        *,
        channel: str = PLATFORM,
        offsets: Offsets | None = None,
        api_base_url: str = "https://api.telegram.org",
        account_id: str = "default",
        poll_timeout: int = 30,
        conflict_backoff: tuple[float, float] = (1.0, 30.0),
        stall_grace: float = 15.0,
        on_down: Callable[[str], None] | None = None,
        command_menu: bool = True,
        pair_in_menu: bool = False,
        link: PlatformLink | None = None,
        leases: LeaseKeeper | None = None,
        mode: Literal["polling", "webhook"] = "polling",
        webhook_url: str | None = None,
        webhook_secret: str | None = None,
        listen: tuple[str, int, str] = ("127.0.0.1", 8443, "/telegram"),
        http: Routes | None = None,
        shared_rate: SharedRate | None = None,
        held_back: Callable[[InboundMessage], Awaitable[object]] | None = None,
        link_previews: LinkPreviews | None = None,
        proxy: str | None = None,
    ) -> None:
        """``channel``: the name of the channel instance this bot is (its messages' and
        targets' ``channel``, the key of its offset and lease, its log lines' prefix).
        ``listen``: (host, port, path) Telegram's POSTs are taken on, a route on ``http``
        (botd's HTTP server: ``ChannelContext.http``), which webhook mode needs.
        ``leases``: this node's, when it is one of several: it polls only while it holds
        ``<channel>:<account>`` (webhook mode needs no lease: every node takes POSTs).
        ``shared_rate``: where the nodes share the bot's rate (``budget``; None: alone).
        ``held_back``: told of each message polling holds back behind one the sink refused
        (``ChannelContext.held_back``). ``link_previews``: the chats whose messages show
        no link preview (None: every chat's do). ``proxy``: the section's ``proxy:`` (a URL,
        ``direct``; None: the environment's), for every request to the Bot API."""
        if mode == "webhook" and not (webhook_url and webhook_secret):
            raise ValueError("Telegram's webhook mode needs webhook_url and webhook_secret")
        if mode == "webhook" and http is None:
            raise ValueError("Telegram's webhook mode needs an HTTP server to take the POSTs")
        self._mode = mode
        self._webhook_url = webhook_url
        self._webhook_secret = webhook_secret or ""
        self._listen = listen
        self._http = http
        self._webhook: Route | None = None
        self._token = token
        self._link = link or PlatformLink()
        self._command_menu = command_menu
        self._pair_in_menu = pair_in_menu
        """Whether the menu lists ``/pair`` (owners approve pairing codes in the chat)."""
        self._menu_task: asyncio.Task[bool] | None = None
        self._on_down = on_down
        self._offsets = offsets
        self._api_base_url = api_base_url.rstrip("/")
        self._proxy = proxy
        self.name = channel
        self.account_id = account_id
        self._label = f"{channel}[{account_id}]"
        """What the log lines of this bot start with: ``telegram[default]``."""
        self._poll_timeout = poll_timeout
        self._conflict_backoff = conflict_backoff
        self._stall_grace = stall_grace
        self._app: _App | None = None
        self._bot: PollingBot | None = None
        self._leases = leases if mode == "polling" else None
        self._holding: asyncio.Task[None] | None = None
        self._shared_rate = shared_rate
        self.budget: Budget | None = None
        """The bot's budget (``budget``) while started: every Bot API call takes its turn."""
        self._outbound = TelegramOutbound(
            self._require_bot,
            channel=channel,
            text_limit=self.capabilities.text_limit,
            link_previews=link_previews or LinkPreviews(),
        )
        self._inbound = TelegramInbound(
            self._require_bot,
            self._outbound,
            channel=channel,
            account_id=account_id,
            label=self._label,
            mode=mode,
            offsets=offsets,
            held_back=held_back,
        )

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self, sink: InboundSink) -> None:
        if self._app is not None:
            raise RuntimeError(f"{self.name} adapter already started")
        quiet_non_json_error_tracebacks()
        saved = (
            await self._offsets.get_offset(self.name, self.account_id) if self._offsets else None
        )
        limiter = TelegramBudget(self._token.split(":")[0], self._shared_rate)
        self.budget = limiter.budget
        bot = PollingBot(
            self._token,
            base_url=f"{self._api_base_url}/bot",
            base_file_url=f"{self._api_base_url}/file/bot",
            # botd's budget, answers first; a 429 is waited out for its chat (outbound.py).
            rate_limiter=limiter,
            # A conversation's lease, given with a send, is checked again as each request
            # is written (see transport.py): a send held up past the lease's end is not
            # written.
            request=sends_request(self._api_base_url, self._proxy),
            # PTB's own setting for the long poll, with botd's shared TLS context.
            get_updates_request=updates_request(self._proxy),
            resume_offset=int(saved) if saved else 0,
            label=self._label,
            backoff=self._poll_backoff(),
            stall_grace=self._stall_grace,
            on_down=self._on_down,
            link=self._link,
        )
        # No job queue: botd schedules its own jobs, and PTB's would start a second APScheduler
        # (a second "Scheduler started" in the log) that runs nothing.
        app: _App = Application.builder().bot(bot).job_queue(None).build()
        self._inbound.install(app, sink)
        self._app, self._bot = app, bot
        try:
            await app.initialize()
            await app.start()
            if self._mode == "webhook":
                await self._start_webhook(bot)
            elif self._leases is None:
                await self._start_polling(app)
        except TelegramError as exc:
            await self.stop()
            reason = proxy_failure(exc, self._proxy, f"channels.{self.name}.proxy")
            reason = reason or start_failure(exc, self._api_base_url)
            raise TelegramStartError("start", reason) from exc
        except OSError as exc:  # the webhook's port is taken or not ours to listen on
            await self.stop()
            host, port, _ = self._listen
            raise TelegramStartError(
                "start", f"cannot listen for the webhook on {host}:{port}: {exc.strerror or exc}"
            ) from exc
        except BaseException:
            await self.stop()
            raise
        how = "polling" if self._mode == "polling" else f"webhook {self._webhook_url}"
        if self._leases is not None:
            how = f"polling while this node holds {self.lease_name}"
            self._holding = asyncio.create_task(
                hold_lease(self._leases, self.lease_name, "poller", self._poll_while_held),
                name=f"{self._label}:poller",
            )
        log.info("%s: %s as @%s", self._label, how, bot.username)
        if self._command_menu:
            self._menu_task = asyncio.create_task(
                publish_commands(bot, self._label, pair=self._pair_in_menu),
                name=f"{self._label}:menu",
            )

    @property
    def lease_name(self) -> str:
        """The lease under which one node of several polls this account:
        ``<channel>:<account>`` (``telegram:default``)."""
        return f"{self.name}:{self.account_id}"

    def input_leases(self) -> list[str]:
        """``LeasedInput``: the poller's lease, when this node polls under one."""
        return [self.lease_name] if self._leases is not None else []

    async def _start_polling(self, app: _App) -> None:
        assert app.updater is not None
        await app.updater.start_polling(
            timeout=self._poll_timeout,
            allowed_updates=list(ALLOWED_UPDATES),
            error_callback=self._on_polling_error,
        )

    async def _poll_while_held(self, lease: Lease) -> None:
        """Poll from the stored offset until cancelled (the lease lost or the channel
        stopping); then stop polling. PTB's last confirming ``getUpdates`` goes out only while
        the lease still holds (a clean stop), never once it was lost."""
        app, bot = self._app, self._bot
        assert app is not None and bot is not None and app.updater is not None
        saved = (
            await self._offsets.get_offset(self.name, self.account_id) if self._offsets else None
        )
        bot.poll_under(lease, int(saved) if saved else 0)
        try:
            try:
                await self._start_polling(app)
            except NetworkError as exc:
                # PTB's start (its deleteWebhook) got no answer: another node may reach
                # Telegram, so the lease goes to it as when the polls go unanswered.
                raise PlatformUnreachable(
                    f"Telegram did not answer before the first poll ({exc.message})"
                ) from exc
            await self._while_answered(bot)
        finally:
            if app.updater.running:
                await app.updater.stop()

    async def _while_answered(self, bot: PollingBot) -> None:
        """Return never; raise ``PlatformUnreachable`` once Telegram has left this node's
        polls unanswered for ``UNANSWERED_TTLS`` lease TTLs past a poll's own timeout, so
        that the poller lease goes to a node that can reach Telegram."""
        assert self._leases is not None
        bound = UNANSWERED_TTLS * self._leases.ttl
        while True:
            await asyncio.sleep(self._leases.renew_every)
            silent = bot.unanswered_for(time.monotonic())
            if silent > bound:
                raise PlatformUnreachable(
                    f"Telegram left this node's polls unanswered for {silent:.0f} s "
                    f"past their timeout"
                )

    async def _stop_holding(self) -> None:
        holding, self._holding = self._holding, None
        if holding is not None:
            holding.cancel()
            await asyncio.wait({holding})

    async def _start_webhook(self, bot: PollingBot) -> None:
        """Serve the route, then have Telegram POST the updates to it (``setWebhook``)."""
        from .webhook import WebhookHandler  # aiohttp: polling needs none

        assert self._http is not None
        host, port, path = self._listen
        handler = WebhookHandler(self._on_webhook_update, secret=self._webhook_secret)
        self._webhook = await self._http.add("POST", path, handler, host=host, port=port)
        assert self._webhook_url is not None
        await bot.set_webhook(
            self._webhook_url,
            secret_token=self._webhook_secret,
            allowed_updates=list(ALLOWED_UPDATES),
            max_connections=1,  # one update at a time, in order, as polling hands them on
        )
        self._link.reachable()

    @property
    def webhook_port(self) -> int | None:
        """The port the webhook is served on, once started (None: polling)."""
        return None if self._webhook is None else self._webhook.port

    async def _on_webhook_update(self, data: dict[str, Any]) -> bool:
        """One update Telegram POSTed: through the handlers; True when nothing of it was
        refused (accepted, or not a message botd takes)."""
        app, bot = self._app, self._bot
        if app is None or bot is None:
            return False  # stopping: Telegram sends it again to the next start
        return await self._inbound.process_posted(app, bot, data)

    def _poll_backoff(self) -> Backoff:
        """Waits between failed polls: doubling from the first delay to the cap, jittered."""
        first, cap = self._conflict_backoff
        return Backoff(first, factor=2.0, cap=cap, jitter=0.5)

    async def stop_inbound(self) -> None:
        """Stop polling (or listening for the webhook); updates not fetched (not answered)
        yet stay with Telegram for the next start."""
        webhook, self._webhook = self._webhook, None
        if webhook is not None:
            await webhook.remove()
        await self._stop_holding()
        app = self._app
        if app is not None and app.updater is not None and app.updater.running:
            await app.updater.stop()

    async def stop(self) -> None:
        webhook, self._webhook = self._webhook, None
        if webhook is not None:
            await webhook.remove()
        await self._stop_holding()
        menu, self._menu_task = self._menu_task, None
        if menu is not None:
            menu.cancel()
            await asyncio.wait({menu})
        app, self._app = self._app, None
        if app is not None:
            # The bot stays usable meanwhile: PTB finishes the updates it already fetched.
            await self._shutdown(app)
            self._bot = None

    async def _shutdown(self, app: _App) -> None:
        if app.updater is not None and app.updater.running:
            await app.updater.stop()
        if app.running:
            await app.stop()
        await app.shutdown()

    def _require_bot(self) -> PollingBot:
        if self._bot is None:
            # Starting, or being restarted after it went down: a send waits (is retried) for it.
            raise ChannelError(f"{self.name} is not connected (yet)", retryable=True)
        return self._bot

    def _on_polling_error(self, exc: TelegramError) -> None:
        log.warning("%s: getUpdates failed: %s", self._label, exc.message)

    # --- outbound ---------------------------------------------------------------------------

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        return await self._outbound.send(target, markdown, scope=scope)

    async def send_buttons(
        self,
        target: Target,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """``send``, with ``rows`` as the inline keyboard of its last message."""
        return await self._outbound.send_buttons(target, markdown, rows, scope=scope)

    async def edit_buttons(
        self,
        ref: MessageRef,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> None:
        """``ref``'s message shows ``markdown`` (its first message's worth) with ``rows`` as
        its inline keyboard (none: the keyboard removed)."""
        await self._outbound.edit_buttons(ref, markdown, rows, scope=scope)

    async def send_file(
        self,
        target: Target,
        file: OutboundFile,
        caption: str = "",
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        return await self._outbound.send_file(target, file, caption, scope=scope)

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """Show ``markdown`` in ``ref``'s message; text past one message follows in new ones."""
        return await self._outbound.edit(ref, markdown, scope=scope)

    def can_draft(self, target: Target) -> bool:
        """Drafts go to private chats only, whose ids are the users' (positive) ids."""
        return self._outbound.can_draft(target)

    async def draft(self, target: Target, draft_id: int, markdown: str) -> None:
        """Show ``markdown``'s first message as the draft ``draft_id`` (``sendMessageDraft``):
        a temporary preview that the chat drops once a message is posted (or after 30 s)."""
        await self._outbound.draft(target, draft_id, markdown)

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        """Delete ``ref``'s message; one that is already gone counts as deleted."""
        await self._outbound.delete(ref, scope=scope)

    async def react(self, ref: MessageRef, emoji: str) -> None:
        await self._outbound.set_reaction(ref, emoji)

    async def set_reaction(
        self, ref: MessageRef, emoji: str | None, *, replacing: str | None = None
    ) -> None:
        """``setMessageReaction``: a bot has one reaction per message, and the call replaces
        it (``replacing`` needs no call of its own); None takes it away."""
        await self._outbound.set_reaction(ref, emoji, replacing=replacing)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        return await telegram_download(self._require_bot(), attachment, max_bytes, self._proxy)

    async def typing(self, target: Target) -> None:
        await self._outbound.typing(target)

    async def is_chat_admin(self, chat_id: str, user_id: str) -> bool:
        """Whether ``user_id`` is one of group ``chat_id``'s administrators (its creator
        too), by ``getChatAdministrators`` (``ChatAdmins``). A private chat has none."""
        if not chat_id.startswith("-"):
            return False  # a private chat's id is its user's: no administrators
        try:
            members = await self._require_bot().get_chat_administrators(int(chat_id))
        except TelegramError as exc:
            raise api_error("getChatAdministrators", exc) from None
        return any(str(member.user.id) == user_id for member in members)
