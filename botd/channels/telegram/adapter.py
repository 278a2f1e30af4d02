"""Telegram: long polling with python-telegram-bot, inside the daemon's own event loop.

The PTB ``Application`` is driven by hand (``initialize``/``start``/``updater.start_polling``,
never ``run_polling``, which would own the loop and its signals). One adapter is one bot,
the channel instance it is built as (``channel``: ``telegram``, or another section's name).
Text messages, commands included, become ``InboundMessage``s of that channel keyed
``<channel>:<chat>``, or ``<channel>:<chat>:topic:<thread>`` in forum supergroups
(``telegram_conversation_key``; one session per topic; messages of the General topic carry
no thread id and map to topic 1).

Telegram forgets an update once a ``getUpdates`` asks for a higher offset. PTB asks for the
next batch as soon as it queued the last one; here each ``getUpdates`` first waits until every
update it would confirm was handled (the sink returned, i.e. the router accepted the message
into the durable inbox) and confirms no further than that, so an update botd had not accepted
when it died is delivered again at the next start. (At shutdown, PTB's last confirming call
waits a bounded time and confirms only what was handled.) The handled offset is also saved
(``offsets``) and the first ``getUpdates`` resumes from it; each message carries
``chat:message_id`` as its dedupe key, so the router drops a message delivered twice. The
parts of an album, and of a long text the app split (``pastes``), share an album id:
the sessions answer them as one.

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

A 409 Conflict on ``getUpdates`` (another poller on the same token) is logged in Telegram's
words and retried with capped, jittered backoff; polling never gives up (a token revoked
while running is reported through ``on_down``, and the daemon restarts the channel); whether
Telegram answers the polls goes to ``link`` (a ``PlatformLink``). Outgoing
text is rendered to Telegram's HTML subset; markup Telegram refuses ("can't parse entities") is sent
again as plain text. A 429 is waited out for its chat only (others go on). Other failures raise
``TelegramAPIError`` (a ``ChannelError``) with Telegram's description, marked retryable for a
5xx, a 429 or a lost connection and not for Telegram's refusals (see ``api_error`` in
``errors``); a start that fails raises ``TelegramStartError`` (a
``ChannelStartError``) saying whether the token was refused or the URL is wrong; no PTB object
leaves this module.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar

from telegram import (
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    MessageEntity,
    ReactionTypeEmoji,
    ReplyParameters,
    Update,
)
from telegram.constants import ChatAction, ChatType, ParseMode
from telegram.error import (
    BadRequest,
    Conflict,
    InvalidToken,
    RetryAfter,
    TelegramError,
)
from telegram.ext import (
    AIORateLimiter,
    Application,
    CallbackQueryHandler,
    ContextTypes,
    ExtBot,
    MessageHandler,
    TypeHandler,
    filters,
)
from telegram.request import HTTPXRequest

from ...buttons.layout import chosen_label
from ...chat import (
    Attachment,
    Button,
    Capabilities,
    InboundMessage,
    MessageRef,
    Press,
    PressAnswer,
    Target,
)
from ...cluster.holding import PlatformUnreachable, hold_lease
from ...cluster.leases import Lease, LeaseKeeper
from ...net.tls import verified_context
from ...retry import Backoff, retry_after
from ...store.errors import StoreError
from ...store.protocols import Offsets
from ...text.markup import RenderedChunk
from ..base import (
    InboundSink,
    OutboundFile,
    PlatformLink,
    SendScope,
    fence_of,
    without_mention,
)
from ..errors import ChannelError
from . import uploads
from .errors import (
    TelegramAPIError,
    TelegramStartError,
    api_error,
    quiet_non_json_error_tracebacks,
    start_failure,
)
from .inbound_media import MEDIA, telegram_attachments, telegram_download
from .markup import HTML
from .menu import publish_commands
from .pastes import SplitPastes
from .quotes import quote_of
from .reactions import telegram_reaction
from .targets import telegram_conversation_key
from .transport import fenced_requests, sends_request

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

_T = TypeVar("_T")
_MAX_FLOOD_RETRIES = 3
_CONFIRM_WAIT_AT_STOP = 5.0
UNANSWERED_TTLS = 2
"""Lease TTLs past a long poll's own timeout that Telegram may leave this node's polls
unanswered before the node gives the poller lease up (several nodes)."""
"""How long PTB's last confirming ``getUpdates`` at shutdown waits for updates in hand."""

PLATFORM = "telegram"
"""The platform's name: a bot's channel name unless the wiring gives it another."""
TEXT_LIMIT = 4096
"""Telegram's message length limit, in UTF-16 code units of the text after entity parsing."""
GENERAL_TOPIC = "1"
"""A forum's General topic: its messages carry no thread id and sends must omit it."""
ALLOWED_UPDATES = ("message", "edited_message", "callback_query")
"""The update kinds botd asks for: messages, their edits, and presses of its buttons."""
CHOSEN_DATA = "botd:chosen"
"""The callback data of the button that shows a choice made (a press of it: "Already answered")."""

_App: TypeAlias = Application[Any, Any, Any, Any, Any, Any]


def _is_parse_error(exc: BadRequest) -> bool:
    return "can't parse entities" in exc.message.lower()


def _is_not_modified(exc: BadRequest) -> bool:
    return "message is not modified" in exc.message.lower()


class _PollingBot(ExtBot[int]):
    """PTB's bot, with the polling policies PTB has no setting for.

    The first ``getUpdates`` resumes from the saved offset. A 409 Conflict (another poller
    on the token) is waited out with jittered backoff and reported as "no updates", instead
    of PTB's retry loop logging a traceback on every attempt. A long poll that Telegram (or
    a proxy) accepts but never answers is abandoned after its timeout plus ``stall_grace``
    and retried the same way, so a stalled connection cannot silence the bot. Every poll
    tells ``link`` whether Telegram answered: a failed one (no connection, a 5xx, a stall, a
    409) that it did not, one that returned that it did.
    """

    def __init__(
        self,
        *args: Any,
        resume_offset: int,
        label: str,
        backoff: Backoff,
        stall_grace: float,
        on_down: Callable[[str], None] | None = None,
        link: PlatformLink | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._on_down = on_down
        self._link = link or PlatformLink()
        self._resume_offset = resume_offset
        self._label = label
        self._backoff = backoff
        self._stall_grace = stall_grace
        # Every update below this id went through the handlers; the first that failed is
        # asked for again (and what follows it: the router drops those as seen).
        self._handled_below = resume_offset
        self._failed_from: int | None = None
        self._progress = asyncio.Event()
        self._lease: Lease | None = None
        self._answered_at = time.monotonic()
        """When Telegram last answered a long poll (a 409 is an answer too)."""
        self._poll_seconds = 0.0
        """The long poll's own timeout: how long a healthy poll may go unanswered."""

    def unanswered_for(self, now: float) -> float:
        """Seconds past a long poll's own timeout that Telegram has not answered one."""
        return max(0.0, now - self._answered_at - self._poll_seconds)

    def poll_under(self, lease: Lease, offset: int) -> None:
        """Poll as the holder of ``lease`` (several nodes), from the stored ``offset``: no
        ``getUpdates`` goes out once the lease is past its deadline, and the offset is saved
        only while it holds."""
        self._lease = lease
        self._answered_at = time.monotonic()
        self._resume_offset = max(self._resume_offset, offset)
        self._handled_below = max(self._handled_below, offset)
        if self._failed_from is not None and self._failed_from < offset:
            self._failed_from = None

    @property
    def holding(self) -> bool:
        """Whether this node may poll and save the offset now (always on a single node)."""
        lease = self._lease
        return lease is None or lease.valid_for(time.monotonic()) > 0

    async def _while_not_holding(self) -> bool:
        """Wait while the lease is past its deadline but not yet renewed or lost; True when
        it is lost (polling is being stopped: Telegram is not asked again)."""
        lease = self._lease
        while lease is not None and not self.holding:
            if lease.lost.is_set():
                return True
            try:
                async with asyncio.timeout(0.2):
                    await lease.lost.wait()
            except TimeoutError:
                pass
        return False

    @property
    def confirmed(self) -> int:
        """The offset Telegram may be told: every update below it was accepted or ignored."""
        return self._handled_below if self._failed_from is None else self._failed_from

    def held_back(self, update_id: int) -> bool:
        """Whether ``update_id`` comes after one that was not accepted: it is asked for
        again with it, so handing it on now would put it before that one."""
        return self._failed_from is not None and update_id > self._failed_from

    def handled(self, update_id: int, *, ok: bool | None = None) -> None:
        """An update went through the handlers; ``ok``: its message was accepted (True) or
        its sink raised (False); None: no message of it went to the sink."""
        self._handled_below = max(self._handled_below, update_id + 1)
        if ok is False:
            first = self._failed_from
            self._failed_from = update_id if first is None else min(first, update_id)
        elif ok and self._failed_from == update_id:
            self._failed_from = None
        self._progress.set()

    async def _until_handled(self, offset: int, limit: float | None) -> None:
        """Wait until every update below ``offset`` was handled (or ``limit`` seconds)."""
        try:
            async with asyncio.timeout(limit):
                while self._handled_below < offset:
                    self._progress.clear()
                    await self._progress.wait()
        except TimeoutError:
            log.warning(
                "%s: updates below %d not handled in time; left with Telegram",
                self._label,
                offset,
            )

    async def get_updates(self, *args: Any, **kwargs: Any) -> tuple[Update, ...]:
        poll = kwargs.get("timeout") or 0
        poll_seconds = poll.total_seconds() if hasattr(poll, "total_seconds") else float(poll)
        wanted = int(kwargs.get("offset") or 0)
        if not self.holding and await self._while_not_holding():
            return ()  # the lease went to another node: it polls now
        # Confirm to Telegram only what was handled: the rest is delivered again.
        await self._until_handled(wanted, None if poll_seconds else _CONFIRM_WAIT_AT_STOP)
        if self._failed_from is not None and poll_seconds:
            await self._back_off(f"update {self._failed_from} was not accepted; asking again")
        kwargs["offset"] = max(min(wanted, self.confirmed), self._resume_offset)
        if poll_seconds:
            self._poll_seconds = poll_seconds
        try:
            updates = await asyncio.wait_for(
                super().get_updates(*args, **kwargs), poll_seconds + self._stall_grace
            )
        except Conflict as exc:
            if not poll_seconds:
                raise  # PTB's final offset-committing call at shutdown: don't wait
            self._answered_at = time.monotonic()  # Telegram answered: another poller
            self._link.unreachable(f"getUpdates refused: {exc.message}")
            await self._back_off(f"getUpdates refused ({exc.message})")
            return ()
        except TimeoutError:
            stalled = f"getUpdates stalled for {poll_seconds + self._stall_grace:.0f}s"
            self._link.unreachable(stalled)
            await self._back_off(stalled)
            return ()
        except InvalidToken as exc:  # revoked while running: the daemon restarts the channel
            if not poll_seconds or self._on_down is None:
                raise  # (PTB would end polling with a traceback)
            self._on_down(f"getUpdates: the token was rejected ({exc.message})")
            await self._back_off(f"getUpdates refused the token ({exc.message})")
            return ()
        except TelegramError as exc:  # PTB's loop logs it (error_callback) and polls again
            if poll_seconds:
                self._link.unreachable(f"getUpdates failed: {exc.message}")
            raise
        if poll_seconds:
            self._answered_at = time.monotonic()
            self._link.reachable()
        if self._backoff.failures:
            log.info("%s: polling again", self._label)
            self._backoff.reset()
        return updates

    async def _back_off(self, what: str) -> None:
        delay = self._backoff.next_delay()
        log.warning(
            "%s: %s; retry %d in %.1fs",
            self._label,
            what,
            self._backoff.failures,
            delay,
        )
        await asyncio.sleep(delay)


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
        link: PlatformLink | None = None,
        leases: LeaseKeeper | None = None,
        mode: Literal["polling", "webhook"] = "polling",
        webhook_url: str | None = None,
        webhook_secret: str | None = None,
        listen: tuple[str, int, str] = ("127.0.0.1", 8443, "/telegram"),
        http: Routes | None = None,
    ) -> None:
        """``channel``: the name of the channel instance this bot is (its messages' and
        targets' ``channel``, the key of its offset and lease, its log lines' prefix).
        ``listen``: (host, port, path) Telegram's POSTs are taken on, a route on ``http``
        (botd's HTTP server: ``ChannelContext.http``), which webhook mode needs.
        ``leases``: this node's, when it is one of several: it polls only while it holds
        ``<channel>:<account>`` (webhook mode needs no lease: every node takes POSTs)."""
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
        self._refused: set[int] = set()
        """Updates whose message the sink did not take (webhook mode answers them 503)."""
        self._token = token
        self._link = link or PlatformLink()
        self._command_menu = command_menu
        self._menu_task: asyncio.Task[bool] | None = None
        self._pastes = SplitPastes()
        self._on_down = on_down
        self._offsets = offsets
        self._api_base_url = api_base_url.rstrip("/")
        self.name = channel
        self.account_id = account_id
        self._label = f"{channel}[{account_id}]"
        """What the log lines of this bot start with: ``telegram[default]``."""
        self._poll_timeout = poll_timeout
        self._conflict_backoff = conflict_backoff
        self._chat_paused_until: dict[str, float] = {}
        self._stall_grace = stall_grace
        self._app: _App | None = None
        self._bot: _PollingBot | None = None
        self._sink: InboundSink | None = None
        self._leases = leases if mode == "polling" else None
        self._holding: asyncio.Task[None] | None = None

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self, sink: InboundSink) -> None:
        if self._app is not None:
            raise RuntimeError(f"{self.name} adapter already started")
        quiet_non_json_error_tracebacks()
        saved = (
            await self._offsets.get_offset(self.name, self.account_id) if self._offsets else None
        )
        bot = _PollingBot(
            self._token,
            base_url=f"{self._api_base_url}/bot",
            base_file_url=f"{self._api_base_url}/file/bot",
            # No retries in the limiter: its RetryAfter handling pauses every chat, and one
            # group's flood wait must not silence the others (see _per_chat).
            rate_limiter=AIORateLimiter(max_retries=0),
            # A conversation's lease, given with a send, is checked again as each request
            # is written (see transport.py): a send held up past the lease's end is not
            # written.
            request=sends_request(self._api_base_url),
            # PTB's own setting for the long poll, with botd's shared TLS context.
            get_updates_request=HTTPXRequest(
                connection_pool_size=1, httpx_kwargs={"verify": verified_context()}
            ),
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
        taken = filters.TEXT | MEDIA  # files come with their caption as the text
        updates = filters.UpdateType.MESSAGE | filters.UpdateType.EDITED_MESSAGE
        app.add_handler(MessageHandler(updates & taken, self._on_text))
        app.add_handler(CallbackQueryHandler(self._on_press))
        # A later group sees every update once the handlers above are done with it.
        app.add_handler(TypeHandler(Update, self._on_processed), group=1)
        app.add_error_handler(self._on_error)
        self._sink = sink
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
            raise TelegramStartError("start", start_failure(exc, self._api_base_url)) from exc
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
                publish_commands(bot, self._label), name=f"{self._label}:menu"
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
            await self._start_polling(app)
            await self._while_answered(bot)
        finally:
            if app.updater.running:
                await app.updater.stop()

    async def _while_answered(self, bot: _PollingBot) -> None:
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

    async def _start_webhook(self, bot: _PollingBot) -> None:
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
        if app is None or bot is None or self._sink is None:
            return False  # stopping: Telegram sends it again to the next start
        update = Update.de_json(data, bot)
        self._refused.discard(update.update_id)
        await app.process_update(update)
        if update.update_id in self._refused:
            self._refused.discard(update.update_id)
            return False
        return True

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

    def _require_bot(self) -> _PollingBot:
        if self._bot is None:
            # Starting, or being restarted after it went down: a send waits (is retried) for it.
            raise ChannelError(f"{self.name} is not connected (yet)", retryable=True)
        return self._bot

    # --- inbound ------------------------------------------------------------------------------

    async def _on_text(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message or update.edited_message
        if message is None or self._sink is None:
            return
        bot = self._require_bot()
        sender = message.from_user
        if sender is not None and sender.id == bot.id:
            return
        chat_id = str(message.chat.id)
        thread_id: str | None = None
        if message.chat.is_forum:
            topic = message.message_thread_id if message.is_topic_message else None
            thread_id = str(topic) if topic else GENERAL_TOPIC
        key = telegram_conversation_key(self.name, chat_id, thread_id)
        reply = _replied_to(message)
        if self._mode != "webhook" and bot.held_back(update.update_id):
            # An earlier update of this batch was refused (the store is away): Telegram
            # delivers this one again after it, in order; taking it now would answer it first.
            bot.handled(update.update_id, ok=False)
            return
        try:
            await self._deliver(message, chat_id, thread_id, key, reply)
        except Exception:
            bot.handled(update.update_id, ok=False)  # not accepted: ask for it again
            if self._mode == "webhook":
                self._refused.add(update.update_id)
            raise
        bot.handled(update.update_id, ok=True)

    async def _on_press(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A button under one of the bot's messages pressed: handed to the sink like a
        message from the presser, then answered (``answerCallbackQuery``) as decided."""
        query = update.callback_query
        if query is None or self._sink is None:
            return
        bot = self._require_bot()
        if self._mode != "webhook" and bot.held_back(update.update_id):
            bot.handled(update.update_id, ok=False)
            return
        press = self._press_message(query)
        try:
            decided = None if press is None else await self._sink(press)
        except Exception:
            bot.handled(update.update_id, ok=False)
            if self._mode == "webhook":
                self._refused.add(update.update_id)
            raise
        bot.handled(update.update_id, ok=True)
        answer = getattr(decided, "answer", None)
        if not isinstance(answer, PressAnswer):
            answer = PressAnswer()
        try:
            await query.answer(text=answer.text)
        except TelegramError as exc:
            log.warning("%s: answering a button press failed: %s", self.name, exc.message)
        if answer.chosen and press is not None and isinstance(query.message, Message):
            await self._show_choice(query.message, answer.label, press.sender_name)

    def _press_message(self, query: CallbackQuery) -> InboundMessage | None:
        """The press as the presser's message (None: not of a message of the bot's chats)."""
        message = query.message
        if message is None or query.data is None:
            return None
        chat_id = str(message.chat.id)
        thread_id: str | None = None
        if message.chat.is_forum:
            topic = message.message_thread_id if isinstance(message, Message) else None
            thread_id = str(topic) if topic else GENERAL_TOPIC
        key = telegram_conversation_key(self.name, chat_id, thread_id)
        sender = query.from_user
        return InboundMessage(
            channel=self.name,
            chat_id=chat_id,
            sender_id=str(sender.id),
            text="",  # the router names the button, as botd recorded it
            message_id=f"press:{query.id}",
            conversation_key=key,
            account_id=self.account_id,
            thread_id=thread_id,
            sender_name=sender.full_name,
            is_direct=message.chat.type == ChatType.PRIVATE,
            mentions_bot=True,
            dedupe_keys=(f"press:{query.id}",),
            bot_name=self._require_bot().username or "",
            press=Press(query.id, query.data, str(message.message_id)),
        )

    async def _show_choice(self, message: Message, label: str, presser: str) -> None:
        """The buttons give way to one showing the choice made (``label``, as botd put it
        there) and who made it."""
        chosen = _keyboard([[Button(chosen_label(label, presser), CHOSEN_DATA)]])
        try:
            await self._per_chat(
                str(message.chat.id),
                partial(
                    self._require_bot().edit_message_reply_markup,
                    message.chat.id,
                    message.message_id,
                    reply_markup=chosen,
                ),
            )
        except TelegramError as exc:
            log.warning("%s: showing the choice made failed: %s", self.name, exc.message)

    async def _deliver(
        self,
        message: Message,
        chat_id: str,
        thread_id: str | None,
        key: str,
        reply: Message | None,
    ) -> None:
        sender, bot = message.from_user, self._require_bot()
        assert self._sink is not None
        text = self._without_own_mention(message.text or message.caption or "")
        sender_key, mid = str(sender.id) if sender else "", str(message.message_id)
        key_of, album, edit = f"{chat_id}:{mid}", None, message.edit_date
        if edit is not None:  # each edit is its own, never part of an album or a paste
            key_of += f":edit:{int(edit.timestamp())}"
        else:
            album = message.media_group_id or self._pastes.paste_of(
                chat_id, sender_key, mid, text, message.date.timestamp()
            )
        await self._sink(
            InboundMessage(
                channel=self.name,
                chat_id=chat_id,
                sender_id=sender_key,
                text=text,
                message_id=mid,
                conversation_key=key,
                account_id=self.account_id,
                thread_id=thread_id,
                sender_name=sender.full_name if sender else "",
                is_direct=message.chat.type == ChatType.PRIVATE,
                mentions_bot=self._mentions_bot(message, reply),
                reply_to_message_id=str(reply.message_id) if reply else None,
                quoted=quote_of(message, reply, bot.id, bot.username or bot.first_name),
                dedupe_keys=(key_of,),
                bot_name=bot.username or "",
                attachments=telegram_attachments(message),
                album=album,
                edited=edit is not None,
            )
        )

    def _without_own_mention(self, text: str) -> str:
        """``text`` without ``@botname`` (kept in ``/cmd@botname``, which commands parse)."""
        name = self._require_bot().username
        if not name:
            return text
        return without_mention(text, rf"(?<![\w/])@{re.escape(name)}\b", re.IGNORECASE)

    def _mentions_bot(self, message: Message, reply: Message | None) -> bool:
        bot = self._require_bot()
        handle = f"@{bot.username}".lower()
        for entity, text in _entities(message):
            if entity.type == MessageEntity.MENTION and text.lower() == handle:
                return True
            if entity.type == MessageEntity.BOT_COMMAND and text.lower().endswith(handle):
                return True
            if (
                entity.type == MessageEntity.TEXT_MENTION
                and entity.user
                and entity.user.id == bot.id
            ):
                return True
        return bool(reply and reply.from_user and reply.from_user.id == bot.id)

    async def _on_processed(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        bot = self._bot
        if bot is None:
            return
        bot.handled(update.update_id)
        if self._offsets is not None and self._mode == "polling" and bot.holding:
            self._offsets.set_offset_soon(self.name, self.account_id, str(bot.confirmed))

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        if isinstance(context.error, StoreError):
            # Already told in one line by the router (and the update is asked for again):
            # an expected fault, not a bug to trace.
            log.debug("%s: an update not taken: %s", self._label, context.error)
            return
        log.error("%s: handling an update failed", self._label, exc_info=context.error)

    def _on_polling_error(self, exc: TelegramError) -> None:
        log.warning("%s: getUpdates failed: %s", self._label, exc.message)

    # --- outbound -----------------------------------------------------------------------------

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        chunks = HTML.chunks(markdown, self.capabilities.text_limit)
        with fenced_requests(fence_of(scope)):
            return await self._send_chunks(target, chunks, reply_to=target.reply_to_id)

    async def send_buttons(
        self,
        target: Target,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """``send``, with ``rows`` as the inline keyboard of its last message."""
        chunks = HTML.chunks(markdown, self.capabilities.text_limit)
        with fenced_requests(fence_of(scope)):
            return await self._send_chunks(
                target, chunks, reply_to=target.reply_to_id, keyboard=_keyboard(rows)
            )

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
        with fenced_requests(fence_of(scope)):
            await self._edit_text(ref, markdown, _keyboard(rows) or InlineKeyboardMarkup([]))

    async def send_file(
        self,
        target: Target,
        file: OutboundFile,
        caption: str = "",
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        thread = target.thread_id if target.thread_id != GENERAL_TOPIC else None
        with fenced_requests(fence_of(scope)):
            return await uploads.send_file(
                self._require_bot(), self._per_chat, target, file, caption, thread=thread
            )

    async def _send_chunks(
        self,
        target: Target,
        chunks: list[RenderedChunk],
        *,
        reply_to: str | None,
        keyboard: InlineKeyboardMarkup | None = None,
    ) -> list[MessageRef]:
        bot = self._require_bot()
        thread = target.thread_id if target.thread_id != GENERAL_TOPIC else None
        chat = target.chat_id
        refs = []
        for number, chunk in enumerate(chunks, 1):
            extra: dict[str, Any] = {}
            if keyboard is not None and number == len(chunks):
                extra["reply_markup"] = keyboard  # the buttons go under the last message
            if thread is not None:
                extra["message_thread_id"] = int(thread)
            if reply_to is not None:
                extra["reply_parameters"] = ReplyParameters(
                    int(reply_to), allow_sending_without_reply=True
                )
            reply_to = None  # only the first message replies
            try:
                try:
                    sent = await self._per_chat(
                        chat,
                        partial(
                            bot.send_message, chat, chunk.text, parse_mode=ParseMode.HTML, **extra
                        ),
                    )
                except BadRequest as exc:
                    if not _is_parse_error(exc):
                        raise
                    log.warning(
                        "%s: markup refused (%s); sending plain text", self.name, exc.message
                    )
                    sent = await self._per_chat(
                        chat, partial(bot.send_message, chat, chunk.plain, **extra)
                    )
            except TelegramError as exc:
                raise api_error("sendMessage", exc) from exc
            refs.append(MessageRef(target, str(sent.message_id)))
        return refs

    async def _per_chat(self, chat_id: str, call: Callable[[], Awaitable[_T]]) -> _T:
        """``call()``, waiting out Telegram's 429s for this chat only.

        A flood wait pauses further requests to the same chat until it has passed; other
        chats go on. Gives up after ``_MAX_FLOOD_RETRIES`` waits (the error then reaches
        the caller in Telegram's words).
        """
        loop = asyncio.get_running_loop()
        for attempt in range(_MAX_FLOOD_RETRIES + 1):
            pause = self._chat_paused_until.get(chat_id, 0.0) - loop.time()
            if pause > 0:
                await asyncio.sleep(pause)
            try:
                return await call()
            except RetryAfter as exc:
                if attempt == _MAX_FLOOD_RETRIES:
                    raise
                wait = (retry_after(exc.retry_after) or 0.0) + 0.1
                self._chat_paused_until[chat_id] = loop.time() + wait
                log.warning(
                    "%s: flood wait %.1fs for chat %s (%s)",
                    self.name,
                    wait,
                    chat_id,
                    exc.message,
                )
        raise AssertionError("unreachable")

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """Show ``markdown`` in ``ref``'s message; text past one message follows in new ones."""
        with fenced_requests(fence_of(scope)):
            return await self._edit_text(ref, markdown)

    async def _edit_text(
        self, ref: MessageRef, markdown: str, keyboard: InlineKeyboardMarkup | None = None
    ) -> list[MessageRef]:
        bot = self._require_bot()
        chunks = HTML.chunks(markdown, self.capabilities.text_limit)
        if not chunks:
            return [ref]
        chat_id, message_id = ref.target.chat_id, int(ref.message_id)
        markup: dict[str, Any] = {} if keyboard is None else {"reply_markup": keyboard}
        try:
            try:
                await self._per_chat(
                    chat_id,
                    lambda: bot.edit_message_text(
                        chunks[0].text, chat_id, message_id, parse_mode=ParseMode.HTML, **markup
                    ),
                )
            except BadRequest as exc:
                if not _is_parse_error(exc):
                    raise
                await self._per_chat(
                    chat_id,
                    lambda: bot.edit_message_text(chunks[0].plain, chat_id, message_id, **markup),
                )
        except BadRequest as exc:
            if not _is_not_modified(exc):
                raise api_error("editMessageText", exc) from exc
        except TelegramError as exc:
            raise api_error("editMessageText", exc) from exc
        # Text that outgrew one message continues in new ones rather than being lost.
        return [ref, *await self._send_chunks(ref.target, chunks[1:], reply_to=None)]

    def can_draft(self, target: Target) -> bool:
        """Drafts go to private chats only, whose ids are the users' (positive) ids."""
        return target.chat_id.isdigit()

    async def draft(self, target: Target, draft_id: int, markdown: str) -> None:
        """Show ``markdown``'s first message as the draft ``draft_id`` (``sendMessageDraft``):
        a temporary preview that the chat drops once a message is posted (or after 30 s)."""
        bot = self._require_bot()
        chunks = HTML.chunks(markdown, self.capabilities.text_limit)
        if not chunks:
            return
        chat_id = int(target.chat_id)
        thread = target.thread_id if target.thread_id != GENERAL_TOPIC else None
        extra: dict[str, Any] = {}
        if thread is not None:
            extra["message_thread_id"] = int(thread)
        try:
            try:
                await self._per_chat(
                    target.chat_id,
                    partial(
                        bot.send_message_draft,
                        chat_id,
                        draft_id,
                        chunks[0].text,
                        parse_mode=ParseMode.HTML,
                        **extra,
                    ),
                )
            except BadRequest as exc:
                if not _is_parse_error(exc):
                    raise
                await self._per_chat(
                    target.chat_id,
                    partial(bot.send_message_draft, chat_id, draft_id, chunks[0].plain, **extra),
                )
        except TelegramError as exc:
            raise api_error("sendMessageDraft", exc) from exc

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        """Delete ``ref``'s message; one that is already gone counts as deleted."""
        bot = self._require_bot()
        chat_id, message_id = ref.target.chat_id, int(ref.message_id)
        try:
            with fenced_requests(fence_of(scope)):
                await self._per_chat(chat_id, lambda: bot.delete_message(chat_id, message_id))
        except BadRequest as exc:
            if "message to delete not found" not in exc.message.lower():
                raise api_error("deleteMessage", exc) from exc
        except TelegramError as exc:
            raise api_error("deleteMessage", exc) from exc

    async def react(self, ref: MessageRef, emoji: str) -> None:
        await self.set_reaction(ref, emoji)

    async def set_reaction(
        self, ref: MessageRef, emoji: str | None, *, replacing: str | None = None
    ) -> None:
        """``setMessageReaction``: a bot has one reaction per message, and the call replaces
        it (``replacing`` needs no call of its own); None takes it away. An emoji is sent as
        Telegram's list spells it (❤️ as ❤)."""
        bot = self._require_bot()
        # Given as a ReactionTypeEmoji: PTB would take a text off its own list for the id
        # of a custom emoji.
        reaction = [] if emoji is None else [ReactionTypeEmoji(telegram_reaction(emoji) or emoji)]
        try:
            await bot.set_message_reaction(ref.target.chat_id, int(ref.message_id), reaction)
        except TelegramError as exc:
            raise api_error("setMessageReaction", exc) from exc

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        return await telegram_download(self._require_bot(), attachment, max_bytes)

    async def typing(self, target: Target) -> None:
        bot = self._require_bot()
        # Unlike sends, chat actions take the General topic's id too.
        thread = int(target.thread_id) if target.thread_id is not None else None
        try:
            await bot.send_chat_action(target.chat_id, ChatAction.TYPING, message_thread_id=thread)
        except TelegramError as exc:
            raise api_error("sendChatAction", exc) from exc


def _keyboard(rows: Sequence[Sequence[Button]]) -> InlineKeyboardMarkup | None:
    """``rows`` as an inline keyboard, each button's value its callback data (None: none)."""
    if not rows:
        return None
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(b.label, callback_data=b.value) for b in row] for row in rows]
    )


def _replied_to(message: Message) -> Message | None:
    """The message this one answers; a topic's creation message does not count."""
    reply = message.reply_to_message
    if reply is None or reply.forum_topic_created is not None:
        return None
    return reply


def _entities(message: Message) -> list[tuple[MessageEntity, str]]:
    """Each entity of ``message`` with its text, as ``Message.parse_entities`` gives them.

    Offsets count UTF-16 code units; a lone surrogate in the text (which that method cannot
    encode) keeps its unit here, so the entities after it still land on their text.
    """
    caption = message.text is None  # a file's caption has its own entities
    raw = ((message.caption if caption else message.text) or "").encode(
        "utf-16-le", "surrogatepass"
    )
    return [
        (
            entity,
            raw[entity.offset * 2 : (entity.offset + entity.length) * 2].decode(
                "utf-16-le", "surrogatepass"
            ),
        )
        for entity in (message.caption_entities if caption else message.entities)
    ]
