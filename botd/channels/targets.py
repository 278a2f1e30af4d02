"""What several platforms' target forms share (see ``TargetForm``): the ``channel:<id>`` /
``user:<id>`` spelling Slack and Discord targets take, and the ``sendMessage`` action of
OpenClaw's tools named after a platform."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["KIND_PREFIX", "kind_target", "send_message", "text_arg"]

# <@U123>, <@!123>, <@U123|name>, <#C123>, <#C123|name>
_MENTION = re.compile(r"^<([@#])!?([^>|]+)(?:\|[^>]*)?>$")
KIND_PREFIX = re.compile(r"^(channel|user):", re.IGNORECASE)
"""A target that says what it names: ``channel:<id>`` or ``user:<id>`` (any case)."""


def kind_target(base: str) -> str:
    """``channel:<id>`` or ``user:<id>``, lowercased: ``<@U1>``, ``<#C1|name>``, ``@x`` and
    ``#x`` are read as user / channel; a bare id is a channel; "" when no id is left."""
    mention = _MENTION.match(base)
    if mention:
        kind = "user" if mention.group(1) == "@" else "channel"
        ident = mention.group(2).strip()
    elif KIND_PREFIX.match(base):
        kind, _, ident = base.partition(":")
        kind = kind.lower()
        ident = ident.strip()
    elif base.startswith("@"):
        kind, ident = "user", base[1:].strip()
    elif base.startswith("#"):
        kind, ident = "channel", base[1:].strip()
    else:
        kind, ident = "channel", base
    return f"{kind}:{ident}".lower() if ident else ""


def text_arg(args: Mapping[str, Any], *keys: str) -> str | None:
    """The first of ``keys`` whose value is a non-blank string (numbers count, as ids)."""
    for key in keys:
        value = args.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            value = str(value)
        if isinstance(value, str) and value.strip():
            return value
    return None


def send_message(
    action: str, args: Mapping[str, Any], thread_id: str | None
) -> tuple[str, str | None] | None:
    """A platform tool's ``sendMessage``: it sends to its ``to``, in the thread named."""
    to = text_arg(args, "to") if action == "sendmessage" else None
    return None if to is None else (to, thread_id)
