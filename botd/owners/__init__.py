"""The bot's owners on a channel: who they are, what only they may do, and the welcome a
sender gets once an owner (or ``botd pairing approve``) let them in.

``rules``: a channel's ``owners``, ``admins_are_owners`` and ``commands`` as one value.
``admins``: the chat-admin lookups, through the adapters, remembered for a while. ``desk``:
``OwnerDesk``, what the chat commands ask (is the sender an owner and why, is this command
theirs only, ``/pair <code>``). ``welcomes``: ``PairingWelcomes``, which tells an approved
sender they can talk now and hands on what they wrote while they waited.
"""

from __future__ import annotations

from .admins import AdminLookups
from .desk import OWNERS_ONLY, OwnerDesk
from .rules import OwnerRules, owner_rules
from .welcomes import YOU_CAN_TALK, PairingWelcomes

__all__ = [
    "OWNERS_ONLY",
    "YOU_CAN_TALK",
    "AdminLookups",
    "OwnerDesk",
    "OwnerRules",
    "PairingWelcomes",
    "owner_rules",
]
