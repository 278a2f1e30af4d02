"""Forgetting a person (``Forgetting``, ``botd forget``, ``/forget me``): what of the store is
theirs, decided the same way on every backend.

A person is a platform user id on one channel instance (``Person``). What is theirs:

- **their conversations**, whole: their direct chats (the conversation keys of the inbox rows
  they sent in a direct chat, and those the caller names, as the platform spells a direct
  chat's key) and their own conversations in groups whose ``session_scope`` is ``user``
  (a key of the channel ending in ``:user:<id>``). Everything kept under those keys goes:
  sessions and transcripts, the inbox and outbox, usage, the model choice, status lines,
  previews, approvals, buttons, scheduled jobs, chatter marks;
- **their own rows in groups**: the messages they sent (inbox rows, kept chatter, the inbound
  ids of those messages), the memories they had written or that are about them, and their
  words in a group's transcript: each user turn that carries their speaker label
  (``[Name (id <user>)]``, which also marks their lines shown to the bot as chatter) or
  quotes a message of theirs (``[In reply to Name (id <user>):]``) has its text replaced by
  ``REDACTED``. The turn stays, so the answers after it still follow a question, but nothing
  of what was said in it remains (others' lines in that same turn go with it: a turn is
  removed whole rather than guessed apart);
- **pairing**: their waiting code and their approval (they pair again to talk to the bot).

The store gathers the rows in one read (``traces``), then each backend runs its table's rule
(``botd.store.sqlite.forget``, ``botd.store.postgres.forget``): one rule per table, or a
reason the table holds nothing of a person. A table without either fails
``tests/store/test_forget_contracts.py``, so a new table needs its rule there.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = [
    "REDACTED",
    "USER_KEY_MARK",
    "Forgotten",
    "Person",
    "Traces",
    "key_range",
    "speaker_marks",
    "traces",
]

USER_KEY_MARK = ":user:"
"""What a user-scoped group conversation's key ends in before the user id
(``botd.inbound.session_scope.USER_MARK``, which the store may not import)."""

REDACTED = json.dumps({"role": "user", "content": "[removed at the request of who wrote it]"})
"""The body a group's user turn that carried a forgotten person's words is given."""


@dataclass(frozen=True, slots=True)
class Person:
    """Whom to forget: ``user`` (the platform's id) on the channel instance ``channel``."""

    channel: str
    user: str
    conversations: frozenset[str] = frozenset()
    """Conversation keys known to be theirs besides those the inbox shows (their direct
    chat's key, as the platform spells it, when it can be spelled from their id)."""
    chats: frozenset[str] = frozenset()
    """Their direct chats' ids besides those the inbox shows."""

    def __post_init__(self) -> None:
        if not self.channel or not self.user:
            raise ValueError("a person to forget needs a channel and a user id")


@dataclass(slots=True)
class Forgotten:
    """What forgetting removed: rows per table (or file kind), and group turns redacted.
    Counts only: never any content."""

    removed: dict[str, int] = field(default_factory=dict)
    redacted: int = 0
    conversations: frozenset[str] = frozenset()
    """The conversation keys that were wholly theirs (their files go too)."""
    sessions: frozenset[str] = frozenset()
    """The sessions of those conversations (their recordings go too)."""

    def add(self, what: str, count: int) -> None:
        if count:
            self.removed[what] = self.removed.get(what, 0) + count

    @property
    def total(self) -> int:
        return sum(self.removed.values()) + self.redacted

    def summary(self) -> str:
        """One line: ``removed 12 rows: inbox 3, messages 8, memories 1; 2 group turns
        redacted`` (or ``nothing was kept``)."""
        if not self.total:
            return "nothing was kept"
        rows = sum(self.removed.values())
        parts = ", ".join(f"{name} {count}" for name, count in sorted(self.removed.items()))
        line = f"removed {rows}: {parts}" if rows else "removed no rows"
        if self.redacted:
            line += f"; {self.redacted} group turn{'s' if self.redacted != 1 else ''} redacted"
        return line


@dataclass(frozen=True, slots=True)
class Traces:
    """What the inbox and the sessions show of a person, the parameters of every rule."""

    keys: frozenset[str]
    """Their conversations (see the module docstring)."""
    inbox: frozenset[int]
    """Inbox rows they sent, and every inbox row of their conversations."""
    chats: frozenset[str]
    """Their direct chats' ids."""
    dedupe: frozenset[str]
    """The inbound ids of the messages they sent that the inbox still holds."""


def speaker_marks(user: str) -> tuple[str, str]:
    """How a stored turn names them (``botd.speakers``): the end of their speaker label,
    ``(id 42)]``, and of the header of a quote of their message, ``(id 42):]``; no other
    id's label or header contains either."""
    return f"(id {user})]", f"(id {user}):]"


def key_range(channel: str) -> tuple[str, str]:
    """The bounds ``lo <= key < hi`` of the conversation keys of ``channel`` (``name:...``)."""
    return f"{channel}:", f"{channel};"


def traces(
    person: Person, inbox_rows: Iterable[tuple[int, str, str]], channel_keys: Iterable[str]
) -> Traces:
    """``person``'s traces, from the channel's inbox rows (id, conversation key, the message
    as JSON) and the conversation keys the channel has sessions or rows under."""
    suffix = f"{USER_KEY_MARK}{person.user}"
    keys = set(person.conversations)
    keys.update(key for key in channel_keys if key.endswith(suffix))
    chats = set(person.chats)
    sent: set[int] = set()
    dedupe: set[str] = set()
    rows = list(inbox_rows)
    for row_id, key, message in rows:
        data = json.loads(message)
        if str(data.get("sender_id")) != person.user:
            continue
        sent.add(row_id)
        dedupe.add(str(data.get("message_id")))
        dedupe.update(str(k) for k in data.get("dedupe_keys") or ())
        if data.get("is_direct"):
            keys.add(key)
            chats.add(str(data.get("chat_id")))
    sent.update(row_id for row_id, key, _ in rows if key in keys)
    return Traces(frozenset(keys), frozenset(sent), frozenset(chats), frozenset(dedupe))
