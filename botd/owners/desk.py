"""What the chat commands ask about owners (``OwnerDesk``): whether the sender is an owner
and why, whether a command is for the owners only, and ``/pair <code>``.

An owner is a user listed in the channel's ``owners``, or, with ``admins_are_owners``, an
admin of the chat the message came from (``AdminLookups``). A command the channel keeps for
its owners (``commands.owner_only``, in groups unless ``owner_only_in: everywhere``) sent by
anyone else is answered with ``OWNERS_ONLY`` alone, and nothing else is done. ``/pair`` is
always the owners' (and needs owners configured): it approves a pairing code of the channel
it is typed on, as ``botd pairing approve <channel> <code>`` does, and the welcome of the
approved sender goes out at once (``approved``: ``PairingWelcomes.wake``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..chat import InboundMessage
from ..store import Pairing
from .admins import AdminLookups
from .rules import OwnerRules

log = logging.getLogger(__name__)

OWNERS_ONLY = "This command is for the bot's owners."
"""The one line a non-owner gets for an owner-only command."""
LISTED = "listed in owners"
CHAT_ADMIN = "an admin here, and admins are owners"


class OwnerDesk:
    """See the module docstring. ``rules`` gives a channel's current owner rules (read at
    each call: a reload applies at once); ``approved`` is called after ``/pair`` approved a
    code."""

    def __init__(
        self,
        rules: Callable[[str], OwnerRules],
        admins: AdminLookups,
        pairing: Pairing,
        approved: Callable[[], None] = lambda: None,
    ) -> None:
        self._rules = rules
        self._admins = admins
        self._pairing = pairing
        self._approved = approved

    async def owner_because(self, message: InboundMessage) -> str | None:
        """Why ``message``'s sender is an owner where they wrote it (None: they are not)."""
        rules = self._rules(message.channel)
        if message.sender_id in rules.listed:
            return LISTED
        if rules.chat_admins and await self._admins.is_admin(
            message.channel, message.chat_id, message.sender_id
        ):
            return CHAT_ADMIN
        return None

    async def decides(self, message: InboundMessage) -> bool | None:
        """Whether the sender is an owner where they wrote ``message``; None when the
        channel has no owners (a tool approval is then anyone's the chat admits)."""
        if not self._rules(message.channel).configured:
            return None
        return await self.owner_because(message) is not None

    async def refusal(self, command: str, message: InboundMessage) -> str | None:
        """``OWNERS_ONLY`` when ``command`` is for the owners only there and the sender is
        not one (None: the command may be done)."""
        rules = self._rules(message.channel)
        guarded = command == "/pair" or rules.guards(command, direct=message.is_direct)
        if not guarded or await self.owner_because(message) is not None:
            return None
        log.info(
            "%s from %s in %s refused: for the owners only",
            command,
            message.sender_id,
            message.conversation_key,
        )
        return OWNERS_ONLY

    async def whoami(self, message: InboundMessage) -> str:
        """The line ``/whoami`` adds for an owner (empty for anyone else)."""
        why = await self.owner_because(message)
        return "" if why is None else f"You are an owner of this bot ({why})."

    async def help(self, message: InboundMessage) -> str:
        """What ``/help`` adds for an owner where ``/pair`` applies (empty otherwise)."""
        if not self._rules(message.channel).pairing or await self.owner_because(message) is None:
            return ""
        return "Owners: /pair <code> approves a new user's pairing code."

    async def pair(self, message: InboundMessage, argument: str) -> str:
        """``/pair <code>`` from an owner (``refusal`` has let it through): approve the code
        on the message's channel."""
        if not self._rules(message.channel).pairing:
            return "This channel does not pair new users (its dm_policy is not pairing)."
        words = argument.split()
        if not words:
            return "Usage: /pair <code>, the code a new user was given."
        code = words[0].upper()
        try:
            sender = await self._pairing.approve(message.channel, code)
        except Exception as exc:
            log.error("pairing: approving %s on %s failed: %s", code, message.channel, exc)
            return "The pairing code could not be approved now: the pairing store failed."
        if sender is None:
            return f"No pairing code {code} is waiting here (a code is good for an hour)."
        log.info(
            "pairing: %s approved %s on %s in the chat", message.sender_id, sender, message.channel
        )
        self._approved()
        return f"Approved: user {sender} can talk to me now."


__all__ = ["CHAT_ADMIN", "LISTED", "OWNERS_ONLY", "OwnerDesk"]
