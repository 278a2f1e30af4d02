"""``session_scope: user``: in such a group, each sender has a conversation of their own.

An adapter keys a group message by its chat, and by its forum topic or thread where it has
one (``telegram:<chat>``, ``telegram:<chat>:topic:<thread>``, ``slack:<channel>:thread:<ts>``):
the group's conversation, as always. The router decides whose conversation a message to the
bot is. In a group whose ``session_scope`` is ``user`` (``AccessPolicy.user_scoped``), a
prompt, a chat command or a button press is its sender's: it is accepted under the group's
key followed by ``:user:<sender id>`` (``user_conversation_key``), so each person there has
their own history, queue, lease (on several nodes), ``/new``, ``/model``, ``/stop`` and
usage; in a forum topic or a thread, per topic (thread) and person. The reply still goes to
the group, as a reply to the sender's message: a run's target is its message's chat and
thread, never read from the key. Direct chats are one conversation per person anyway.

What stays the group's is its chatter: the messages nobody addressed to the bot (and edits
of earlier messages) are kept under the group's key, and every member's next prompt there is
shown the lines kept since that member's conversation last read them. A per-user
conversation does not consume the lines it shows (the others have not seen them): the
store marks how far it read (``chatter_read_by`` of ``accept_inbound``), in the transaction
that accepts the prompt, and the lines leave with the group's limit and retention. What one
member asked the bot, and its answers, stay in that member's conversation: in a user-scoped
group the bot is each person's own assistant, and another's prompt would be a question they
did not ask. For the same reason buttons botd posted in one member's conversation take
only that member's press (``anothers_buttons``); an approval request's buttons are decided
by its approvers, whoever they are, as anywhere. The default ``group`` keeps one
conversation for the group and the keys botd always stored.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..chat import InboundMessage
from .access import AccessPolicy

__all__ = [
    "NOT_YOURS",
    "USER_MARK",
    "ScopedMessage",
    "anothers_buttons",
    "scoped",
    "user_conversation_key",
]

USER_MARK = ":user:"
"""What separates a group's key from its member's id in a per-user key."""
NOT_YOURS = "These buttons belong to another person's conversation."
"""Told to a member who presses buttons botd posted in another member's conversation."""


def user_conversation_key(group_key: str, user: str) -> str:
    """The conversation of ``user`` in the group (or topic, or thread) keyed ``group_key``:
    ``telegram:-100123:user:42``, ``telegram:-100123:topic:7:user:42``,
    ``slack:C0ABC:thread:1700000000.000100:user:U1``, ``discord:111:user:42``."""
    return f"{group_key}{USER_MARK}{user}"


@dataclass(frozen=True, slots=True)
class ScopedMessage:
    """A message to the bot as its conversation takes it, and where its chatter is kept."""

    message: InboundMessage
    """The message, keyed by the conversation it belongs to."""
    chatter_key: str | None = None
    """The group's key, whose kept lines the message's conversation shares and reads past
    its own mark; None: the conversation's own lines (it consumes them)."""


def scoped(message: InboundMessage, policy: AccessPolicy) -> ScopedMessage:
    """``message`` (a message to the bot) keyed by the conversation that takes it: its
    sender's own in a user-scoped group, else the one its adapter keyed."""
    if message.is_direct or not policy.user_scoped(message.chat_id):
        return ScopedMessage(message, None)
    group_key = message.conversation_key
    own = user_conversation_key(group_key, message.sender_id)
    return ScopedMessage(replace(message, conversation_key=own), group_key)


def anothers_buttons(press: ScopedMessage, posted_by: str | None) -> bool:
    """Whether the buttons a press (scoped) is of were posted by the conversation of another
    member of the same user-scoped group (``posted_by``: that conversation's key, None when
    not recorded)."""
    group_key = press.chatter_key
    if group_key is None or posted_by is None:
        return False
    own = press.message.conversation_key
    return posted_by != own and posted_by.startswith(group_key + USER_MARK)
