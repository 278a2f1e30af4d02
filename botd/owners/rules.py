"""A channel's owner settings as one value: who is an owner by id, whether the chat's own
admins are too, and which commands only owners may use where.

Without owners (no ``owners`` and no ``admins_are_owners``) nothing is owner-only: the
commands stay open to everyone the access policy admits, as they were before owners.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from ..config import ChatChannelSection
from ..config.schema import OwnerOnlyIn


@dataclass(frozen=True, slots=True)
class OwnerRules:
    """Who owns the bot on one channel, and what only they may do."""

    listed: frozenset[str] = frozenset()
    """Owners by user id (``owners``)."""
    chat_admins: bool = False
    """Whether a chat's admins count as owners (``admins_are_owners``)."""
    pairing: bool = False
    """Whether the channel pairs unknown senders (``dm_policy: pairing``): ``/pair`` applies."""
    owner_only: frozenset[str] = frozenset()
    owner_only_in: OwnerOnlyIn = "groups"

    @property
    def configured(self) -> bool:
        """Whether the channel has owners at all."""
        return bool(self.listed) or self.chat_admins

    def guards(self, command: str, *, direct: bool) -> bool:
        """Whether ``command`` is for the owners only in a direct chat (``direct``) or a
        group of this channel."""
        if not self.configured or command not in self.owner_only:
            return False
        return not direct or self.owner_only_in == "everywhere"


def owner_rules(section: BaseModel | None) -> OwnerRules:
    """The owner rules of a channel's section (a channel without access settings, the
    console, has none)."""
    if not isinstance(section, ChatChannelSection):
        return OwnerRules()
    return OwnerRules(
        listed=frozenset(section.owners),
        chat_admins=section.admins_are_owners,
        pairing=section.dm_policy == "pairing",
        owner_only=frozenset(section.commands.owner_only),
        owner_only_in=section.commands.owner_only_in,
    )


__all__ = ["OwnerRules", "owner_rules"]
