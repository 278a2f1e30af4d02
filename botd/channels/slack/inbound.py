"""What a Slack app takes in: ``SlackInbound``, bolt's listeners that turn events into
``InboundMessage``s and hand them to the sink.

Inbound: ``message`` events (no subtype, ``file_share``, ``thread_broadcast``; ``message_changed``
as an edit of a message's text) and ``app_mention``; slash commands (``commands``) and presses
of botd's buttons come in as messages too.
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
of a DM thread its parent as the quoted message (``threads``). A sender whose message brings no
name is looked up once an hour (``names``). A shared message comes after the sharer's words as a
forward (``shares``). Where the answer goes is ``reply_target``'s
(``reply_to_mode``, ``dm_threads``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import Any, Literal

from slack_bolt.async_app import AsyncAck

from ...bounded import Recent
from ...chat import InboundMessage, Press, PressAnswer, Target
from ...store.protocols import CatchUpMarks
from ..base import InboundSink, UntilAccepted, without_mention
from ..catch_up import CatchUp, CatchUpSettings
from .commands import CommandReplies, slash_message
from .history import SlackHistory
from .inbound_media import slack_attachments
from .names import SenderNames
from .outbound import SlackOutbound
from .shares import shared_messages
from .streams import SlackStreams
from .targets import slack_conversation_key
from .threads import ThreadContext, sender_name
from .webapi import WebAPI

__all__ = ["MESSAGE_SUBTYPES", "SlackInbound"]

log = logging.getLogger(__name__)

MESSAGE_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
"""``message`` subtypes that are prompts; edits, deletes, joins and the like are not."""
_MEMORY_LIMIT = 4096


class SlackInbound:
    """The listeners of one Slack app (module docstring).

    ``outbound`` answers a press; ``streams`` is told who each thread's answer goes to;
    ``command_replies`` remembers each slash command's answer URL. ``thread_context``,
    ``known_conversation`` and ``admits`` go to ``ThreadContext``; ``catch_up`` and
    ``marks`` say what is read of what was missed (without ``marks``, nothing). The bot's
    identity (``bot_user_id``, ``bot_id``, ``bot_name``) is set at each start.
    """

    def __init__(
        self,
        api: WebAPI,
        outbound: SlackOutbound,
        streams: SlackStreams,
        command_replies: CommandReplies,
        *,
        channel: str,
        account_id: str,
        reply_to_mode: Literal["off", "first", "all"],
        dm_threads: bool,
        thread_context: int,
        known_conversation: Callable[[str], Awaitable[bool]] | None,
        admits: Callable[[InboundMessage], bool] | None,
        catch_up: CatchUpSettings | None,
        marks: CatchUpMarks | None,
    ) -> None:
        self._api = api
        self._outbound = outbound
        self._streams = streams
        self._command_replies = command_replies
        self.name = channel
        self.account_id = account_id
        self.reply_to_mode = reply_to_mode
        self.dm_threads = dm_threads
        self.names = SenderNames(api.client)
        self.threads = ThreadContext(
            api.client,
            limit=thread_context,
            known=known_conversation,
            admits=admits,
            names=self.names.of,
        )
        self.bot_user_id = ""
        self.bot_id = ""
        self.bot_name = ""
        """The bot's user name (``auth.test``): ``/command@name`` for another name is skipped."""
        self.sink: InboundSink | None = None
        """Where messages go; None while the adapter is stopped."""
        self._seen_memory: Recent[str, None] = Recent(_MEMORY_LIMIT)
        self._handing = UntilAccepted(channel)
        self._until_accepted = self._handing.hand
        self.catching_up = CatchUp(
            f"{channel}[{account_id}]",
            catch_up or CatchUpSettings(),
            marks,
            channel=channel,
            account=account_id,
        )

    async def settle(self) -> None:
        """Wait until every accepted message was handed on (``UntilAccepted.settle``)."""
        await self._handing.settle()

    def catch_up(self) -> None:
        """Read what was missed (the socket connected again, or the adapter started)."""
        self.catching_up.close_gate()
        take = partial(self._on_message, {})
        self.catching_up.start(SlackHistory(self._api.call, self._api.client, take, self._wanted))

    def _wanted(self, event: dict[str, Any]) -> bool:
        """Whether the live path would take the message ``event`` as a prompt or context."""
        user = str(event.get("user") or "")
        own = (self.bot_id and event.get("bot_id") == self.bot_id) or user == self.bot_user_id
        other_bot = bool(event.get("bot_id")) and not user
        return not own and not other_bot and event.get("subtype") in MESSAGE_SUBTYPES

    async def on_live_message(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        await self.catching_up.before_live(_history_of(event))
        await self._on_message(body, event)

    async def on_live_mention(self, body: dict[str, Any], event: dict[str, Any]) -> None:
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

    async def on_slash_command(self, ack: AsyncAck, command: dict[str, Any]) -> None:
        """A slash command of this app (``commands``), acked once it is in the inbox.
        Slack never delivers one again: one the router could not take is acked all the
        same (the router has told the chat to send it again)."""
        self._command_replies.remember(command)
        key = self._key(f"command:{command.get('trigger_id') or ''}")
        message = slash_message(
            command,
            instance=self.name,
            account_id=self.account_id,
            bot_name=self.bot_name,
            key=key,
        )
        sink = self.sink
        try:
            if sink is not None and message is not None:
                await self._until_accepted(sink, message)
        except Exception as exc:
            log.warning(
                "%s: slash command %s was not taken: %s", self.name, command.get("command"), exc
            )
        finally:
            await ack()

    async def on_press(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        """A button of the bot's pressed (a ``block_actions`` payload): handed to the sink
        like the presser's message, acked once decided; what the presser must be told
        (not allowed, expired, answered already) is an ephemeral message, and a press that
        counted replaces the message's buttons with the choice made."""
        press = await self._press_message(body)
        answer = PressAnswer()
        try:
            if press is not None and self.sink is not None:
                decided = await self.sink(press)
                found = getattr(decided, "answer", None)
                answer = found if isinstance(found, PressAnswer) else answer
        finally:
            await ack()
        if press is None:
            return
        if answer.text:
            await self._outbound.tell_presser(press, answer.text)
        if answer.chosen:
            await self._outbound.show_choice(press, body.get("message") or {}, answer.label)

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

    async def on_other_event(self, event: dict[str, Any]) -> None:
        log.debug("%s: ignoring event %s", self.name, event.get("type"))

    async def _inbound(
        self,
        body: dict[str, Any],
        event: dict[str, Any],
        *,
        app_mention: bool,
        edited_at: str | None = None,
    ) -> None:
        sink = self.sink
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
        if shared := await shared_messages(event, self.names.of):
            # After the sharer's own words, on their line: the label stays a label in a group.
            text = f"{text} {shared}" if text else shared
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
            self._streams.remember_recipient(channel, target.thread_id, user, team)
        try:
            await self._until_accepted(sink, replace(message, target=target))
        except BaseException:
            for key in keys:  # not accepted: Slack's redelivery must get through
                self._seen_memory.pop(key, None)
            raise

    def _key(self, key: str) -> str:
        """An inbound id as the ledger keeps it (prefixed by the account unless the default)."""
        return key if self.account_id == "default" else f"{self.account_id}/{key}"

    # --- where answers go -------------------------------------------------------------------

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


def _history_of(event: dict[str, Any]) -> str:
    """Where a message event's history is: its thread, else its channel."""
    return str(event.get("thread_ts") or event.get("channel") or "")
