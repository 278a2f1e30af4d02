"""Where a reply goes (``Target``) and what files came with a message (``Attachment``) as the
store keeps them: JSON objects of their fields.

The inbox (an accepted message's reply target), the outbox (each piece's target) and the
scheduled jobs (where a job posts) all write and read it here, so a row written by one is read
back the same way by all.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from ..chat import Attachment, Target

_FIELDS = tuple(f.name for f in fields(Target))


def target_data(target: Target) -> dict[str, str | None]:
    """``target``'s fields as plain data (what goes into JSON)."""
    return {name: getattr(target, name) for name in _FIELDS}


def target_from_data(data: dict[str, Any]) -> Target:
    """The ``Target`` of ``target_data``'s output; a missing account is the default one."""
    return Target(
        channel=str(data["channel"]),
        chat_id=str(data["chat_id"]),
        account_id=str(data.get("account_id") or "default"),
        thread_id=data.get("thread_id"),
        reply_to_id=data.get("reply_to_id"),
    )


def target_json(target: Target) -> str:
    return json.dumps(target_data(target), ensure_ascii=False)


def target_from_json(text: str) -> Target:
    return target_from_data(json.loads(text))


def attachments_data(attachments: Sequence[Attachment]) -> list[dict[str, Any]]:
    return [{f.name: getattr(a, f.name) for f in fields(Attachment)} for a in attachments]


def attachments_from_data(data: Sequence[dict[str, Any]] | None) -> tuple[Attachment, ...]:
    return tuple(Attachment(**a) for a in data or ())
