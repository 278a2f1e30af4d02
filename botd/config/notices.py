"""What ``botd check`` warns about in a config that is valid: it runs, but likely not as meant.

* **Placeholder ids.** ``docs/config-reference.yaml`` shows chats, groups and users with
  made-up ids (``PLACEHOLDER_IDS``); one left in a live config posts jobs into, or admits,
  a chat that is not the operator's. Found anywhere in the file: as a value, a mapping key
  (a group's id) or a part of a ``channel/chat/thread`` target.
* **Literal secrets in a file others can read.** A secret written in the file itself rather
  than as ``${VAR}`` is readable by anyone who may read the file; with a file mode that
  lets the group or others read it (``mode & 0o044``), each such secret is named (never
  its value) with the fix.

Each notice is a ``ConfigProblem`` (key path, line, message), like a problem, but the file
is still accepted.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .problems import ConfigProblem, Loc, format_path
from .secrets import secret_locations
from .source import Sourced, line_of

__all__ = ["PLACEHOLDER_IDS", "literal_secrets", "placeholder_ids"]

PLACEHOLDER_IDS = frozenset(
    {
        "-1001234567890",  # a Telegram group
        "123456789",  # a Telegram user
        "C0123456789",  # a Slack channel
        "U0123456789",  # a Slack user
        "123456789012345678",  # a Discord channel
        "876543210987654321",  # a Discord user
    }
)
"""The made-up ids of the reference config's examples; none is anyone's real chat or user."""

READABLE_BY_OTHERS = 0o044
"""File mode bits that let the file's group or everyone read it."""
SHORTEST_SECRET = 4
"""Characters below which a value is no secret worth naming (``FLAG: "1"`` in an MCP
server's ``env``, whose values all count as secrets); the log masking ignores them too."""


def _key_text(key: Any) -> str | int:
    return key if isinstance(key, str) else str(key)


def placeholder_ids(root: Any) -> list[ConfigProblem]:
    """Every placeholder id in ``root`` (the file's YAML, ``${VAR}``s filled)."""
    found: list[ConfigProblem] = []

    def note(loc: Loc, value: str) -> None:
        found.append(
            ConfigProblem(
                format_path(loc),
                line_of(root, loc),
                f"{value} is a placeholder id from the reference config, not a real chat or "
                "user: put the real id here (/whoami in the chat tells it) or remove the entry",
            )
        )

    def visit(node: Any, loc: Loc) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                where = (*loc, _key_text(key))
                if str(key) in PLACEHOLDER_IDS:
                    note(where, str(key))
                else:
                    visit(value, where)
        elif isinstance(node, list):
            for index, item in enumerate(node):
                visit(item, (*loc, index))
        elif isinstance(node, str | int) and not isinstance(node, bool):
            parts = str(node).split("/") if isinstance(node, str) else [str(node)]
            for part in parts:
                if part.strip() in PLACEHOLDER_IDS:
                    note(loc, part.strip())
                    break

    visit(root, ())
    return found


def literal_secrets(
    root: Any, config: BaseModel, sourced: Sourced, *, mode: int, file_name: str
) -> list[ConfigProblem]:
    """The secrets written in the file itself, when its ``mode`` lets others read it."""
    if not mode & READABLE_BY_OTHERS:
        return []
    from_env = {format_path(loc) for loc in sourced}
    written = [
        loc
        for loc, value in secret_locations(config)
        if len(value.strip()) >= SHORTEST_SECRET and format_path(loc) not in from_env
    ]
    return [
        ConfigProblem(
            format_path(loc),
            line_of(root, loc),
            f"a secret written in the file, which others may read (mode {mode & 0o777:04o}): "
            f"write it as ${{VAR}} and keep the value in the environment, or chmod 600 "
            f"{file_name}",
        )
        for loc in dict.fromkeys(written)
    ]
