"""Stop reasons and tool kinds between botd's runtime and the Agent Client Protocol, mapped
once: botd as an ACP agent (the ACP channel, ``botd.channels.acp.updates``) and botd as an
ACP client (the ACP backend, ``botd.agent.acp.turn``) both map through here.

* Stop reasons: ACP's five (``end_turn``, ``max_tokens``, ``max_turn_requests``, ``refusal``,
  ``cancelled``) are botd's runtime's own words for the same ends, both ways
  (``shared_stop_reason``). botd's other outcomes (a run that failed: ``error``,
  ``exception``; ``tool_use``, which never ends a run) have no ACP word: each side says
  what it does with them.
* Tool kinds: ACP tells an editor what kind a call is (it picks an icon by it); botd's
  tools have names only. ``tool_kind`` reads a kind off a botd tool's name; ``tool_name``
  names an ACP agent's call to a chat by its title's first word, else its kind (a chat's
  tool progress shows names, never arguments).
"""

from __future__ import annotations

from acp.schema import StopReason, ToolKind

__all__ = ["SHARED_STOP_REASONS", "shared_stop_reason", "tool_kind", "tool_name"]

SHARED_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "max_turn_requests": "max_turn_requests",
    "refusal": "refusal",
    "cancelled": "cancelled",
}
"""The stop reasons botd's runtime and ACP share, by their (common) name."""


def shared_stop_reason(reason: str) -> StopReason | None:
    """``reason`` (botd's or ACP's) as the stop reason both sides know; None when it is one
    of botd's others, or an ACP word this version does not know."""
    return SHARED_STOP_REASONS.get(reason)


_KINDS: tuple[tuple[tuple[str, ...], ToolKind], ...] = (
    (("fetch", "http", "browse", "url"), "fetch"),
    (("search", "grep", "find", "glob"), "search"),
    (("read", "list", "ls", "cat", "view"), "read"),
    (("write", "edit", "patch", "replace", "create"), "edit"),
    (("delete", "remove", "rm"), "delete"),
    (("move", "rename"), "move"),
    (("exec", "shell", "bash", "run", "command"), "execute"),
)


def tool_kind(name: str) -> ToolKind:
    """What kind of tool botd's ``name`` is, as far as its name tells (editors pick an icon
    by it): the first kind one of its words hints at, else ``other``."""
    words = name.lower().replace("__", "_").replace("-", "_").split("_")
    for hints, kind in _KINDS:
        if any(word in hints for word in words):
            return kind
    return "other"


def tool_name(title: str | None, kind: str | None) -> str:
    """What a chat is shown of an ACP agent's call: its title's first word, if it is one
    (``Write``, ``Read``…), or its kind."""
    first = (title or "").split(maxsplit=1)
    if first and first[0].isidentifier():
        return first[0]
    return kind or "tool"
