"""The inbound path: dedupe, then access policy, then mention gating, then the session.

Every message an adapter hands over passes here once. The router is the only writer of the
inbound ledger and of the durable inbox. A message that passes is *accepted*: its dedupe keys
and the message itself are written in one transaction (``InboundLedger.accept_inbound``) before
it is handed to the session, and ``handle`` returns only after that, so an adapter that tells
the platform once ``handle`` returned (Telegram's offset, Slack's ack) never confirms a message
botd could lose. A message dropped by policy has its keys recorded too, so a platform's retry or
a replay after a restart is dropped. What is dropped is logged with its reason. Messages of one
conversation are decided one at a time, in the order the adapter handed them over
(``in_order``), so they reach the inbox in that order whatever the store's round trips take. A
group message that is not addressed to the bot is not lost: it is kept in the store (up to a
limit per conversation, so it survives a restart) and shown to the agent, each line labelled
with its sender, with the next message that is, so the bot knows what was said since it last
spoke. An edit of an earlier message is kept the same way, in any conversation (a DM too): the
next prompt there shows what the message now says; an edit never starts a run of its own. Only
senders the policy admits in that chat are kept (their messages, edits and files): a refused
sender's are recorded as seen and dropped, and a line kept from a sender the policy no longer
admits when the next prompt comes (a reload changed it) is not shown.

Access follows the familiar policies: ``dm_policy`` (``open``, ``allowlist``, ``pairing``:
an unknown sender gets a one-time code an admin approves, and what they write meanwhile is
held with it, to be taken once approved: ``release``, ``botd.owners.welcomes``;
``disabled``), ``allow_from``, ``group_policy`` (``open``, ``allowlist``, ``disabled``) with
per-group allowlists, and ``require_mention`` (default true): a mention of the bot, a reply to
the bot's message, or a configured pattern counts. Chat commands from allowed senders pass
without a mention, and so do the other files of an album (one post) a part of which
addressed the bot. In a group whose ``session_scope`` is ``user``, a message to the bot is
its sender's own conversation's and the group's kept lines are shared by its members
(``session_scope``).

When the store cannot take a message (its write fails: disk full, I/O error), the failure is
logged with the conversation, the sender is told in one line (once per message, however often
the platform hands it over again), and ``handle`` raises ``StoreError``: the adapter must not
confirm the message, so the platform delivers it again and it is answered once the store
works again (where the platform redelivers: Telegram and Slack do, Discord does not). A
message an adapter holds back behind such a one, to keep the order (Telegram's polling hands
both again), never reaches ``handle``: the adapter hands it to ``held_back``, which records
nothing and tells its sender the same line, once, while the store's last write failed, when
the message is for the bot (so of two users who wrote during the failure, both are told).

When the store refuses a message for what it carries (``ContentRefused``: a value the
database cannot hold), taking it again would fail the same way, and the platform's later
messages would wait behind it: that message alone is given up. A line kept as context has its
ids recorded without the line (it is not shown to the model); anything else is logged once
with the conversation and the database's words, its sender is told in one line when the
message was for the bot (``CONTENT_REFUSED_NOTICE``), and ``handle`` returns (not accepted),
so the adapter confirms it and the next messages flow.
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import replace

from ..bounded import Recent
from ..buttons import PressHandlers
from ..channels.base import Ack
from ..chat import InboundMessage, MessageRef, PressAnswer, Target
from ..commands import addressed_elsewhere, chat_command
from ..ops.logging import LogContext
from ..store import ContentRefused, InboundLedger, Pairing, StoreError
from ..store.pairing import PairingFile
from ..store.rows import inbound_json
from .access import AccessPolicy, Decision, GroupRule
from .in_order import InOrder
from .kept_context import CONTEXT_LIMIT, accepted_with_kept_context, as_edit
from .session_scope import NOT_YOURS, ScopedMessage, anothers_buttons, scoped

log = logging.getLogger(__name__)

STORE_FAILED_NOTICE = (
    "Sorry, I cannot take your message right now: botd's storage is failing. "
    "I will answer it when the storage recovers if your platform sends it again; "
    "if no answer comes, please send it again later."
)
"""Told to a sender whose message could not be recorded (disk full, I/O error)."""
CONTENT_REFUSED_NOTICE = (
    "Sorry, I could not take this message: botd's storage refused something in it. "
    "Please send it again in other words."
)
"""Told to a sender whose message the store refused for its content (``ContentRefused``)."""
STORE_FAILED_MEMORY = 1000
"""How many messages the router remembers having told about a store failure (or a refusal
of their content)."""
ALBUM_MEMORY = 1000
"""Albums remembered as addressing the bot (their later parts then count as addressed)."""
_NOT_ADDRESSED = "not addressed to the bot (kept as context)"
_PAIRING = "unknown sender: pairing needed"
_EDIT_KEPT = "an edit of an earlier message (kept as context)"
NOT_ALLOWED = "You are not allowed to use these buttons."
"""Told to a presser the access policy refuses in that chat."""
EXPIRED = "These buttons have expired."
"""Told to a presser of buttons older than ``buttons_expire_after``, or from before a ``/new``."""
ALREADY_ANSWERED = "Already answered."
"""Told to a presser of buttons that were pressed already (one press per message counts)."""
NOT_OFFERED = "That is not one of this message's buttons."
"""Told to a presser whose press is not a button botd put on the pressed message (data a
client made up, or buttons from before botd recorded them)."""
SessionStarted = Callable[[str], Awaitable[float | None]]
"""When a conversation's current session began (None: it has none yet)."""


Submit = Callable[[InboundMessage], Awaitable[None]]
Reply = Callable[[Target, str], Awaitable[None]]


class Router:
    """Decides what reaches a session (see the module docstring)."""

    def __init__(
        self,
        store: InboundLedger,
        submit: Submit,
        reply: Reply,
        policies: dict[str, AccessPolicy],
        *,
        pairing: Pairing | None = None,
        press_handlers: PressHandlers | None = None,
        session_started: SessionStarted | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._session_started = session_started
        self._clock = clock
        self.press_handlers = press_handlers or PressHandlers()
        """Who takes a press whose value has a registered prefix (``approval:``), instead of
        the conversation."""
        self._submit = submit
        self._reply = reply
        self._pairing = pairing or PairingFile(None)
        self._told_store_failed: deque[tuple[str, ...]] = deque(maxlen=STORE_FAILED_MEMORY)
        """Messages whose sender was told the store failed or refused them (a redelivery is
        not told again)."""
        self._store_failing = False
        """Whether the store's last write for a message failed (``StoreError``)."""
        self._policies: dict[str, AccessPolicy] = {}
        self._patterns: dict[str, list[re.Pattern[str]]] = {}
        self._in_order = InOrder()
        """One message of a conversation decided at a time, in the order they came."""
        self._addressed_albums: Recent[tuple[str, ...], None] = Recent(ALBUM_MEMORY)
        """Albums a part of which addressed the bot in a group: their other parts (no
        caption, so no mention) are addressed too."""
        self.update_policies(policies)

    async def load_approvals(self) -> None:
        """Read who is approved by pairing, before the channels start (the adapters ask
        ``admits`` synchronously). A database that does not answer now is no reason not to
        start: an approved sender's DM refreshes what the router knows as it comes."""
        try:
            await self._pairing.refresh()
        except Exception as exc:
            log.warning("pairing approvals not read at start (%s); read again as DMs come", exc)

    def update_policies(self, policies: dict[str, AccessPolicy]) -> None:
        """Replace the access policies (a config reload); kept context is not touched."""
        self._policies = dict(policies)
        self._patterns = {
            channel: [re.compile(p, re.IGNORECASE) for p in policy.mention_patterns]
            for channel, policy in policies.items()
        }

    def group_rule(self, channel: str, chat_id: str) -> GroupRule | None:
        """The rule the current policy of ``channel`` has for group ``chat_id``, if any."""
        return self._policies.get(channel, AccessPolicy()).group_rule(chat_id)

    async def handle(self, message: InboundMessage, *, ack: Ack | None = None) -> Decision:
        """Route one inbound message; returns what was decided and why. ``ack`` (the
        adapter's, if it wants one: ``channels.base.Ack``) is called as soon as nothing of
        the message can be lost: right after the accept, or once a dropped message's ids are
        recorded.

        Everything logged meanwhile (and by a run this starts) carries the channel and
        conversation ids. Raises ``StoreError`` when the store could not take the message
        (see the module docstring): the adapter must leave it unconfirmed. A message the store
        refuses for its content is given up: not accepted, and the adapter confirms it.
        """
        with LogContext.bind(channel=message.channel, conversation=message.conversation_key):
            try:
                async with self._in_order.turn(message.conversation_key):
                    decision = await self._decide(message, ack)
            except ContentRefused as exc:
                return await self._content_refused(message, exc)
            except StoreError as exc:
                self._store_failing = True
                await self._store_failed(message, exc)
                raise
            self._store_failing = False
            if not decision.accepted:
                log.info(
                    "skipped %s message %s in %s: %s",
                    message.channel,
                    message.message_id,
                    message.conversation_key,
                    decision.reason,
                    extra={"reason": decision.reason},
                )
        return decision

    async def _content_refused(self, message: InboundMessage, exc: ContentRefused) -> Decision:
        """The store refused the message for its content: log it, tell the sender once in
        one line if the message was for the bot; it is given up (see the module docstring)."""
        reason = f"refused by the store for its content ({exc.reason})"
        if not self._first_telling(message):
            log.info(
                "message %s in %s: %s again", message.message_id, message.conversation_key, reason
            )
            return Decision(False, reason)
        log.error(
            "message %s in %s could not be taken: %s",
            message.message_id,
            message.conversation_key,
            reason,
        )
        if self._access(message).accepted:
            await self._tell(message, CONTENT_REFUSED_NOTICE)
        return Decision(False, reason)

    def _first_telling(self, message: InboundMessage) -> bool:
        """Whether ``message``'s sender was not told yet that the store failed or refused it
        (from now on they count as told)."""
        identity = (message.channel, message.account_id, message.chat_id, message.message_id)
        if identity in self._told_store_failed:
            return False
        self._told_store_failed.append(identity)
        return True

    async def _tell(self, message: InboundMessage, notice: str) -> None:
        """Reply ``notice`` to ``message``; a reply that fails too is logged, not raised."""
        try:
            await self._reply(message.reply_target(), notice)
        except Exception:
            log.exception("telling %s that its message failed failed too", message.conversation_key)

    async def held_back(self, message: InboundMessage) -> None:
        """An adapter holds ``message`` back instead of handing it to ``handle``: an earlier
        message of its stream could not be taken, and the platform delivers both again, in
        order. Nothing is recorded. While the store's last write failed, the sender is told
        once (as one whose own write failed is: ``STORE_FAILED_NOTICE``) when the message is
        for the bot: an edit, a group message that does not address it, or a sender the
        policy does not admit hear nothing."""
        if not self._store_failing or message.edited or not self._access(message).accepted:
            return
        if not self._first_telling(message):
            return
        log.warning(
            "message %s in %s held back behind one the store could not take; its sender is told",
            message.message_id,
            message.conversation_key,
        )
        await self._tell(message, STORE_FAILED_NOTICE)

    async def _store_failed(self, message: InboundMessage, exc: StoreError) -> None:
        """The store could not take the message: log it, tell the sender once in one line.
        A WARNING: what the operator acts on is the store's own ERROR, once per outage
        (``StoreHealth``); this says which message it cost."""
        log.warning(
            "message %s in %s could not be handled: the store failed: %s",
            message.message_id,
            message.conversation_key,
            exc,
        )
        if self._first_telling(message):
            await self._tell(message, STORE_FAILED_NOTICE)

    async def _decide(self, message: InboundMessage, ack: Ack | None) -> Decision:
        keys = message.dedupe_keys or (
            f"{message.account_id}:{message.chat_id}:{message.message_id}",
        )
        if message.press is not None:
            return await self._press(message, keys, ack)
        if message.edited:
            return await self._keep_edit(message, keys, ack)
        other_bot = addressed_elsewhere(message.text, message.bot_name)
        if other_bot is not None:
            # Neither a command nor a prompt here.
            repeat = await self._recorded(message, keys, ack, kept=None)
            return Decision(False, "already seen" if repeat else f"a command for @{other_bot}")
        verdict = self._access(message)
        if not verdict.accepted and self._approval_would_admit(message):
            # Another process may have approved the sender since this one last looked.
            await self._pairing.refresh()
            verdict = self._access(message)
        if not verdict.accepted:
            # (A redelivery is dropped as seen: no second pairing code is sent.)
            kept = message if verdict.reason == _NOT_ADDRESSED else None
            if await self._recorded(message, keys, ack, kept=kept):
                return Decision(False, "already seen")
            if verdict.reason == _PAIRING:
                return await self._offer_pairing(message)
            return verdict
        album = _album_key(message)
        if album is not None:
            self._addressed_albums.remember(album, None)
        group_message = message
        taken = self._scoped(message)
        message = taken.message
        # A command goes through as typed; the kept context waits for the next prompt.
        if _is_command(message):
            prompt = message
            inbox_id = await self._store.accept_inbound(message.channel, keys, prompt)
        else:
            prompt, inbox_id = await accepted_with_kept_context(
                self._store,
                message,
                keys,
                admits=lambda sender: self._sender_admitted(group_message, sender),
                shared_from=taken.chatter_key,
            )
        if inbox_id is None:
            return Decision(False, "already seen")
        if ack is not None:
            ack()  # in the inbox: the platform may be told now
        await self._submit(replace(prompt, inbox_id=inbox_id))
        return Decision(True, "accepted")

    async def _press(
        self, message: InboundMessage, keys: tuple[str, ...], ack: Ack | None
    ) -> Decision:
        """A button pressed. A repeat of a press (its callback id seen) is acknowledged and
        nothing more; a presser refused like a message from them there would be is told so
        (no pairing code); a press that is not one of the buttons botd put on that very
        message (``ButtonLedger``: any data a client chose) is refused and reaches nothing;
        a value with a registered prefix goes to its handler; else, unless the buttons
        expired or were answered already, the press is accepted into the inbox as the
        presser's message, labelled as botd labelled the button."""
        assert message.press is not None
        press = message.press
        # The press's own id is recorded first, then one press per message counts: the
        # message's key makes any later press a repeat. (A crash between the two loses this
        # press, whose buttons stay: it can be pressed again.)
        if await self._recorded(message, keys, ack, kept=None):
            return Decision(False, "already seen", PressAnswer())
        verdict = self._access(replace(message, mentions_bot=True))
        if not verdict.accepted:
            return Decision(False, f"a press: {verdict.reason}", PressAnswer(NOT_ALLOWED))
        pressed = MessageRef(
            Target(message.channel, message.chat_id, message.account_id), press.message_id
        )
        answered = f"buttons:{message.account_id}:{message.chat_id}:{press.message_id}"
        posted = await self._store.posted_buttons(pressed, answered)
        button = None if posted is None else posted.button(press.value)
        if posted is None or button is None:
            if posted is not None and posted.answered:
                return Decision(
                    False, "a press of buttons answered already", PressAnswer(ALREADY_ANSWERED)
                )
            where = "a message without buttons of botd's" if posted is None else "its message"
            return Decision(
                False, f"a press of a button not offered on {where}", PressAnswer(NOT_OFFERED)
            )
        taken = self._scoped(replace(message, text=f"(pressed: {button.label})"))
        message = taken.message
        handler = self.press_handlers.handler_for(press.value)
        if handler is not None:
            return Decision(False, "a press for its handler", PressAnswer(await handler(message)))
        if anothers_buttons(taken, posted.conversation):
            return Decision(False, "a press of another member's buttons", PressAnswer(NOT_YOURS))
        if await self._expired(message, posted.posted_at):
            return Decision(False, "a press of expired buttons", PressAnswer(EXPIRED))
        inbox_id = await self._store.accept_inbound(message.channel, (answered,), message)
        if inbox_id is None:
            return Decision(
                False, "a press of buttons answered already", PressAnswer(ALREADY_ANSWERED)
            )
        await self._submit(replace(message, inbox_id=inbox_id))
        return Decision(True, "accepted", PressAnswer(chosen=True, label=button.label))

    async def _expired(self, message: InboundMessage, posted: float) -> bool:
        """Whether buttons botd posted at ``posted`` (its own clock) are past
        ``buttons_expire_after``, or from before the conversation's current session (a
        ``/new`` since, however soon after them)."""
        policy = self._policies.get(message.channel, AccessPolicy())
        if self._clock() - posted > policy.buttons_expire_after:
            return True
        if self._session_started is None:
            return False
        started = await self._session_started(message.conversation_key)
        return started is not None and posted < started

    async def _keep_edit(
        self, message: InboundMessage, keys: tuple[str, ...], ack: Ack | None
    ) -> Decision:
        """An earlier message edited: never a prompt or a command itself (an edit that adds a
        mention does not start a run), but kept as context for the conversation's next prompt
        when its sender could have addressed the bot there, or been kept as chatter."""
        verdict = self._access(message)
        keep = verdict.accepted or verdict.reason == _NOT_ADDRESSED
        # No pairing code for an edit.
        repeat = await self._recorded(message, keys, ack, kept=as_edit(message) if keep else None)
        reason = _EDIT_KEPT if keep else f"an edit: {verdict.reason}"
        return Decision(False, "already seen" if repeat else reason)

    async def _recorded(
        self,
        message: InboundMessage,
        keys: tuple[str, ...],
        ack: Ack | None,
        *,
        kept: InboundMessage | None,
    ) -> bool:
        """Record a message that is no prompt under its ``keys``, so a redelivery is dropped,
        with ``kept`` as context for its conversation's next prompt (None: the keys alone);
        then the platform may be told (a line the store refuses for its content is not kept,
        its keys are). Returns whether it was a repeat."""
        repeat: bool | None = None
        if kept is not None:
            try:
                repeat = await self._store.keep_chatter(
                    message.channel, keys, kept, limit=CONTEXT_LIMIT
                )
            except ContentRefused as exc:
                log.error(
                    "message %s in %s is not kept as context: %s",
                    message.message_id,
                    message.conversation_key,
                    exc.reason,
                )
        if repeat is None:
            repeat = await self._store.seen_inbound(message.channel, *keys)
        if ack is not None:
            ack()  # nothing more to keep
        return repeat

    async def release(self, message: InboundMessage) -> bool:
        """Take ``message``, held while its sender waited for a pairing approval, as if it
        came now: accepted once (under keys of its own, ``paired:<key>``) and handed on, if
        the policy admits its sender now. Whether it was taken."""
        own = message.dedupe_keys or (
            f"{message.account_id}:{message.chat_id}:{message.message_id}",
        )
        keys = tuple(f"paired:{key}" for key in own)
        with LogContext.bind(channel=message.channel, conversation=message.conversation_key):
            async with self._in_order.turn(message.conversation_key):
                if not self._access(message).accepted:
                    await self._pairing.refresh()  # approved by another process
                verdict = self._access(message)
                if not verdict.accepted:
                    log.info("held message %s not taken: %s", message.message_id, verdict.reason)
                    return False
                inbox_id = await self._store.accept_inbound(message.channel, keys, message)
                if inbox_id is None:
                    return False  # taken before a crash
                await self._submit(replace(message, inbox_id=inbox_id))
        return True

    def admits(self, message: InboundMessage) -> bool:
        """Whether the policy lets ``message`` through as a prompt (its sender may address the
        bot there, and did): asked by an adapter before work that only such a message needs.
        Nothing is recorded and no pairing code is issued."""
        return self._access(message).accepted

    def _scoped(self, message: InboundMessage) -> ScopedMessage:
        """``message`` (to the bot) keyed by the conversation that takes it: its sender's own
        in a user-scoped group (``session_scope``)."""
        return scoped(message, self._policies.get(message.channel, AccessPolicy()))

    def _sender_admitted(self, message: InboundMessage, sender_id: str) -> bool:
        """Whether the policy, as it is now, would take a message from ``sender_id``
        addressed to the bot where ``message`` came (a kept line's sender)."""
        probe = replace(message, sender_id=sender_id, mentions_bot=True, edited=False)
        return self._access(probe).accepted

    def _access(self, message: InboundMessage) -> Decision:
        """Whether the policy lets ``message`` through (no side effects: a pairing code is
        offered by the caller, once it knows the message is not a repeat)."""
        policy = self._policies.get(message.channel, AccessPolicy())
        if message.is_direct:
            return self._dm_access(message, policy)
        verdict = self._group_access(message, policy)
        if verdict.accepted and not self._addressed(message, policy):
            return Decision(False, _NOT_ADDRESSED)
        return verdict

    def _dm_access(self, message: InboundMessage, policy: AccessPolicy) -> Decision:
        sender = message.sender_id
        if policy.dm_policy == "disabled":
            return Decision(False, "direct messages are disabled")
        if policy.dm_policy == "open" or sender in policy.allow_from:
            return Decision(True, "allowed")
        if self._pairing.is_approved(message.channel, sender):
            return Decision(True, "paired")
        if policy.dm_policy == "pairing":
            return Decision(False, _PAIRING)
        return Decision(False, f"sender {sender} is not on the allowlist")

    def _approval_would_admit(self, message: InboundMessage) -> bool:
        """Whether an approval by pairing is what ``message``'s sender lacks (a DM where the
        policy takes approved senders)."""
        policy = self._policies.get(message.channel, AccessPolicy())
        return message.is_direct and policy.dm_policy in ("pairing", "allowlist")

    async def _offer_pairing(self, message: InboundMessage) -> Decision:
        """Send an unknown sender a pairing code: once per code, however often they write.
        The message is held with the code, to be answered once approved (the first
        ``HELD_AT_MOST``: ``botd.owners.welcomes``)."""
        code, issued = await self._pairing.issue(
            message.channel, message.sender_id, message.sender_name
        )
        if not await self._pairing.hold(message.channel, message.sender_id, inbound_json(message)):
            log.info(
                "message %s of %s waiting for approval is not kept: enough are",
                message.message_id,
                message.sender_id,
            )
        if not issued:
            return Decision(False, f"unknown sender {message.sender_id}: pairing code already sent")
        await self._reply(
            message.reply_target(),
            f"I don't know you yet. Ask the admin to approve pairing code {code} "
            f"(botd pairing approve {message.channel} {code}).",
        )
        return Decision(False, f"unknown sender {message.sender_id}: pairing code issued")

    def _group_access(self, message: InboundMessage, policy: AccessPolicy) -> Decision:
        verdict = _group_allowed(policy, message.chat_id)
        if not verdict.accepted:
            return verdict
        rule = policy.group_rule(message.chat_id)
        if rule is not None and rule.allow_from and message.sender_id not in rule.allow_from:
            return Decision(False, f"sender {message.sender_id} may not address the bot here")
        return verdict

    def may_post(self, target: Target) -> Decision:
        """Whether the access policy would let botd talk in ``target``'s chat at all: for a
        direct chat, whether its user would be let in (allowlisted, paired, or DMs open); for
        a group, whether the group policy allows that group. Nothing is recorded and no
        pairing code is issued: this only asks the same rules ``handle`` applies.

        Whether a chat id names a direct chat follows the channel's platform's ids (the
        policy's ``chat_kind``); a chat whose kind its id does not tell is allowed only as a
        group named under ``groups`` (never by ``"*"`` or an open group policy, which could
        be a stranger's DM).
        """
        policy = self._policies.get(target.channel, AccessPolicy())
        kind, peer = policy.kind_of(target.chat_id)
        if kind == "direct":
            if peer is None:  # a DM whose user the id does not tell
                if policy.dm_policy == "open":
                    return Decision(True, "allowed")
                return Decision(
                    False, f"chat {target.chat_id} is a direct chat with an unknown user"
                )
            probe = InboundMessage(
                channel=target.channel,
                chat_id=target.chat_id,
                sender_id=peer,
                text="",
                message_id="",
                conversation_key="",
                account_id=target.account_id,
                is_direct=True,
            )
            verdict = self._dm_access(probe, policy)
            return verdict if verdict.accepted else Decision(False, _refused_dm(peer, verdict))
        verdict = _group_allowed(policy, target.chat_id)
        if verdict.accepted and kind == "unknown" and target.chat_id not in policy.groups:
            return Decision(
                False, f"chat {target.chat_id} is not named under groups (its kind is unknown)"
            )
        return verdict

    def _addressed(self, message: InboundMessage, policy: AccessPolicy) -> bool:
        rule = policy.group_rule(message.chat_id)
        required = rule.require_mention if rule is not None else policy.require_mention
        if not required or message.mentions_bot or _is_command(message):
            return True
        album = _album_key(message)
        if album is not None and album in self._addressed_albums:
            return True  # another file of a post that addressed the bot
        return any(p.search(message.text) for p in self._patterns.get(message.channel, ()))


def _album_key(message: InboundMessage) -> tuple[str, ...] | None:
    if message.album is None:
        return None
    return (message.channel, message.account_id, message.chat_id, message.album)


def _group_allowed(policy: AccessPolicy, chat_id: str) -> Decision:
    """Whether the group policy allows group ``chat_id`` (whoever the sender)."""
    if policy.group_policy == "disabled":
        return Decision(False, "group messages are disabled")
    rule = policy.group_rule(chat_id)
    if policy.group_policy == "allowlist" and rule is None:
        return Decision(False, f"group {chat_id} is not on the allowlist")
    if rule is not None and not rule.enabled:
        return Decision(False, f"group {chat_id} is disabled")
    return Decision(True, "allowed")


def _refused_dm(peer: str, verdict: Decision) -> str:
    if verdict.reason == _PAIRING:
        return f"user {peer} has not been paired or allowlisted"
    return verdict.reason


def _is_command(message: InboundMessage) -> bool:
    return chat_command(message.text, message.bot_name) is not None
