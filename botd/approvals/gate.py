"""Approvals: a call to a listed tool waits for a person's Approve or Deny.

``Approvals.gate`` gives a run its ``ToolGate`` (``botd.agent.loop``). For a call to one of
``ApprovalRules.tools`` it keeps a request in the store (``ApprovalLedger``), keyed by the
call (conversation, the run's first inbox entry, tool call id), posts "Approve `tool(args)`?"
with Approve / Deny buttons to the conversation (or each approver's direct chat) and waits:

* approved: the tool runs and the model gets its result;
* denied: the model gets "denied by <who>" instead, and the tool does not run;
* no decision within ``timeout``: the request expires, the model gets "not approved in time".

Once decided the waiting run edits the request messages: the buttons go, the outcome shows
("Approved by Alice", "Denied by Bob", "Expired"). ``/stop`` ends the wait with the run (the
request then says so); the shutdown leaves it pending.

Presses reach ``Approvals.press`` (registered with the router's ``PressHandlers`` under
``approval:``; the router has already dropped a redelivered press, refused a presser the
access policy refuses in the press's chat, and refused a value that is not one of the
buttons botd put on the pressed message). A press counts only on one of the request's own
messages: its token, readable by everyone in the request's chat, pressed on a message of
another chat decides nothing. Only an approver's press counts (with ``approvers`` empty,
an owner's on a channel that has owners, ``owners``: anyone else is told ``NOT_AN_OWNER``;
on a channel without, anyone the request's conversation admits: the press is then in that
conversation's chat, where the router checked the presser); the decision is one conditional
write, so a press twice, or two approvers at once, decide once. The handler answers at once;
the run that waits is woken in this process, and polls the store every ``poll_interval`` for
a press taken by another node.

``Approvals.choose`` asks the same way about a call an external agent wants to make (an ACP
agent's permission request, ``botd.agent.acp``), with the agent's own options as buttons:
approve this once, approve it for good (``always``, which the agent remembers), deny. It is
asked whatever ``tools`` lists (the agent decided to ask), decided by the same approvers
within the same timeout.

A restart: the run resumes with the same call (``resumable_prefix`` keeps it), finds the
request by its key and does not post again; still pending, it waits for the time left; past
its deadline it expires; decided meanwhile, that decision holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from ..agent.loop import ToolGate
from ..agent.mcp.names import allowed
from ..agent.tools.base import ToolContext, ToolOutput
from ..chat import Button, InboundMessage, MessageRef, Target
from ..cluster.fencing import RunScope
from ..events import ToolCallContent
from ..speakers import clean_name
from ..store import ApprovalLedger, ApprovalState, StoredApproval
from .grants import grant_chat, grant_key
from .summary import call_summary, exact_call

log = logging.getLogger(__name__)

PREFIX = "approval:"
"""The prefix of the buttons' values: ``approval:<token>:approve`` / ``:always`` / ``:deny``."""
NOT_AN_APPROVER = "Only approvers can decide this."
NOT_AN_OWNER = "Only the bot's owners can decide this."
"""Told to a presser who is not an owner, where the owners decide (no ``approvers``)."""
NOT_ITS_MESSAGE = "This request can only be decided on its own message."
CLEAR_WAIT = 10.0
"""Seconds a stopped run waits for its request's buttons to go before it lets them be."""


Verb = Literal["approve", "always", "deny"]
"""What a button decides: approve this call, approve it and the like for good, deny it."""

_DECISIONS: dict[str, ApprovalState] = {
    "approve": "approved",
    "always": "always",
    "deny": "denied",
}


@dataclass(frozen=True, slots=True)
class Choice:
    """One button of a request: its label and what it decides."""

    label: str
    verb: Verb


APPROVE_OR_DENY = (Choice("Approve", "approve"), Choice("Deny", "deny"))
"""The buttons of a request to run one of botd's own tools."""
WITH_GRANT = (
    Choice("Approve", "approve"),
    Choice("Always allow here", "always"),
    Choice("Deny", "deny"),
)
"""The buttons of a request that offers to allow the exact call for good in its chat
(``grants``)."""


@dataclass(frozen=True, slots=True)
class ApprovalRules:
    """``agent.approvals`` as the gate reads it."""

    tools: tuple[str, ...] = ()
    approvers: frozenset[str] = frozenset()
    """User ids, or ``<channel>:<id>``; empty: anyone the conversation admits."""
    timeout: float = 600.0
    ask_in: str = "conversation"
    always_allow: tuple[str, ...] = ()
    """The tools whose requests offer "always allow this exact call here" (``grants``)."""

    def gates(self, tool_name: str) -> bool:
        return allowed(tool_name, self.tools)

    def offers_grant(self, tool_name: str) -> bool:
        return allowed(tool_name, self.always_allow)

    def may_decide(self, message: InboundMessage) -> bool:
        if not self.approvers:
            return True
        sender = message.sender_id
        return sender in self.approvers or f"{message.channel}:{sender}" in self.approvers

    def approvers_on(self, channel: str) -> list[str]:
        """The ids of the approvers who are users of ``channel``."""
        ids = []
        for entry in sorted(self.approvers):
            named, colon, ident = entry.partition(":")
            if not colon:
                ids.append(entry)
            elif named == channel:
                ids.append(ident)
        return ids


OwnerVerdict = Callable[[InboundMessage], Awaitable[bool | None]]
"""Whether a message's sender is an owner where they wrote it; None: no owners there."""


class RequestPoster(Protocol):
    """Where requests are posted and their outcome shown (``ChannelDelivery``)."""

    async def send_buttons(
        self,
        target: Target,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: RunScope | None = None,
    ) -> Sequence[MessageRef]: ...

    async def clear_buttons(
        self, ref: MessageRef, markdown: str, *, scope: RunScope | None = None
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class RunPlace:
    """Where a run's calls are asked about: its conversation and the ids that name it."""

    conversation_key: str
    run_anchor: str
    """The run's first inbox entry (the same after a restart), or its run id."""
    session_id: str
    target: Target


def _request_text(approval: StoredApproval) -> str:
    return f"Approve `{approval.summary}`?"


def _outcome_text(approval: StoredApproval) -> str:
    here = " in this chat" if approval.grant is not None else ""
    outcome = {
        "approved": f"Approved by {approval.decided_by}.",
        "always": f"Always allowed{here} by {approval.decided_by}.",
        "revoked": f"Allowed for good, then revoked by {approval.decided_by}.",
        "denied": f"Denied by {approval.decided_by}.",
        "expired": "Expired: not approved in time.",
        "stopped": "Not decided: the run was stopped.",
    }.get(approval.state, "")
    return f"{_request_text(approval)}\n{outcome}"


def _span(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


@dataclass(eq=False)
class Approvals:
    """The gate of every run and the handler of every ``approval:`` press (see the module
    docstring). ``rules`` is read at each call, so a reload applies to the next one."""

    ledger: ApprovalLedger
    poster: RequestPoster
    rules: Callable[[], ApprovalRules]
    clock: Callable[[], float] = time.time
    poll_interval: float = 2.0
    """Seconds between looks at the store while waiting (a press taken by another node)."""
    owners: OwnerVerdict | None = None
    """Whether a presser is one of the bot's owners on the press's channel (None from it:
    that channel has no owners). Without ``approvers``, owners decide where there are any."""
    _woken: dict[str, asyncio.Event] = field(default_factory=dict)

    def gate(self, place: RunPlace, *, shutting_down: Callable[[], bool]) -> ToolGate | None:
        """The gate of a run at ``place`` (None: no tool is gated). ``shutting_down``: true
        once botd's shutdown cancels runs (a request then stays pending, to resume)."""
        if not self.rules().tools:
            return None

        async def gate(call: ToolCallContent, context: ToolContext) -> ToolOutput | None:
            rules = self.rules()
            if not rules.gates(call.name):
                return None
            return await self._ask(place, call, rules, shutting_down, context.scope)

        return gate

    # -- the run's side ----------------------------------------------------------------------

    async def _ask(
        self,
        place: RunPlace,
        call: ToolCallContent,
        rules: ApprovalRules,
        shutting_down: Callable[[], bool],
        scope: RunScope,
    ) -> ToolOutput | None:
        """Ask about ``call`` of the run at ``place``, for the run's ``scope``: the request
        is written through the store's view fenced by the conversation's lease, and posted
        (and its outcome shown) for it."""
        summary = call_summary(call.name, call.arguments)
        choices: Sequence[Choice] = APPROVE_OR_DENY
        grant: tuple[str, str] | None = None
        shown = exact_call(call.name, call.arguments) if rules.offers_grant(call.name) else None
        if shown is not None:
            chat = grant_chat(place.target)
            key = grant_key(chat, call.name, call.arguments)
            standing = await self.ledger.granted(key)
            if standing is not None:
                log.info(
                    "tool %s: allowed for good in this chat by %s",
                    call.name,
                    standing.decided_by,
                )
                return None
            summary, choices, grant = shown, WITH_GRANT, (key, chat)
        decided = await self._decided(
            place, call.id, call.name, summary, choices, rules, shutting_down, scope, grant
        )
        if decided.state in ("approved", "always"):
            return None
        if decided.state == "denied":
            text = f"Not run: the call was denied by {decided.decided_by}."
        else:
            waited = _span(decided.deadline - decided.created_at)
            text = f"Not run: the call was not approved in time ({waited})."
        return ToolOutput(text=text, is_error=True, details={"status": decided.state})

    async def choose(
        self,
        place: RunPlace,
        call_id: str,
        title: str,
        choices: Sequence[Choice],
        *,
        shutting_down: Callable[[], bool],
        scope: RunScope,
    ) -> ApprovalState:
        """Ask a person about a call an external agent wants to make (an ACP agent's
        permission request, ``botd.agent.acp``): ``choices`` are its buttons, ``title`` what
        the request shows. Asked whatever ``agent.approvals.tools`` lists (the agent asks);
        decided by its approvers within its timeout. Returns ``approved``, ``always``,
        ``denied`` or ``expired``; ``/stop`` cancels the wait as for a tool of botd's."""
        rules = self.rules()
        decided = await self._decided(
            place, call_id, title, title, choices, rules, shutting_down, scope
        )
        return decided.state

    async def _decided(
        self,
        place: RunPlace,
        call_id: str,
        tool_name: str,
        summary: str,
        choices: Sequence[Choice],
        rules: ApprovalRules,
        shutting_down: Callable[[], bool],
        scope: RunScope,
        grant: tuple[str, str] | None = None,
    ) -> StoredApproval:
        """The request about call ``call_id`` of the run at ``place``, once decided: opened
        (or found, after a restart) through the store's view fenced by ``scope``, posted
        with ``choices`` as buttons, waited for, its outcome shown. ``grant``: the exact
        call's grant key and chat, for a request offering "always allow here"."""
        key = f"{place.conversation_key}/{place.run_anchor}/{call_id}"
        now = self.clock()
        ledger = self.ledger.fenced(scope.fence)
        approval = await ledger.open_approval(
            StoredApproval(
                key=key,
                token=secrets.token_urlsafe(12),
                session_id=place.session_id,
                call_id=call_id,
                tool_name=tool_name,
                summary=summary,
                deadline=now + rules.timeout,
                created_at=now,
                grant=None if grant is None else grant[0],
                grant_chat=None if grant is None else grant[1],
            )
        )
        if approval.state == "pending" and not approval.messages:
            approval = await self._post(approval, place.target, rules, ledger, scope, choices)
        else:
            log.info("tool %s: found its request (%s)", tool_name, approval.state)
        try:
            decided = await self._decision(approval)
        except asyncio.CancelledError:
            if not shutting_down():
                await self._stopped(approval)
            raise
        await self._show(decided, scope)
        log.info("tool %s: %s %s", tool_name, decided.state, decided.decided_by)
        return decided

    async def _post(
        self,
        approval: StoredApproval,
        conversation: Target,
        rules: ApprovalRules,
        ledger: ApprovalLedger,
        scope: RunScope,
        choices: Sequence[Choice],
    ) -> StoredApproval:
        rows = [
            [Button(choice.label, f"{PREFIX}{approval.token}:{choice.verb}") for choice in choices]
        ]
        text = _request_text(approval)
        targets = [conversation]
        if rules.ask_in == "approvers":
            targets = [
                Target(conversation.channel, ident, conversation.account_id)
                for ident in rules.approvers_on(conversation.channel)
            ] or [conversation]
        refs: list[MessageRef] = []
        for target in targets:
            try:
                sent = await self.poster.send_buttons(target, text, rows, scope=scope)
            except Exception as exc:  # one approver's chat out of reach: the others are asked
                log.warning(
                    "the request to approve %s could not be posted to %s: %s",
                    approval.tool_name,
                    target.chat_id,
                    exc,
                )
                continue
            refs.extend(sent[-1:])  # the message carrying the buttons
        if not refs and targets != [conversation]:
            log.warning("no approver could be asked: the request goes to the conversation")
            sent = await self.poster.send_buttons(conversation, text, rows, scope=scope)
            refs.extend(sent[-1:])
        if not refs:
            raise RuntimeError("the request could not be posted")
        await ledger.approval_posted(approval.key, refs)
        return replace(approval, messages=tuple(refs))

    async def _decision(self, approval: StoredApproval) -> StoredApproval:
        """Wait for the request's decision, or expire it at its deadline."""
        woken = self._woken.setdefault(approval.token, asyncio.Event())
        try:
            while True:
                woken.clear()
                found = await self.ledger.approval(approval.key)
                if found is None:
                    raise RuntimeError("the request is no longer in the store")
                if found.state != "pending":
                    return found
                left = found.deadline - self.clock()
                if left <= 0:
                    expired = await self.ledger.decide_approval(found.token, "expired")
                    if expired is not None:
                        return expired
                    continue  # decided just now: read it
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(left, self.poll_interval)):
                        await woken.wait()
        finally:
            self._woken.pop(approval.token, None)

    async def _stopped(self, approval: StoredApproval) -> None:
        """``/stop`` ended the wait: the request says so (bounded: the stop must not wait)."""
        try:
            async with asyncio.timeout(CLEAR_WAIT):
                stopped = await self.ledger.decide_approval(approval.token, "stopped")
                if stopped is not None:
                    await self._show(stopped)
        except Exception as exc:
            log.warning(
                "the stopped request to approve %s stays as it was: %s", approval.tool_name, exc
            )

    async def _show(self, approval: StoredApproval, scope: RunScope | None = None) -> None:
        """The request messages show the outcome, their buttons gone (for the run's
        ``scope``; None: a decision outside a run)."""
        text = _outcome_text(approval)
        for ref in approval.messages:
            try:
                await self.poster.clear_buttons(ref, text, scope=scope)
            except Exception as exc:  # cosmetic: the decision holds
                log.warning(
                    "the request message %s could not show its outcome: %s", ref.message_id, exc
                )

    # -- the presser's side ------------------------------------------------------------------

    async def press(self, message: InboundMessage) -> str | None:
        """A press of a request's button: decide it if the presser may (see the module
        docstring); the answer the presser is shown."""
        value = message.press.value if message.press is not None else ""
        token, _, verb = value.removeprefix(PREFIX).rpartition(":")
        if verb not in _DECISIONS or not token:
            return None
        approval = await self.ledger.approval_for_token(token)
        if approval is None:
            return "This request is no longer open."
        if not _on_its_message(approval, message):
            # The token read off another chat's request, pressed on some other message.
            log.warning(
                "press by %s in %s refused: the request to approve %s was not posted there",
                message.sender_id,
                message.chat_id,
                approval.tool_name,
            )
            return NOT_ITS_MESSAGE
        if approval.state != "pending":
            return _already(approval)
        refusal = await self._refusal(message, f"a request to approve {approval.tool_name}")
        if refusal is not None:
            return refusal
        who = clean_name(message.sender_name) or message.sender_id  # shown in the chat
        _taken, answer = await self._take(approval, verb, who)
        return answer

    async def decide(self, token: str, verb: str, who: str) -> tuple[bool, str]:
        """A decision made outside the chat (the web page, whose operator is trusted as an
        owner): the same conditional write as a press, the waiting run woken (it shows the
        outcome on the request messages). Returns whether this decision was taken, and what
        to tell whoever made it ("Approved.", or "Already approved by Alice." when a press
        came first). ``always`` only for a request that offers it."""
        approval = await self.ledger.approval_for_token(token)
        if approval is None:
            return False, "This request is no longer open."
        if verb not in _DECISIONS or (verb == "always" and approval.grant is None):
            return False, f"Not a choice of this request: {verb[:20]!r}."
        if approval.state != "pending":
            return False, _already(approval)
        taken, answer = await self._take(approval, verb, who)
        if taken:
            state = _DECISIONS[verb]
            log.info("tool %s: %s from outside the chat by %s", approval.tool_name, state, who)
        return taken, answer or "This request is no longer open."

    async def _take(self, approval: StoredApproval, verb: str, who: str) -> tuple[bool, str | None]:
        """Decide the pending ``approval`` as ``verb`` says, by ``who``, in the one
        conditional write (past its deadline it is not: the waiting run expires it), the
        waiting run woken. Whether this decision was taken, and what its maker is told (None:
        the request is gone meanwhile)."""
        token = approval.token
        if self.clock() >= approval.deadline:
            self._wake(token)
            return False, "This request has expired."
        state = _DECISIONS[verb]
        decided = await self.ledger.decide_approval(token, state, who)
        if decided is None:  # another press (or the timeout) came first
            now = await self.ledger.approval_for_token(token)
            return False, _already(now) if now is not None else None
        self._wake(token)
        return True, {"approved": "Approved.", "always": "Always allowed."}.get(state, "Denied.")

    async def _refusal(self, message: InboundMessage, what: str) -> str | None:
        """Why ``message``'s sender may not decide ``what`` (None: they may): not one of
        the approvers, or, without approvers, not an owner on a channel that has owners."""
        rules = self.rules()
        if not rules.may_decide(message):
            log.info("%s by %s on %s: not an approver", _act(message), message.sender_id, what)
            return NOT_AN_APPROVER
        if not rules.approvers and self.owners is not None and await self.owners(message) is False:
            log.info("%s by %s on %s: not an owner", _act(message), message.sender_id, what)
            return NOT_AN_OWNER
        return None

    # -- the chat's grants -------------------------------------------------------------------

    async def grants_command(self, message: InboundMessage, argument: str) -> str:
        """``/allowed``: the calls allowed for good in the message's chat, numbered;
        ``/allowed revoke <n>`` takes one back (a person who may decide requests only)."""
        chat = grant_chat(message.reply_target())
        standing = list(await self.ledger.grants(chat))
        words = argument.split()
        if not words:
            if not standing:
                return "Nothing is allowed for good in this chat."
            lines = [
                f"{n}. `{grant.summary}` (by {grant.decided_by})"
                for n, grant in enumerate(standing, 1)
            ]
            return _lines_of(
                "Allowed for good in this chat:", *lines, "/allowed revoke <n> takes one back."
            )
        if len(words) != 2 or words[0].lower() != "revoke" or not words[1].isdigit():
            return "Use /allowed to list what is allowed for good here, /allowed revoke <n>."
        refusal = await self._refusal(message, "the grants of this chat")
        if refusal is not None:
            return refusal
        number = int(words[1])
        if not 1 <= number <= len(standing):
            return f"There is no grant {number} here: /allowed lists them."
        grant = standing[number - 1]
        who = clean_name(message.sender_name) or message.sender_id
        if not await self.ledger.revoke_grant(grant.token, who):
            return "That one was revoked already."
        log.info("grant of %s in %s revoked by %s", grant.tool_name, chat, message.sender_id)
        return f"Revoked: `{grant.summary}` asks again from now on."

    def _wake(self, token: str) -> None:
        woken = self._woken.get(token)
        if woken is not None:
            woken.set()


def _on_its_message(approval: StoredApproval, message: InboundMessage) -> bool:
    """Whether ``message`` (a press) was made on one of the request's own messages."""
    press = message.press
    if press is None:
        return False
    return any(
        ref.message_id == press.message_id
        and ref.target.channel == message.channel
        and ref.target.account_id == message.account_id
        and ref.target.chat_id == message.chat_id
        for ref in approval.messages
    )


def _act(message: InboundMessage) -> str:
    return "press" if message.press is not None else "command"


def _lines_of(*lines: str) -> str:
    return "\n".join(lines)


def _already(approval: StoredApproval) -> str:
    return {
        "approved": f"Already approved by {approval.decided_by}.",
        "always": f"Already allowed for good by {approval.decided_by}.",
        "denied": f"Already denied by {approval.decided_by}.",
        "expired": "This request has expired.",
        "stopped": "This request was stopped.",
        "revoked": f"Allowed for good, then revoked by {approval.decided_by}.",
    }.get(approval.state, "This request is no longer open.")


__all__ = [
    "APPROVE_OR_DENY",
    "NOT_AN_APPROVER",
    "NOT_ITS_MESSAGE",
    "PREFIX",
    "WITH_GRANT",
    "ApprovalRules",
    "Approvals",
    "Choice",
    "RequestPoster",
    "RunPlace",
    "Verb",
]
