"""Slack through slack-bolt (async): Socket Mode by default, or the HTTP Events API.

This module keeps the app's connection lifecycle: at start it learns who the bot is
(``auth.test``), then connects the socket (asking for the first Socket Mode URL itself, so a
refused app token fails the start; reconnecting later is the SDK's, and a ``SocketWatch``
tells ``link`` whether the socket is connected) or serves the HTTP Events API; at stop it
closes them, while posting keeps working. It composes the parts and hands each
``ChannelAdapter`` call to one:

- ``inbound`` (``SlackInbound``): bolt's listeners, acked only once the message was accepted
  into the durable inbox; twins and retries dropped; conversations keyed
  ``slack:<channel>`` or ``slack:<channel>:thread:<ts>``; what was missed read at each start
  and reconnect (``history``); where an answer goes (``reply_target``).
- ``outbound`` (``SlackOutbound``): ``chat.postMessage`` and the other calls that post,
  edit, delete, upload, react and show a thread's status, mass mentions defused unless
  ``allow_mass_mentions`` is set; ``streams`` (``SlackStreams``): native streams for
  ``delivery: stream``.
- ``webapi`` (``WebAPI``): the one Web API client and call, each call paced by the bot's budget
  (``budget``: answers first), the SDK's retries off and only a 429 retried; failures raise
  ``SlackError`` (``errors``) marked retryable or not.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp

from ...chat import Attachment, Button, Capabilities, InboundMessage, MessageRef, Target
from ...net.proxy import aiohttp_proxy, proxy_failure
from ...store.protocols import CatchUpMarks
from ..base import InboundSink, LinkPreviews, OutboundFile, PlatformLink, SendScope
from ..catch_up import CatchUpSettings
from .budget import slack_budget
from .commands import CommandReplies
from .errors import SlackError, SlackStartError
from .inbound import SlackInbound
from .inbound_media import slack_download
from .markup import MRKDWN
from .outbound import BUTTON_ACTION, TEXT_LIMIT, SlackOutbound
from .socket_mode import SocketWatch, socket_through
from .streams import SlackStreams
from .threads import DEFAULT_THREAD_CONTEXT
from .webapi import WebAPI

__all__ = ["BOLT_APP_NAME", "PLATFORM", "TEXT_LIMIT", "SlackAdapter"]

BOLT_APP_NAME = "botd.channels.slack.bolt"
"""The name botd gives its Bolt app: Bolt's loggers are named after it (a leaf of botd's)."""

log = logging.getLogger(__name__)

PLATFORM = "slack"
"""The platform's name: an app's channel name unless the wiring gives it another."""


class SlackAdapter:
    """See the module docstring."""

    # A reply piece is tagged with its key and looked for before it is posted again.
    capabilities = Capabilities(
        text_limit=TEXT_LIMIT, markup=MRKDWN, caption_limit=TEXT_LIMIT, resend_window=math.inf
    )

    def __init__(
        self,
        *,
        channel: str = PLATFORM,
        bot_token: str,
        app_token: str | None = None,
        signing_secret: str | None = None,
        mode: Literal["socket", "http"] = "socket",
        api_base_url: str = "https://slack.com/api/",
        reply_to_mode: Literal["off", "first", "all"] = "off",
        account_id: str = "default",
        http_host: str = "127.0.0.1",
        http_port: int = 3000,
        http_path: str = "/slack/events",
        allow_mass_mentions: bool = False,
        thread_context: int = DEFAULT_THREAD_CONTEXT,
        known_conversation: Callable[[str], Awaitable[bool]] | None = None,
        admits: Callable[[InboundMessage], bool] | None = None,
        link: PlatformLink | None = None,
        dm_threads: bool = False,
        catch_up: CatchUpSettings | None = None,
        marks: CatchUpMarks | None = None,
        link_previews: LinkPreviews | None = None,
        proxy: str | None = None,
    ) -> None:
        """``channel``: the name of the channel instance this app is (its messages' and
        targets' ``channel``, its conversation keys' start). ``dm_threads``: answer a DM
        message in a thread on it (``delivery: stream``, since a Slack stream needs a
        thread). ``catch_up``, ``marks``: what a start or a reconnect of the socket reads
        of what was missed (``history``; without ``marks``, nothing). ``link_previews``: the
        chats whose messages are posted without unfurls (None: every chat's unfurl).
        ``proxy``: the section's ``proxy:`` for the Web API and the Socket Mode socket (a
        URL, ``direct``; None: the environment's, as slack_sdk reads it)."""
        if mode == "socket" and not app_token:
            raise ValueError("Slack Socket Mode needs an app-level token (xapp-…)")
        if mode == "http" and not signing_secret:
            raise ValueError("the Slack HTTP Events API needs a signing secret")
        self.name = channel
        self._bot_token = bot_token
        self._app_token = app_token
        self._signing_secret = signing_secret
        self._mode = mode
        self._api_base_url = api_base_url
        self.account_id = account_id
        self._http_host = http_host
        self._http_port = http_port
        self._http_path = http_path
        # Every Web API call paced by the bot's budget, answers first (``budget``).
        self.api = WebAPI(
            bot_token=bot_token,
            base_url=api_base_url,
            budget=slack_budget(account_id),
            proxy=proxy,
        )
        self._proxy = proxy
        self.client = self.api.client
        self.http_port: int | None = None
        """The port the HTTP Events API listens on once started (useful with ``http_port=0``)."""
        self._socket: AsyncSocketModeHandler | None = None
        self._link = link or PlatformLink()
        self._socket_watch: SocketWatch | None = None
        self._runner: web.AppRunner | None = None
        command_replies = CommandReplies(
            proxy=None if proxy is None else aiohttp_proxy(proxy, api_base_url)
        )
        self.outbound = SlackOutbound(
            self.api,
            command_replies,
            channel=channel,
            allow_mass_mentions=allow_mass_mentions,
            link_previews=link_previews,
        )
        self.streams = SlackStreams(
            self.api, channel=channel, allow_mass_mentions=allow_mass_mentions
        )
        self.inbound = SlackInbound(
            self.api,
            self.outbound,
            self.streams,
            command_replies,
            channel=channel,
            account_id=account_id,
            reply_to_mode=reply_to_mode,
            dm_threads=dm_threads,
            thread_context=thread_context,
            known_conversation=known_conversation,
            admits=admits,
            catch_up=catch_up,
            marks=marks,
        )

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self, sink: InboundSink) -> None:
        """Learn who the bot is (``auth.test``), then connect the socket or serve HTTP.

        A refused bot token, an unreachable Slack or a busy HTTP port raises
        ``SlackStartError`` and leaves nothing open, and so does a refused app token: the
        first Socket Mode URL (``apps.connections.open``) is asked for here. (Reconnecting
        later is the SDK's: it logs failures and keeps retrying; a ``SocketWatch`` tells
        ``link`` whether the socket is connected meanwhile.)
        """
        try:
            await self._start(sink)
        except SlackStartError:
            await self.stop()
            raise
        except Exception as exc:
            # The proxy's refusal first: it can come as a Slack error (a 407), an aiohttp
            # one, or the SOCKS library's own.
            proxied = proxy_failure(exc, self._proxy, f"channels.{self.name}.proxy")
            if proxied is None and not isinstance(
                exc, SlackError | aiohttp.ClientError | OSError | TimeoutError
            ):
                await self.stop()
                raise
            await self.stop()
            if proxied is not None:
                raise SlackStartError("start", proxied) from exc
            if isinstance(exc, SlackError):
                error = exc.error
                if exc.method == "apps.connections.open" and not exc.retryable:
                    error = f"{error} (Slack refused the app-level token, app_token)"
                raise SlackStartError(exc.method, error) from exc
            reason = str(exc) or type(exc).__name__
            raise SlackStartError("start", f"cannot reach Slack: {reason}") from exc

    async def _start(self, sink: InboundSink) -> None:
        inbound = self.inbound
        inbound.sink = sink
        who = await self.api.call("auth.test", self.client.auth_test)
        inbound.bot_user_id = str(who.get("user_id") or "")
        inbound.bot_id = str(who.get("bot_id") or "")
        inbound.bot_name = str(who.get("user") or "")
        app = self._build_app()
        inbound.catching_up.close_gate()  # live messages wait for what was missed (``history``)
        if self._mode == "socket":
            # The client reconnects by itself; the watch tells botd whether it is connected.
            watch = self._socket_watch = SocketWatch(
                self._link, self.account_id, on_reconnect=inbound.catch_up
            )
            self._socket = handler = AsyncSocketModeHandler(
                app, app_token=self._app_token, logger=watch.logger
            )
            if self._proxy is not None:
                await socket_through(handler.client, aiohttp_proxy(self._proxy, self._api_base_url))
            # The SDK retries a refused app token for ever, logging it each time: ask for the
            # first socket URL here, so a refusal fails the start, and hand the URL over.
            opened = await self.api.call(
                "apps.connections.open",
                handler.client.web_client.apps_connections_open,
                app_token=self._app_token,
            )
            handler.client.wss_uri = str(opened["url"])
            await handler.connect_async()  # type: ignore[no-untyped-call]  # bolt leaves it unannotated
            watch.start(handler.client)
            log.info(
                "slack %s connected over Socket Mode as %s", self.account_id, inbound.bot_user_id
            )
            inbound.catch_up()
        else:
            self._runner = web.AppRunner(app.web_app(path=self._http_path))
            await self._runner.setup()
            site = web.TCPSite(self._runner, self._http_host, self._http_port)
            try:
                await site.start()
            except OSError as exc:
                where = f"{self._http_host}:{self._http_port}"
                raise SlackStartError("start", f"cannot listen on {where}: {exc}") from exc
            self.http_port = _bound_port(self._runner, self._http_port)
            log.info(
                "slack %s serving events on %s:%s%s",
                self.account_id,
                self._http_host,
                self.http_port,
                self._http_path,
            )
            inbound.catch_up()

    async def stop_inbound(self) -> None:
        """Close the socket or HTTP site; posting (the Web API client) keeps working. Messages
        accepted already are handed on first."""
        await self.stop()
        await self.inbound.settle()

    async def stop(self) -> None:
        """Close the socket or the HTTP site; safe to call twice."""
        socket, self._socket = self._socket, None
        runner, self._runner = self._runner, None
        watch, self._socket_watch = self._socket_watch, None
        if watch is not None:
            await watch.stop()
        await self.inbound.catching_up.stop()
        if socket is not None:
            await socket.close_async()  # type: ignore[no-untyped-call]  # bolt leaves it unannotated
        if runner is not None:
            await runner.cleanup()
        # The AsyncWebClient opens a session per request (none passed in): nothing left open.
        await self.api.budget.close()
        self.inbound.sink = None

    def _build_app(self) -> AsyncApp:
        app = AsyncApp(
            # Named here: unnamed, Bolt names the app from inspect.stack(), which reads the
            # source of every frame of the caller's stack (a tenth of a second or more). Bolt
            # sets a level on the logger of that name, so it must not be an ancestor of botd's
            # own loggers ("botd" would be: it overrode every botd line's level).
            name=BOLT_APP_NAME,
            client=self.client,
            signing_secret=self._signing_secret,
            # Bolt's DM "assistant thread" say() would fetch conversations.replies and add
            # metadata to posts; the adapter posts through its own client instead.
            attaching_conversation_kwargs_enabled=False,
            # Socket Mode needs no signature; HTTP mode verifies every request (401 otherwise).
            request_verification_enabled=self._mode == "http",
            # Ack only after the listener returned: the message is in the inbox by then.
            process_before_response=True,
        )
        inbound = self.inbound
        app.command(re.compile(".*"))(inbound.on_slash_command)
        app.event("message")(inbound.on_live_message)
        app.event("app_mention")(inbound.on_live_mention)
        app.action(re.compile(f"^{BUTTON_ACTION}"))(inbound.on_press)
        # Any other subscribed event (reactions, joins, pins, renames, …) gets a 2xx.
        app.event(re.compile(".*"))(inbound.on_other_event)
        return app

    @property
    def bot_user_id(self) -> str:
        """The bot's user id (``auth.test``, at start)."""
        return self.inbound.bot_user_id

    @property
    def bot_id(self) -> str:
        """The bot's bot id (``auth.test``, at start)."""
        return self.inbound.bot_id

    @property
    def bot_name(self) -> str:
        """The bot's user name (``auth.test``): ``/command@name`` for another name is skipped."""
        return self.inbound.bot_name

    # --- where answers go, and what is posted -------------------------------------------------

    def reply_target(self, message: InboundMessage) -> Target:
        """Where the answer to ``message`` goes (``SlackInbound.reply_target``)."""
        return self.inbound.reply_target(message)

    async def send_buttons(
        self,
        target: Target,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """``send``, the last message as Block Kit: its text as sections, then one
        ``actions`` block of buttons per row (``text`` stays the notification fallback)."""
        return await self.outbound.send(target, markdown, rows, scope=scope)

    async def edit_buttons(
        self,
        ref: MessageRef,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> None:
        """``ref``'s message shows ``markdown`` (its first message's worth) with ``rows``."""
        await self.outbound.edit_buttons(ref, markdown, rows, scope=scope)

    async def send(
        self,
        target: Target,
        markdown: str,
        rows: Sequence[Sequence[Button]] = (),
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """Post ``markdown`` as one or more messages (``SlackOutbound.send``); raises
        ``SlackError`` on Slack's refusal."""
        return await self.outbound.send(target, markdown, rows, scope=scope)

    async def send_file(
        self,
        target: Target,
        file: OutboundFile,
        caption: str = "",
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """Upload ``file`` to ``target``'s channel (and thread); one ref named by the file id."""
        return await self.outbound.send_file(target, file, caption, scope=scope)

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """Replace a posted message; text beyond one message follows as new messages."""
        return await self.outbound.edit(ref, markdown, scope=scope)

    def can_stream(self, target: Target) -> bool:
        """Whether a native stream can answer in ``target`` (``SlackStreams.can_stream``)."""
        return self.streams.can_stream(target)

    async def stream_start(self, target: Target, markdown: str) -> MessageRef:
        """``chat.startStream`` in ``target``'s thread, showing ``markdown``; the stream's ref."""
        return await self.streams.stream_start(target, markdown)

    async def stream_append(self, ref: MessageRef, markdown: str) -> None:
        """``chat.appendStream``: ``markdown`` added at the end of the streamed message."""
        await self.streams.stream_append(ref, markdown)

    async def stream_stop(self, ref: MessageRef, markdown: str = "") -> None:
        """``chat.stopStream``, ``markdown`` (if any) added first: a plain message from now."""
        await self.streams.stream_stop(ref, markdown)

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        """Delete a posted message (``chat.delete``); one already gone counts as deleted."""
        await self.outbound.delete(ref, scope=scope)

    async def react(self, ref: MessageRef, emoji: str) -> None:
        """Add a reaction by name (``eyes`` or ``:eyes:``) or by a common Unicode emoji."""
        await self.outbound.set_reaction(ref, emoji)

    async def set_reaction(
        self, ref: MessageRef, emoji: str | None, *, replacing: str | None = None
    ) -> None:
        """``replacing`` taken away and ``emoji`` added (``SlackOutbound.set_reaction``)."""
        await self.outbound.set_reaction(ref, emoji, replacing=replacing)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """A file of a message, with the bot token (needs the ``files:read`` scope)."""
        api_host = urlsplit(self._api_base_url).hostname or ""
        return await slack_download(
            attachment,
            max_bytes,
            bot_token=self._bot_token,
            api_hosts=[api_host],
            proxy=self._proxy,
        )

    async def typing(self, target: Target) -> None:
        """Show "is typing…" on a thread; nothing elsewhere (``SlackOutbound.typing``)."""
        await self.outbound.typing(target)

    async def set_assistant_status(self, target: Target, status: str) -> None:
        """Show ``status`` in ``target``'s assistant thread ('' clears it)."""
        await self.outbound.set_assistant_status(target, status)

    async def is_chat_admin(self, chat_id: str, user_id: str) -> bool:
        """Whether ``user_id`` is an admin or owner of the workspace (``users.info``'s
        ``is_admin`` / ``is_owner``), in whatever chat (``ChatAdmins``)."""
        response = await self.api.call("users.info", self.client.users_info, user=user_id)
        found = response.get("user")
        if not isinstance(found, dict):
            return False
        return bool(found.get("is_admin") or found.get("is_owner"))


def _bound_port(runner: web.AppRunner, requested: int) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return requested
