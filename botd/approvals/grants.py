"""Standing grants: "always allow this exact call in this chat".

A tool listed in ``agent.approvals.always_allow`` (``exec``, say) gets a third button on its
requests, *Always allow here*. Pressed by an approver, the request's row in the approvals table
(``ApprovalLedger``) is decided ``always`` and stays: its ``grant`` names the exact call (the
tool and its arguments, to the byte) in the request's chat (platform instance, account and
chat id), and the next call that is the same in the same chat runs without asking. Any other
call, or the same one in another chat, is asked about as before.

``/allowed`` lists the chat's grants, numbered; ``/allowed revoke <n>`` takes one back (an
approver's, or an owner's where the owners decide). The pruner leaves standing grants alone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ..chat import Target

__all__ = ["grant_chat", "grant_key"]


def grant_chat(target: Target) -> str:
    """The chat a grant holds in: ``<channel>:<account>:<chat id>`` (a thread's calls share
    their chat's grants)."""
    return f"{target.channel}:{target.account_id}:{target.chat_id}"


def grant_key(chat: str, tool_name: str, arguments: Mapping[str, Any]) -> str:
    """The digest naming the exact call ``tool_name(arguments)`` in ``chat``: arguments in
    their canonical JSON (keys sorted), so two spellings of one call match and any change of
    a byte does not."""
    exact = json.dumps(
        [chat, tool_name, arguments],
        ensure_ascii=False,
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(exact.encode()).hexdigest()
