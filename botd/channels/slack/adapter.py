"""Slack through slack-bolt (async): Socket Mode by default, or the HTTP Events API.

Inbound: ``message`` events (no subtype, ``file_share``, ``thread_broadcast``; ``message_changed``
as an edit of a message's text) and ``app_mention``.
Bolt runs the listener first and acks after it returned (``process_before_response``, over Socket
Mode and HTTP alike): the listener hands the message to the sink and returns as soon as the router
accepted it into the durable inbox (one local SQLite transaction, well within Slack's 3 seconds),
leaving the rest (a chat command's answer, say) to go on in the background. A
delivery the process died on, or whose accept failed, is left unacknowledged (bolt answers 500) and
Slack delivers it again. Slack still delivers a channel mention twice (a ``message`` and an
``app_mention`` with different event ids) and retries deliveries it thinks were lost. The first
delivery of a message goes on to the sink; a twin or retry of it while the adapter runs is dropped
here, from a bounded memory of recent ids, so the router sees each message once. Each message
carries both ids, the event id and ``channel:ts``, as its dedupe keys: the router's persistent
ledger drops a retry that arrives after a restart. Every other subscribed event gets a no-op
listener: bolt answers an unhandled event with 404 and Slack would retry it.

At each start and each new Socket Mode session the adapter reads what its chats received
meanwhile (``history``, ``catching_up``); live messages of a chat being read wait for it.

Conversations (``slack_conversation_key``, with the channel instance's name: ``slack``, or
another section's): ``slack:<channel>`` for a channel or DM, ``slack:<channel>:thread:<ts>``
for a message inside a thread (one session per thread). The first mention inside a thread
the bot was not in brings the thread's earlier messages along as context, the first message
of a DM thread its parent as the quoted message (``threads``). A sender whose message brings no name
is looked up once an hour (``names``).

Outbound: ``send`` renders Markdown to mrkdwn chunks of at most 4000 characters and posts each
with ``chat.postMessage``, a reply piece's messages tagged with its key as metadata and
looked for before a piece a crash left unconfirmed is posted again (``sent``). Mentions that
notify a whole channel or user group (``<!channel>``, ``<!here>``, ``<!everyone>``,
``<!subteam^…>``) are posted as plain text (``@channel``) unless
``allow_mass_mentions`` is set, and nothing is posted with ``link_names``, so text the model was
made to echo cannot ping a channel; user mentions (``<@U…>``) stay. The SDK's automatic retries
are off (a slow success must never be posted twice); only a 429, where Slack clearly refused the
request, is retried here after its ``Retry-After``. Other failures raise ``SlackError``
(``errors``) marked retryable or not (see ``_call``); the delivery layer decides
whether to try again. Slash commands (``commands``) come in as messages. Slack has no
typing indicator for bots in channels: ``typing`` sets the assistant-thread status when the
target is a thread and does nothing otherwise; ``set_assistant_status`` shows a run's tool
status there (``botd.channels.base.AssistantStatus``).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from ...bounded import Recent
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
from ...cluster.fencing import Fence
from ...retry import retry_after
from ...store.protocols import CatchUpMarks
from ..base import (
    InboundSink,
    OutboundFile,
    PlatformLink,
    SendScope,
    UntilAccepted,
    fence_of,
    key_of,
    without_mention,
)
from ..catch_up import CatchUp, CatchUpSettings
from .commands import NOT_A_MEMBER, CommandReplies, slash_message
from .emoji import slack_emoji_name
from .errors import TRANSIENT_ERRORS, SlackError, SlackStartError, connection_error
from .history import SlackHistory
from .inbound_media import slack_attachments, slack_download
from .markup import MRKDWN, defuse_mass_mentions
from .names import SenderNames
from .sent import metadata, posted_pieces
from .socket_mode import SocketWatch
from .targets import slack_conversation_key
from .threads import DEFAULT_THREAD_CONTEXT, ThreadContext, sender_name

log = logging.getLogger(__name__)

PLATFORM = "slack"
"""The platform's name: an app's channel name unless the wiring gives it another."""
TEXT_LIMIT = 4000
UPLOAD_LIMIT = 1024 * 1024 * 1024
UPLOAD = "files_upload_v2"
MESSAGE_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
"""``message`` subtypes that are prompts; edits, deletes, joins and the like are not."""
RATE_LIMIT_ATTEMPTS = 3
"""How often a call refused with 429 is tried in all."""
MAX_RETRY_AFTER = 60.0
TYPING_STATUS = "is typing…"
_MEMORY_LIMIT = 4096


BUTTON_ACTION = "botd_button_"
"""The ``action_id`` prefix of botd's buttons (numbered: unique within a message)."""
SECTION_LIMIT = 3000
"""The most characters one section block's text takes."""


def button_blocks(text: str, rows: Sequence[Sequence[Button]]) -> list[dict[str, Any]]:
    """``text`` as section blocks, then one ``actions`` block per row of ``rows``."""
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": text[at : at + SECTION_LIMIT]}}
        for at in range(0, len(text), SECTION_LIMIT)
    ]
    number = 0
    for row in rows:
        elements = []
        for button in row:
            elements.append(
                {
                    "type": "button",
                    "action_id": f"{BUTTON_ACTION}{number}",
                    "text": {"type": "plain_text", "text": button.label, "emoji": True},
                    "value": button.value,
                }
            )
            number += 1
        blocks.append({"type": "actions", "elements": elements})
    return blocks


class FencedWebClient(AsyncWebClient):
    """slack_sdk's Web API client; a ``fenced`` view of it checks a conversation's lease as
    each call is made (after the adapter's waits for a 429): a call held up past the lease's
    end is not made."""

    fence: Fence | None = None
    """The lease the calls of this view are made under (None: unfenced)."""

    def fenced(self, fence: Fence | None) -> FencedWebClient:
        """This client for the calls of one send made under ``fence``: a shallow copy (the
        token, the session and the settings are the client's own) that checks it."""
        if fence is None:
            return self
        view = copy.copy(self)
        view.fence = fence
        return view

    async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:
        if self.fence is not None:
            self.fence.check_send(time.monotonic())
        return await super().api_call(api_method, **kwargs)


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
    ) -> None:
        """``channel``: the name of the channel instance this app is (its messages' and
        targets' ``channel``, its conversation keys' start). ``dm_threads``: answer a DM
        message in a thread on it (``delivery: stream``, since a Slack stream needs a
        thread). ``catch_up``, ``marks``: what a start or a reconnect of the socket reads
        of what was missed (``history``; without ``marks``, nothing)."""
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
        self.reply_to_mode = reply_to_mode
        self.dm_threads = dm_threads
        self.account_id = account_id
        self._http_host = http_host
        self._http_port = http_port
        self._http_path = http_path
        self.allow_mass_mentions = allow_mass_mentions
        # retry_handlers=[]: no SDK retries at all (None would mean the default handlers).
        self.client = FencedWebClient(token=bot_token, base_url=api_base_url, retry_handlers=[])
        self.names = SenderNames(self.client)
        self.command_replies = CommandReplies()
        self.threads = ThreadContext(
            self.client,
            limit=thread_context,
            known=known_conversation,
            admits=admits,
            names=self.names.of,
        )
        self.bot_user_id = ""
        self.bot_id = ""
        self.bot_name = ""
        """The bot's user name (``auth.test``): ``/command@name`` for another name is skipped."""
        self.http_port: int | None = None
        """The port the HTTP Events API listens on once started (useful with ``http_port=0``)."""
        self._sink: InboundSink | None = None
        self._socket: AsyncSocketModeHandler | None = None
        self._link = link or PlatformLink()
        self._socket_watch: SocketWatch | None = None
        self._runner: web.AppRunner | None = None
        self._seen_memory: Recent[str, None] = Recent(_MEMORY_LIMIT)
        self._handing = UntilAccepted(channel)
        self._until_accepted = self._handing.hand
        self._first_replied: Recent[str, None] = Recent(_MEMORY_LIMIT)
        # "channel:thread_ts" -> (user, team) last answered there: a stream's recipient.
        self._recipients: Recent[str, tuple[str, str]] = Recent(_MEMORY_LIMIT)
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        self.catching_up = CatchUp(
            f"{channel}[{account_id}]",
            catch_up or CatchUpSettings(),
            marks,
            channel=channel,
            account=account_id,
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
        except SlackError as exc:
            await self.stop()
            error = exc.error
            if exc.method == "apps.connections.open" and not exc.retryable:
                error = f"{error} (Slack refused the app-level token, app_token)"
            raise SlackStartError(exc.method, error) from exc
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            await self.stop()
            reason = str(exc) or type(exc).__name__
            raise SlackStartError("start", f"cannot reach Slack: {reason}") from exc

    async def _start(self, sink: InboundSink) -> None:
        self._sink = sink
        who = await self._call("auth.test", self.client.auth_test)
        self.bot_user_id = str(who.get("user_id") or "")
        self.bot_id = str(who.get("bot_id") or "")
        self.bot_name = str(who.get("user") or "")
        app = self._build_app()
        self.catching_up.close_gate()  # live messages wait for what was missed (``history``)
        if self._mode == "socket":
            # The client reconnects by itself; the watch tells botd whether it is connected.
            watch = self._socket_watch = SocketWatch(
                self._link, self.account_id, on_reconnect=self._catch_up
            )
            self._socket = handler = AsyncSocketModeHandler(
                app, app_token=self._app_token, logger=watch.logger
            )
            # The SDK retries a refused app token for ever, logging it each time: ask for the
            # first socket URL here, so a refusal fails the start, and hand the URL over.
            opened = await self._call(
                "apps.connections.open",
                handler.client.web_client.apps_connections_open,
                app_token=self._app_token,
            )
            handler.client.wss_uri = str(opened["url"])
            await handler.connect_async()  # type: ignore[no-untyped-call]  # bolt leaves it unannotated
            watch.start(handler.client)
            log.info("slack %s connected over Socket Mode as %s", self.account_id, self.bot_user_id)
            self._catch_up()
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
            self._catch_up()

    async def stop_inbound(self) -> None:
        """Close the socket or HTTP site; posting (the Web API client) keeps working. Messages
        accepted already are handed on first."""
        await self.stop()
        await self._handing.settle()

    async def stop(self) -> None:
        """Close the socket or the HTTP site; safe to call twice."""
        socket, self._socket = self._socket, None
        runner, self._runner = self._runner, None
        watch, self._socket_watch = self._socket_watch, None
        if watch is not None:
            await watch.stop()
        await self.catching_up.stop()
        if socket is not None:
            await socket.close_async()  # type: ignore[no-untyped-call]  # bolt leaves it unannotated
        if runner is not None:
            await runner.cleanup()
        # The AsyncWebClient opens a session per request (none passed in): nothing left open.
        self._sink = None

    def _build_app(self) -> AsyncApp:
        app = AsyncApp(
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
        app.command(re.compile(".*"))(self._on_slash_command)
        app.event("message")(self._on_live_message)
        app.event("app_mention")(self._on_live_mention)
        app.action(re.compile(f"^{BUTTON_ACTION}"))(self._on_press)
        # Any other subscribed event (reactions, joins, pins, renames, …) gets a 2xx.
        app.event(re.compile(".*"))(self._on_other_event)
        return app

    # --- inbound ------------------------------------------------------------------------------

    def _catch_up(self) -> None:
        """Read what was missed (the socket connected again, or the adapter started)."""
        self.catching_up.close_gate()
        take = partial(self._on_message, {})
        self.catching_up.start(SlackHistory(self._call, self.client, take, self._wanted))

    def _wanted(self, event: dict[str, Any]) -> bool:
        """Whether the live path would take the message ``event`` as a prompt or context."""
        user = str(event.get("user") or "")
        own = (self.bot_id and event.get("bot_id") == self.bot_id) or user == self.bot_user_id
        other_bot = bool(event.get("bot_id")) and not user
        return not own and not other_bot and event.get("subtype") in MESSAGE_SUBTYPES

    async def _on_live_message(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        await self.catching_up.before_live(_history_of(event))
        await self._on_message(body, event)

    async def _on_live_mention(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        await self.catching_up.before_live(_history_of(event))
        await self._on_app_mention(body, event)

    async def _on_message(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        subtype = event.get("subtype")
        if subtype == "message_changed":
            await self._on_edit(body, event)
            return
        if subtype not in MESSAGE_SUBTYPES:
            log.debug("%s: ignoring message subtype %s", self.name, subtype)
            return
        await self._inbound(body, event, app_mention=False)

    async def _on_edit(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        """A message whose text its sender edited, handed on as an edit. Slack sends
        ``message_changed`` for link previews added and other changes too: those carry no
        ``edited`` mark, or the same text, and are ignored."""
        new, old = event.get("message") or {}, event.get("previous_message") or {}
        edited_at = (new.get("edited") or {}).get("ts")
        # A deleted thread parent turns into a "tombstone": a change, but no one's words.
        kind = new.get("subtype")
        if not edited_at or kind not in MESSAGE_SUBTYPES or new.get("text") == old.get("text"):
            log.debug("%s: ignoring a message change that is no edit of its text", self.name)
            return
        where: dict[str, Any] = {k: event[k] for k in ("channel", "channel_type") if k in event}
        await self._inbound(body, {**new, **where}, app_mention=False, edited_at=str(edited_at))

    async def _on_app_mention(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        await self._inbound(body, event, app_mention=True)

    async def _on_slash_command(self, ack: AsyncAck, command: dict[str, Any]) -> None:
        """A slash command of this app (``commands``), acked once it is in the inbox.
        Slack never delivers one again: one the router could not take is acked all the
        same (the router has told the chat to send it again)."""
        self.command_replies.remember(command)
        key = self._key(f"command:{command.get('trigger_id') or ''}")
        message = slash_message(
            command,
            instance=self.name,
            account_id=self.account_id,
            bot_name=self.bot_name,
            key=key,
        )
        sink = self._sink
        try:
            if sink is not None and message is not None:
                await self._until_accepted(sink, message)
        except Exception as exc:
            log.warning(
                "%s: slash command %s was not taken: %s", self.name, command.get("command"), exc
            )
        finally:
            await ack()

    async def _on_press(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        """A button of the bot's pressed (a ``block_actions`` payload): handed to the sink
        like the presser's message, acked once decided; what the presser must be told
        (not allowed, expired, answered already) is an ephemeral message, and a press that
        counted replaces the message's buttons with the choice made."""
        press = await self._press_message(body)
        answer = PressAnswer()
        try:
            if press is not None and self._sink is not None:
                decided = await self._sink(press)
                found = getattr(decided, "answer", None)
                answer = found if isinstance(found, PressAnswer) else answer
        finally:
            await ack()
        if press is None:
            return
        if answer.text:
            try:
                await self._call(
                    "chat.postEphemeral",
                    self.client.chat_postEphemeral,
                    channel=press.chat_id,
                    user=press.sender_id,
                    text=answer.text,
                    thread_ts=press.thread_id,
                )
            except SlackError as exc:
                log.warning("%s: telling a presser %s failed: %s", self.name, answer.text, exc)
        if answer.chosen:
            await self._show_choice(body, press, answer.label)

    async def _press_message(self, body: dict[str, Any]) -> InboundMessage | None:
        actions = body.get("actions") or []
        message = body.get("message") or {}
        channel = str((body.get("channel") or {}).get("id") or "")
        user = body.get("user") or {}
        if not actions or not message.get("ts") or not channel or not user.get("id"):
            return None
        action = actions[0]
        value = str(action.get("value") or "")
        thread_ts = message.get("thread_ts")
        thread_id = str(thread_ts) if thread_ts else None
        key = slack_conversation_key(self.name, channel, thread_id)
        user_id = str(user["id"])
        callback = f"{action.get('action_ts') or body.get('trigger_id')}:{user_id}"
        return InboundMessage(
            channel=self.name,
            chat_id=channel,
            sender_id=user_id,
            sender_name=await self.names.of(user_id, str(user.get("name") or "")),
            text="",  # the router names the button, as botd recorded it
            message_id=f"press:{callback}",
            conversation_key=key,
            account_id=self.account_id,
            thread_id=thread_id,
            is_direct=channel.startswith("D"),
            mentions_bot=True,
            dedupe_keys=(self._key(f"press:{callback}"),),
            bot_name=self.bot_name,
            target=Target(self.name, channel, self.account_id, thread_id),
            press=Press(callback, value, str(message["ts"])),
        )

    async def _show_choice(self, body: dict[str, Any], press: InboundMessage, label: str) -> None:
        """The message's buttons give way to a line saying what was chosen (``label``, as
        botd put it there), and by whom."""
        message = body.get("message") or {}
        kept = [b for b in message.get("blocks") or [] if b.get("type") != "actions"]
        chosen = {
            "type": "context",
            "elements": [{"type": "plain_text", "text": chosen_label(label, press.sender_name)}],
        }
        try:
            await self._call(
                "chat.update",
                self.client.chat_update,
                channel=press.chat_id,
                ts=press.press.message_id if press.press else "",
                text=str(message.get("text") or ""),
                blocks=[*kept, chosen],
            )
        except SlackError as exc:
            log.warning("%s: showing the choice made failed: %s", self.name, exc)

    async def _on_other_event(self, event: dict[str, Any]) -> None:
        log.debug("%s: ignoring event %s", self.name, event.get("type"))

    async def _inbound(
        self,
        body: dict[str, Any],
        event: dict[str, Any],
        *,
        app_mention: bool,
        edited_at: str | None = None,
    ) -> None:
        sink = self._sink
        channel = str(event.get("channel") or "")
        ts = str(event.get("ts") or "")
        user = str(event.get("user") or "")
        if sink is None or not channel or not ts:
            return
        # Bolt drops our own events already; this also covers a bot_id it did not know yet.
        if (self.bot_id and event.get("bot_id") == self.bot_id) or user == self.bot_user_id:
            return
        if event.get("bot_id") and not user:
            log.debug("%s: ignoring a message from bot %s", self.name, event.get("bot_id"))
            return
        # Both ids are remembered: the twin with another event id is caught by channel:ts.
        event_id = str(body.get("event_id") or "")
        message_key = f"{channel}:{ts}" + (f":edit:{edited_at}" if edited_at else "")
        keys = tuple(self._key(k) for k in (event_id, message_key) if k)
        repeated = [key in self._seen_memory for key in keys]
        for key in keys:
            self._seen_memory.remember(key, None)
        if event_id and repeated[0]:
            log.debug("%s: event %s already handled", self.name, event_id)
            return
        if repeated[-1]:
            log.debug("%s: message %s:%s already handled", self.name, channel, ts)
            return
        text = str(event.get("text") or "")
        thread_ts = event.get("thread_ts")
        thread_id = str(thread_ts) if thread_ts else None
        key = slack_conversation_key(self.name, channel, thread_id)
        mention = f"<@{self.bot_user_id}>" if self.bot_user_id else ""
        mentioned = app_mention or (bool(mention) and mention in text)
        if mention and mention in text:
            # The model needs the message, not the bot's own name (which it would echo).
            text = without_mention(text, re.escape(mention)) or text
        message = InboundMessage(
            channel=self.name,
            chat_id=channel,
            sender_id=user,
            sender_name=await self.names.of(user, sender_name(event)),
            text=text,
            message_id=ts,
            conversation_key=key,
            account_id=self.account_id,
            thread_id=thread_id,
            is_direct=event.get("channel_type") == "im",
            mentions_bot=mentioned,
            dedupe_keys=keys,
            bot_name=self.bot_name,
            attachments=slack_attachments(event),
            edited=edited_at is not None,
            in_history=True,
        )
        if edited_at is None:
            message = await self.threads.add_to(message, self.bot_user_id, self.bot_id)
        target = self.reply_target(message)
        if target.thread_id is not None and user:
            team = str(event.get("team") or body.get("team_id") or "")
            self._recipients.remember(f"{channel}:{target.thread_id}", (user, team))
        try:
            await self._until_accepted(sink, replace(message, target=target))
        except BaseException:
            for key in keys:  # not accepted: Slack's redelivery must get through
                self._seen_memory.pop(key, None)
            raise

    def _key(self, key: str) -> str:
        """An inbound id as the ledger keeps it (prefixed by the account unless the default)."""
        return key if self.account_id == "default" else f"{self.account_id}/{key}"

    # --- threading ----------------------------------------------------------------------------

    def reply_target(self, message: InboundMessage) -> Target:
        """Where the answer to ``message`` goes under ``reply_to_mode``.

        - ``off``: where the message was, in its thread if it was in one.
        - ``all``: every reply in a thread (the message's thread, or one started on it).
        - ``first``: a message already in a thread is answered there; otherwise the target
          carries ``reply_to_id = ts`` and ``send`` puts the first reply sent to it into a
          thread on that message, and later replies of the run in the channel.
        """
        base = Target(self.name, message.chat_id, self.account_id, message.thread_id)
        if message.thread_id is None and message.is_direct and self.dm_threads:
            return Target(self.name, message.chat_id, self.account_id, message.message_id)
        if message.thread_id is not None or self.reply_to_mode == "off":
            return base
        if self.reply_to_mode == "all":
            return Target(self.name, message.chat_id, self.account_id, message.message_id)
        return Target(self.name, message.chat_id, self.account_id, reply_to_id=message.message_id)

    def _thread_for(self, target: Target) -> str | None:
        if target.thread_id is not None:
            return target.thread_id
        if target.reply_to_id is None:
            return None
        marker = f"{target.chat_id}:{target.reply_to_id}"
        if marker in self._first_replied:
            return None
        self._first_replied.remember(marker, None)
        return target.reply_to_id

    # --- outbound -----------------------------------------------------------------------------

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
        return await self.send(target, markdown, rows, scope=scope)

    async def edit_buttons(
        self,
        ref: MessageRef,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> None:
        """``ref``'s message shows ``markdown`` (its first message's worth) with ``rows``."""
        texts = self._render(markdown) or [""]
        await self._call(
            "chat.update",
            self.client.fenced(fence_of(scope)).chat_update,
            channel=ref.target.chat_id,
            ts=ref.message_id,
            text=texts[0],
            blocks=button_blocks(texts[0], rows),
            link_names=False,
        )

    async def send(
        self,
        target: Target,
        markdown: str,
        rows: Sequence[Sequence[Button]] = (),
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """Post ``markdown`` as one or more messages; raises ``SlackError`` on Slack's refusal.

        A reply piece's messages carry its key as metadata (``sent``); one a crash left
        unconfirmed is looked for first, and a message found is returned, not posted again.
        ``rows``: buttons under the last message (``send_buttons``).
        """
        thread_ts = self._thread_for(target)
        posted_to = Target(self.name, target.chat_id, target.account_id, thread_ts)
        key, client = key_of(scope), self.client.fenced(fence_of(scope))
        found: dict[str, str] = {}
        if key is not None and key.piece.unconfirmed:
            found = await self._posted_pieces(
                client, target.chat_id, thread_ts, key.piece.written_at
            )
        refs: list[MessageRef] = []
        texts = self._render(markdown)
        for number, text in enumerate(texts):
            tag = None if key is None else metadata(key, number)
            last = number == len(texts) - 1
            blocks = button_blocks(text, rows) if rows and last else None
            if tag is not None and tag["event_payload"]["piece"] in found:
                refs.append(MessageRef(posted_to, found[tag["event_payload"]["piece"]]))
                continue
            try:
                response = await self._call(
                    "chat.postMessage",
                    client.chat_postMessage,
                    channel=target.chat_id,
                    text=text,
                    thread_ts=thread_ts,
                    mrkdwn=True,
                    link_names=False,
                    metadata=tag,
                    blocks=blocks,
                )
            except SlackError as exc:
                if exc.error in NOT_A_MEMBER:  # a slash command's user is told, if any
                    await self.command_replies.tell_not_a_member(target.chat_id)
                raise
            refs.append(MessageRef(posted_to, str(response["ts"])))
        return refs

    async def _posted_pieces(
        self, client: AsyncWebClient, channel: str, thread_ts: str | None, written_at: float | None
    ) -> dict[str, str]:
        """The tagged reply messages where a piece written at ``written_at`` went. A look-up
        Slack refuses for good (a missing ``*:history`` scope) finds nothing, with a
        warning: the piece is posted again, as on a platform without look-ups."""
        try:
            return await posted_pieces(self._call, client, channel, thread_ts, written_at)
        except SlackError as exc:
            if exc.retryable:
                raise
            log.warning(
                "%s: could not look for an unconfirmed reply in %s (%s); posting it again",
                self.name,
                channel,
                exc,
            )
            return {}

    async def send_file(
        self,
        target: Target,
        file: OutboundFile,
        caption: str = "",
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """Upload ``file`` to ``target``'s channel (and thread); one ref named by the file id.

        ``files_upload_v2`` is three steps in one call: the SDK asks for an upload URL
        (``files.getUploadURLExternal``), posts the bytes there and shares the file in the
        channel (``files.completeUploadExternal``) with the caption as its
        ``initial_comment``. When the bytes cannot be posted (a 5xx of the upload URL) the SDK
        raises a request error, which is retryable; a file whose upload was never completed is
        not shared, so a retry shows the file once. Slack takes files of up to 1 GB.
        """
        if len(file.data) > UPLOAD_LIMIT:
            raise SlackError(UPLOAD, f"file_too_large ({file.filename}: {len(file.data)} bytes)")
        comments = self._render(caption) if caption.strip() else []
        thread_ts = self._thread_for(target)
        try:
            response = await self._call(
                UPLOAD,
                self.client.fenced(fence_of(scope)).files_upload_v2,
                channel=target.chat_id,
                content=file.data,
                filename=file.filename,
                title=file.filename,
                initial_comment=comments[0] if comments else None,
                thread_ts=thread_ts,
            )
        except SlackRequestError as exc:
            raise SlackError(UPLOAD, str(exc), retryable=True) from exc
        posted_to = Target(self.name, target.chat_id, target.account_id, thread_ts)
        files = response.get("files") or []
        file_id = str(files[0].get("id", "")) if files and isinstance(files[0], dict) else ""
        return [MessageRef(posted_to, file_id)]

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """Replace a posted message; text beyond one message follows as new messages."""
        texts = self._render(markdown)
        refs = [ref]
        if not texts:
            return refs
        client = self.client.fenced(fence_of(scope))
        await self._call(
            "chat.update",
            client.chat_update,
            channel=ref.target.chat_id,
            ts=ref.message_id,
            text=texts[0],
            link_names=False,
        )
        for text in texts[1:]:
            response = await self._call(
                "chat.postMessage",
                client.chat_postMessage,
                channel=ref.target.chat_id,
                text=text,
                thread_ts=ref.target.thread_id,
                mrkdwn=True,
                link_names=False,
            )
            refs.append(MessageRef(ref.target, str(response["ts"])))
        return refs

    # --- native streams (``delivery: stream``) -------------------------------------------------

    def can_stream(self, target: Target) -> bool:
        """A stream needs a thread, and outside a DM the user it answers (Slack's
        ``recipient_user_id``/``recipient_team_id``), known from the message answered."""
        if target.thread_id is None:
            return False
        return _is_dm(target.chat_id) or f"{target.chat_id}:{target.thread_id}" in self._recipients

    async def stream_start(self, target: Target, markdown: str) -> MessageRef:
        """``chat.startStream`` in ``target``'s thread, showing ``markdown``; the stream's ref."""
        recipient: dict[str, str] = {}
        found = self._recipients.get(f"{target.chat_id}:{target.thread_id}")
        if found is not None and not _is_dm(target.chat_id):
            user, team = found
            recipient = {"recipient_user_id": user}
            if team:
                recipient["recipient_team_id"] = team
        response = await self._call(
            "chat.startStream",
            self.client.chat_startStream,
            channel=target.chat_id,
            thread_ts=target.thread_id or "",
            markdown_text=self._streamed(markdown),
            **recipient,
        )
        posted_to = Target(self.name, target.chat_id, target.account_id, target.thread_id)
        return MessageRef(posted_to, str(response["ts"]))

    async def stream_append(self, ref: MessageRef, markdown: str) -> None:
        """``chat.appendStream``: ``markdown`` added at the end of the streamed message."""
        await self._call(
            "chat.appendStream",
            self.client.chat_appendStream,
            channel=ref.target.chat_id,
            ts=ref.message_id,
            markdown_text=self._streamed(markdown),
        )

    async def stream_stop(self, ref: MessageRef, markdown: str = "") -> None:
        """``chat.stopStream``, ``markdown`` (if any) added first: a plain message from now."""
        await self._call(
            "chat.stopStream",
            self.client.chat_stopStream,
            channel=ref.target.chat_id,
            ts=ref.message_id,
            markdown_text=self._streamed(markdown) if markdown else None,
        )

    def _streamed(self, markdown: str) -> str:
        """Streams take Markdown as it is; mass mentions are defused there too."""
        return markdown if self.allow_mass_mentions else defuse_mass_mentions(markdown)

    def _render(self, markdown: str) -> list[str]:
        """The mrkdwn messages ``markdown`` is posted as, mass mentions defused unless allowed."""
        texts = [chunk.text for chunk in MRKDWN.chunks(markdown, TEXT_LIMIT)]
        if self.allow_mass_mentions:
            return texts
        return [defuse_mass_mentions(text) for text in texts]

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        """Delete a posted message (``chat.delete``); one already gone counts as deleted."""
        try:
            await self._call(
                "chat.delete",
                self.client.fenced(fence_of(scope)).chat_delete,
                channel=ref.target.chat_id,
                ts=ref.message_id,
            )
        except SlackError as exc:
            if exc.error != "message_not_found":
                raise

    async def react(self, ref: MessageRef, emoji: str) -> None:
        """Add a reaction by name (``eyes`` or ``:eyes:``) or by a common Unicode emoji."""
        await self.set_reaction(ref, emoji)

    async def set_reaction(
        self, ref: MessageRef, emoji: str | None, *, replacing: str | None = None
    ) -> None:
        """``reactions.remove`` the reaction ``replacing``, then ``reactions.add`` ``emoji``
        (both by name: ``slack_emoji_name``); one already gone or already there counts as
        done. Needs the ``reactions:write`` scope."""
        old, new = _emoji_name(replacing), _emoji_name(emoji)
        if old is not None and old != new:
            await self._reaction_call("reactions.remove", ref, old, "no_reaction")
        if new is not None:
            await self._reaction_call("reactions.add", ref, new, "already_reacted")

    async def _reaction_call(self, method: str, ref: MessageRef, name: str, done: str) -> None:
        func = (
            self.client.reactions_add if method == "reactions.add" else self.client.reactions_remove
        )
        try:
            await self._call(
                method, func, channel=ref.target.chat_id, timestamp=ref.message_id, name=name
            )
        except SlackError as exc:
            if exc.error != done:
                raise

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """A file of a message, with the bot token (needs the ``files:read`` scope)."""
        api_host = urlsplit(self._api_base_url).hostname or ""
        return await slack_download(
            attachment, max_bytes, bot_token=self._bot_token, api_hosts=[api_host]
        )

    async def typing(self, target: Target) -> None:
        """Show "is typing…" on a thread (``assistant.threads.setStatus``).

        Slack has no bot typing indicator outside assistant threads; a message answered in
        the channel shows its status by reaction instead (``reactions``). Best effort: a
        refusal is logged, never raised.
        """
        if target.thread_id is None:
            return
        try:
            await self.set_assistant_status(target, TYPING_STATUS)
        except SlackError as exc:
            log.debug("%s: no typing status in %s: %s", self.name, target.route(), exc.error)

    async def set_assistant_status(self, target: Target, status: str) -> None:
        """Show ``status`` in ``target``'s assistant thread ('' clears it), with
        ``assistant.threads.setStatus``. Slack refuses a thread that is no assistant thread
        (``invalid_thread_ts``) and a token without ``assistant:write`` (``missing_scope``);
        a target outside a thread is refused here the same way, without a call."""
        if target.thread_id is None:
            raise SlackError("assistant.threads.setStatus", "not in a thread")
        await self._call(
            "assistant.threads.setStatus",
            self.client.assistant_threads_setStatus,
            channel_id=target.chat_id,
            thread_ts=target.thread_id,
            status=status,
        )

    async def _call(
        self, method: str, func: Callable[..., Awaitable[AsyncSlackResponse]], **kwargs: Any
    ) -> AsyncSlackResponse:
        """Call the Web API; retry only a 429 after its Retry-After, raise ``SlackError``.

        The error says whether trying again may help: a 5xx, a 429, one of Slack's own
        faults (``TRANSIENT_ERRORS``) or a failed connection may pass; Slack's refusals
        (``channel_not_found``, ``not_in_channel``, ...) will not.
        """
        for attempt in range(1, RATE_LIMIT_ATTEMPTS + 1):
            try:
                return await func(**kwargs)
            except SlackApiError as exc:
                response = exc.response
                status = response.status_code
                hint = retry_after(response.headers, cap=MAX_RETRY_AFTER)
                if status == 429 and attempt < RATE_LIMIT_ATTEMPTS:
                    delay = 1.0 if hint is None else hint
                    log.warning("slack %s rate limited; retrying in %.1fs", method, delay)
                    await self._sleep(delay)
                    continue
                error = response.get("error") if isinstance(response.data, dict) else None
                transient = status >= 500 or status == 429 or error in TRANSIENT_ERRORS
                raise SlackError(
                    method,
                    str(error or f"HTTP {status}"),
                    retryable=transient,
                    retry_after=hint if transient else None,
                ) from exc
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                raise connection_error(method, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover


def _history_of(event: dict[str, Any]) -> str:
    """Where a message event's history is: its thread, else its channel."""
    return str(event.get("thread_ts") or event.get("channel") or "")


def _is_dm(channel: str) -> bool:
    return channel.startswith("D")


def _bound_port(runner: web.AppRunner, requested: int) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return requested


def _emoji_name(emoji: str | None) -> str | None:
    """Slack's name of ``emoji`` (``:eyes:``, 👀, or a bare name: ``eyes``)."""
    if emoji is None:
        return None
    return slack_emoji_name(emoji) or emoji.strip().strip(":")
