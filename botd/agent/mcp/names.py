"""The names MCP tools go by, and the per-group lists that narrow a run's tools.

A server's tool ``search`` on the server named ``docs`` is offered to the model as
``mcp__docs__search``. Model APIs accept tool names of 1 to 64 letters, digits, ``_`` and
``-``, so the name is made to fit, the same way every time: every other character becomes
``_``, and a name longer than 64 characters is cut to 55 and ends in ``_`` and the first 8
hex digits of the SHA-256 of the name as the server gave it (``mcp__<server>__<tool>``
before any change), which keeps two long names that share their start apart.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import TypeVar

from ..tools.base import Tool

__all__ = ["MAX_NAME", "PREFIX", "allowed", "narrow", "tool_name"]

MAX_NAME = 64
"""The longest tool name the model APIs accept."""
PREFIX = "mcp__"
_OTHER = re.compile(r"[^A-Za-z0-9_-]")
_HASH_DIGITS = 8

_T = TypeVar("_T", bound=Tool)


def _hashed(name: str, original: str) -> str:
    digest = hashlib.sha256(original.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{name[: MAX_NAME - _HASH_DIGITS - 1]}_{digest[:_HASH_DIGITS]}"


def tool_name(server: str, tool: str, *, taken: Iterable[str] = ()) -> str:
    """The name the model sees for ``server``'s tool ``tool`` (see the module docstring).

    A name already in ``taken`` (two tools of one server that differ only in characters
    made ``_``) gets the hashed ending too, so each stays callable.
    """
    original = f"{PREFIX}{server}__{tool}"
    name = _OTHER.sub("_", original)
    if len(name) > MAX_NAME or name in set(taken):
        name = _hashed(name, original)
    return name


def allowed(name: str, patterns: Sequence[str]) -> bool:
    """Whether a tool named ``name`` is on a group's list: by its name, or by a prefix ending
    in ``*`` (``mcp__docs__*``: every tool of the server ``docs``)."""
    for pattern in patterns:
        if pattern.endswith("*"):
            if name.startswith(pattern[:-1]):
                return True
        elif name == pattern:
            return True
    return False


def narrow(tools: Sequence[_T], patterns: Sequence[str]) -> list[_T]:
    """The tools of ``tools`` a group's list allows."""
    return [tool for tool in tools if allowed(tool.spec.name, patterns)]
