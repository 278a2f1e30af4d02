"""Answers to the chat commands: ``/new`` and ``/reset`` start over, ``/stop`` cancels the
run and clears the queue, ``/status`` tells what the session is doing (and the
conversation's scheduled jobs, and which channels are down, and the settings of its chat:
model, queue mode, system prompt, backend, in a group the mention rule and the tools, each
with where it came from: ``/model``, a topic, a group, the channel, the agent), ``/model``
lists and switches the conversation's model (``/new`` drops that choice), ``/usage`` shows
the tokens used, ``/whoami`` gives the sender's and the chat's ids (what ``allow_from`` and
``groups`` take) and whether the sender is one of the bot's owners, ``/help`` lists the
commands, ``/pair <code>`` (an owner's) approves a pairing code, ``/memory`` lists what botd
keeps about the sender (in a group, the group's) and ``/memory forget <n>`` drops an item
(``botd.memory``, given as the ``memory`` callable), ``/allowed`` lists the calls allowed
for good in the chat and ``/allowed revoke <n>`` takes one back (``botd.approvals.grants``,
given as ``grants``), ``/voice on|off`` chooses whether the conversation's answers are spoken
(``voice.py``; ``/voice`` alone says which), ``/forget me`` removes what botd keeps about the
sender, once confirmed (``botd.forget``, the ``forget`` callable). A command the channel keeps
for its owners, sent by anyone else, is answered with one line saying so and nothing is done
(``OwnerChecks``, ``botd.owners``).
``answer`` does what the command asks, at once, through the conversation's own methods
(``Conversation.stop``, ``start_over``, ``status_lines``), and returns the text to reply with
and what the reply waits for: ``/stop`` and ``/new`` cut the turn under way (its files being
read, or its run) and answer once it has wound down, so the confirmation is the last word.
The registry sends it in the background; no command ever waits for a run or a preparation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import NamedTuple, Protocol

from ..chat import Button, InboundMessage
from ..commands import command_argument
from ..config.overrides import Effective
from ..store import StoreError
from ..store.protocols import ConversationLedger, ConversationStore
from .conversation import Conversation
from .models import ModelBook
from .session import Stopped
from .voice import VoiceSwitch

log = logging.getLogger(__package__)

HELP = (
    "Commands: /new (start over; /new <text> starts over with that message), /stop (cancel), "
    "/status, /model (list or switch the model), /usage (tokens used), /voice (spoken answers "
    "on or off), /whoami (your id and this chat's), /forget me (remove what I keep about you), "
    "/help."
)

STARTING_OVER = ("/new", "/reset")
"""The commands that start a new conversation; text or files after them are its first
message."""

FILES_NOT_READ = "\n(The file sent with the command was not read: send it on its own.)"
"""Added to a command's answer when files came with it (a captioned photo, say)."""


class Reply(NamedTuple):
    """A command's answer: its text, and what it is sent after."""

    text: str
    after: asyncio.Event | None = None
    """Set once the turn the command cut is over (None: send at once)."""
    buttons: tuple[tuple[Button, ...], ...] = ()
    """Rows of buttons under the answer (``/forget me``'s confirmation)."""


ForgetCommand = Callable[
    [InboundMessage, str], Awaitable[tuple[str, tuple[tuple[Button, ...], ...]]]
]
"""Answers ``/forget`` (its argument given): ``botd.forget.Forgetter.command``."""


class OwnerChecks(Protocol):
    """What the desk asks about the bot's owners (``botd.owners.OwnerDesk``)."""

    async def refusal(self, command: str, message: InboundMessage) -> str | None:
        """The one line refusing ``command`` to a non-owner (None: it may be done)."""
        ...

    async def whoami(self, message: InboundMessage) -> str: ...

    async def help(self, message: InboundMessage) -> str: ...

    async def pair(self, message: InboundMessage, argument: str) -> str: ...


class CommandDesk:
    """Answers chat commands about the conversations in ``conversations`` (the registry's
    map).

    It holds the map itself, not the registry, so the two form no reference cycle and a
    dropped registry is freed at once with all its conversations.
    """

    def __init__(
        self,
        ledger: ConversationLedger,
        conversations: Mapping[str, Conversation],
        *,
        unplaced: Effective,
        place: Callable[[InboundMessage], Effective] | None = None,
        jobs: Callable[[str], Awaitable[list[str]]] | None,
        channels_down: Callable[[], Mapping[str, str]] | None = None,
        servers_down: Callable[[], Mapping[str, str]] | None = None,
        models: ModelBook | None = None,
        owners: OwnerChecks | None = None,
        memory: Callable[[InboundMessage, str], Awaitable[str]] | None = None,
        grants: Callable[[InboundMessage, str], Awaitable[str]] | None = None,
        voice: VoiceSwitch | None = None,
        forget: ForgetCommand | None = None,
    ) -> None:
        self._ledger = ledger
        self._voice = voice
        """Each conversation's ``/voice`` choice."""
        self._forget = forget
        self._owners = owners
        self._memory = memory
        """Answers ``/memory`` (its argument given): ``botd.memory.Memory.command``."""
        self._grants = grants
        """Answers ``/allowed`` (its argument given): ``botd.approvals.Approvals.grants_command``
        (None: no approvals here)."""
        """Who the bot's owners are, and what only they may do (None: no owners)."""
        self._conversations = conversations
        self._unplaced = unplaced
        """The settings where no chat's own are known (``status`` asked by key alone)."""
        self._place = place or (lambda _message: unplaced)
        """The settings of a message's chat (model, queue mode, prompt, backend: ``/status``)."""
        self._jobs = jobs
        self._channels_down = channels_down
        """Which channels are down and why (the daemon's view), for ``/status``."""
        self._servers_down = servers_down
        """The MCP servers not running now, with their state (``down``, ``starting``): their
        tools are not offered. Only the state: the reason may name hosts or paths."""
        self._models = models
        """The configured models and each conversation's choice (``/model``, ``/usage``)."""

    async def refused(self, command: str, message: InboundMessage) -> bool:
        """Whether ``command`` is for the bot's owners only there and ``message``'s sender
        is not one (``answer`` then says so and does nothing)."""
        return self._owners is not None and await self._owners.refusal(command, message) is not None

    async def answer(
        self, command: str, message: InboundMessage, store: ConversationStore | None = None
    ) -> Reply:
        """Do what ``command`` asks; the answer for the message's chat. ``store``: the
        conversation's view of the store (fenced by its lease), which what the command
        changes is written through (None: the desk's own)."""
        key = message.conversation_key
        if self._owners is not None:
            refusal = await self._owners.refusal(command, message)
            if refusal is not None:
                return Reply(refusal)
        if command == "/stop" or command in STARTING_OVER:
            conversation = self._conversations.get(key)
            stopped = Stopped(False, None)
            if command == "/stop":
                if conversation is not None:
                    stopped = conversation.stop()
                text = "Stopped." if stopped.anything else "Nothing was running."
            else:
                if conversation is not None:
                    stopped = await conversation.start_over()
                else:
                    await (store or self._ledger).start_session(key)
                text = "Started a new conversation." + await self._model_forgotten(message, store)
            return Reply(text, stopped.over)
        if command == "/status":
            text = await self.status(key, self._place(message), group=not message.is_direct)
        elif command == "/model" and self._models is not None:
            default = self._place(message).model.value
            text = await self._models.answer(key, command_argument(message.text), store, default)
        elif command == "/voice" and self._voice is not None:
            text = await self._voice.answer(key, command_argument(message.text), store)
        elif command == "/usage" and self._models is not None:
            text = await self._models.usage(key)
        elif command == "/whoami":
            text = whoami(message)
            if self._owners is not None:
                text = _lines(text, await self._owners.whoami(message))
        elif command == "/pair":
            if self._owners is None:
                text = "This command is for the bot's owners."
            else:
                text = await self._owners.pair(message, command_argument(message.text))
        elif command == "/memory":
            if self._memory is None:
                text = "There is no memory here."
            else:
                text = await self._memory(message, command_argument(message.text))
        elif command == "/allowed":
            if self._grants is None:
                text = "Nothing is asked about here, so nothing is allowed for good."
            else:
                text = await self._grants(message, command_argument(message.text))
        elif command == "/forget":
            if self._forget is None:
                text = "Forgetting is not offered here."
            else:
                text, rows = await self._forget(message, command_argument(message.text))
                return Reply(text, buttons=rows)
        elif command == "/start":
            text = "Hello! Write to me and I will answer. " + HELP
        else:
            text = HELP
            if self._owners is not None:
                text = _lines(text, await self._owners.help(message))
        return Reply(text)

    async def _model_forgotten(
        self, message: InboundMessage, store: ConversationStore | None
    ) -> str:
        """``/new`` drops the conversation's ``/model`` choice: what the answer adds when
        there was one (the model it goes back to)."""
        models = self._models
        if models is None or not await models.forget(message.conversation_key, store):
            return ""
        model = self._place(message).model
        if model.value not in models.names:
            return f" The model is back to {models.primary} (agent's)."
        return f" The model is back to {model.value} ({model.whose})."

    async def status(
        self, conversation_key: str, here: Effective | None = None, *, group: bool = False
    ) -> str:
        """What the conversation is doing, what waits, and its scheduled jobs; ``here``: its
        chat's settings, each named with where it came from (None: the agent's); ``group``:
        the chat is a group, whose mention rule and tools are named too."""
        here = here or self._unplaced
        queue_mode = f"{here.queue_mode.value} ({here.queue_mode.whose})"
        conversation = self._conversations.get(conversation_key)
        lines: list[str] = []
        if conversation is None:
            # Not in memory (none yet, or botd restarted since): what the store holds.
            try:
                record = await self._ledger.stored_session(conversation_key)
            except StoreError as exc:
                log.error("reading the session of %s for /status failed: %s", conversation_key, exc)
                lines.append("The conversation's state cannot be read now (storage failing).")
                record = None
            else:
                if record is None:
                    lines.append("No conversation yet.")
            if record is not None:
                lines.append(
                    f"Session {record.session_id[:8]}: idle, 0 waiting, "
                    f"{record.message_count} messages, {record.runs} runs, "
                    f"queue mode {queue_mode}."
                )
            else:  # no session line to name it
                lines.append(f"Queue mode: {queue_mode}.")
        else:
            lines += conversation.status_lines(queue_mode)
        if self._models is not None:
            lines.append(await self._models.status_line(conversation_key, here.model))
        lines.append(f"System prompt: {here.system_prompt.describe()}.")
        lines.append(f"Backend: {here.backend.value} ({here.backend.whose}).")
        if here.skills.value is not None:  # a channel, group or topic names its skills
            named = ", ".join(here.skills.value) or "none"
            lines.append(f"Skills: {named} ({here.skills.whose}).")
        if group:
            lines += _group_lines(here)
        if self._jobs is not None:
            try:
                jobs = await self._jobs(conversation_key)
            except Exception:
                log.exception("listing scheduled jobs for %s failed", conversation_key)
                jobs = []
            lines += [f"Scheduled: {job}" for job in jobs]
        down = _down(self._channels_down, "channels")
        lines += [f"Channel {name} is down: {why}" for name, why in down]
        servers = _down(self._servers_down, "MCP servers")
        lines += [
            f"MCP server {name} is {state}: its tools are not offered now."
            for name, state in servers
        ]
        return "\n".join(lines)


def _group_lines(here: Effective) -> list[str]:
    """``/status``'s lines on what only a group sets: whether a mention is needed, the tools."""
    mention = here.require_mention
    tools = here.tools
    offered = "every tool the agent has" if tools.value is None else ", ".join(tools.value)
    return [
        f"Mention needed: {'yes' if mention.value else 'no'} ({mention.whose}).",
        f"Tools: {offered} ({tools.whose}).",
    ]


def whoami(message: InboundMessage) -> str:
    """Who sent ``message`` and where, by the ids the settings use (``allow_from``,
    ``groups``)."""
    name = f"{message.sender_name} " if message.sender_name else ""
    where = f"{message.channel} chat {message.chat_id}"
    if message.thread_id is not None:
        where += f", thread {message.thread_id}"
    return (
        f"You: {name}(user id {message.sender_id}).\n"
        f"Here: {where} (conversation {message.conversation_key})."
    )


def _lines(text: str, more: str) -> str:
    """``text`` with ``more`` on a line of its own (nothing added when it is empty)."""
    return f"{text}\n{more}" if more else text


def _down(source: Callable[[], Mapping[str, str]] | None, what: str) -> list[tuple[str, str]]:
    """What ``source`` says is down, by name; nothing when it is unset or fails (logged)."""
    if source is None:
        return []
    try:
        return sorted(dict(source()).items())
    except Exception:
        log.exception("listing the %s that are down failed", what)
        return []


__all__ = ["HELP", "CommandDesk", "ForgetCommand", "OwnerChecks", "Reply"]
