"""Who may talk to the bot on one channel account: the access policies the router applies to
every inbound message, and the message tool's outbound posts are asked against.

``dm_policy`` (``open``, ``allowlist``, ``pairing``: an unknown sender gets a one-time code an
admin approves, ``disabled``), ``allow_from``, ``group_policy`` (``open``, ``allowlist``,
``disabled``) with per-group rules, and ``require_mention`` (default true). Each group's
``session_scope`` says whose conversation a message to the bot there is (the group's, or
its sender's: ``botd.inbound.session_scope``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..chat import ChatKind, ChatKindOf, PressAnswer
from ..config.schema import SessionScope

DmPolicy = Literal["open", "allowlist", "pairing", "disabled"]
GroupPolicy = Literal["open", "allowlist", "disabled"]


@dataclass(frozen=True, slots=True)
class GroupRule:
    """Settings for one group or channel (``"*"``: every group not listed)."""

    require_mention: bool = True
    allow_from: frozenset[str] = frozenset()
    """Senders allowed to address the bot here (empty: everyone in the group)."""
    enabled: bool = True
    tools: tuple[str, ...] | None = None
    """The tools a run here is offered (names, or prefixes ending in ``*``; None: all)."""
    backend: str | None = None
    """What answers here, ``model`` or ``acp`` (None: the channel's choice)."""


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """Who may talk to the bot on one channel account."""

    dm_policy: DmPolicy = "pairing"
    allow_from: frozenset[str] = frozenset()
    group_policy: GroupPolicy = "allowlist"
    groups: dict[str, GroupRule] = field(default_factory=dict)
    require_mention: bool = True
    mention_patterns: tuple[str, ...] = ()
    buttons_expire_after: float = 86400.0
    """Seconds a message's buttons can be pressed after it was posted."""
    chat_kind: ChatKindOf | None = None
    """What the channel's chat ids tell, as its platform reads them (``ChannelSpec.chat_kind``);
    None: nothing (every chat's kind is ``unknown``)."""
    session_scopes: dict[str, SessionScope] = field(default_factory=dict)
    """The ``session_scope`` of each group listed by its id (resolved: its own, ``"*"``'s or
    the channel's)."""
    session_scope: SessionScope = "group"
    """The ``session_scope`` of every other group (``"*"``'s, else the channel's)."""

    def group_rule(self, chat_id: str) -> GroupRule | None:
        return self.groups.get(chat_id) or self.groups.get("*")

    def user_scoped(self, chat_id: str) -> bool:
        """Whether each sender in group ``chat_id`` has a conversation of their own."""
        return self.session_scopes.get(chat_id, self.session_scope) == "user"

    def kind_of(self, chat_id: str) -> tuple[ChatKind, str | None]:
        """Whether ``chat_id`` is a direct chat (and with whom) or a group, as far as the
        channel's ids tell; ``unknown`` where they do not."""
        return ("unknown", None) if self.chat_kind is None else self.chat_kind(chat_id)


@dataclass(frozen=True, slots=True)
class Decision:
    accepted: bool
    reason: str
    answer: PressAnswer | None = None
    """For a button press: what the presser is told, and whether the press was the answer."""
