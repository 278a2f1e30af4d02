"""Where the agent's ``message`` tool may post.

A run may post to the conversation it runs in (same channel, account, chat and thread; a
scheduled job's run runs in its ``deliver_to`` conversation). Any other chat must be listed in
``agent.message_targets`` and, listed or not, the access policy must allow it: a direct chat
only with a user who would be let in, a group only one the group policy allows
(``Router.may_post``, the router's own rules asked without side effects). Everything is read
when the call is made, so a reload's new policies and targets count at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Sequence
from typing import Protocol

from ..chat import Target
from ..config.schema import MessageTargetSection
from .access import Decision

log = logging.getLogger(__name__)

NOT_LISTED = "not this conversation and not in agent.message_targets"


class PostingPolicy(Protocol):
    def may_post(self, target: Target) -> Decision: ...


def same_conversation(target: Target, origin: Target | None) -> bool:
    """Whether ``target`` is ``origin``'s conversation (channel, account, chat and thread)."""
    if origin is None:
        return False
    return (target.channel, target.account_id, target.chat_id, target.thread_id) == (
        origin.channel,
        origin.account_id,
        origin.chat_id,
        origin.thread_id,
    )


def listed(target: Target, targets: Sequence[MessageTargetSection]) -> bool:
    """Whether ``target`` is one of ``targets`` (an entry without thread names the chat only)."""
    return any(
        (entry.channel, entry.chat, entry.thread)
        == (target.channel, target.chat_id, target.thread_id)
        for entry in targets
    )


class MessageAccess:
    """Decides the ``message`` tool's sends (see the module docstring).

    ``policy`` is the live router; ``targets`` returns the current ``agent.message_targets``;
    ``channels`` holds the running channels (the live adapter dict).
    """

    def __init__(
        self,
        policy: PostingPolicy,
        targets: Callable[[], Sequence[MessageTargetSection]],
        channels: Container[str],
    ) -> None:
        self._policy = policy
        self._targets = targets
        self._channels = channels

    def refusal(self, target: Target, origin: Target | None) -> str | None:
        """Why the tool may not post to ``target`` from a run in ``origin`` (None: it may)."""
        if target.channel not in self._channels:
            return f"channel {target.channel} is not running"
        if same_conversation(target, origin):
            return None
        if not listed(target, self._targets()):
            return NOT_LISTED
        try:
            decision = self._policy.may_post(target)
        except Exception as exc:  # e.g. an unreadable pairing file: refuse, never guess
            log.warning("the access policy for %s could not be read: %r", target.channel, exc)
            return f"the access policy for chat {target.chat_id} could not be read"
        if not decision.accepted:
            return f"the access policy refuses chat {target.chat_id} ({decision.reason})"
        return None
