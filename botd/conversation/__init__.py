"""Sessions: one per conversation, at most one agent run each, queue modes, chat commands.

* ``manager``: ``SessionManager``, the registry, queue modes, the global run cap, shutdown;
* ``run``: one agent run, its recording and transcript writes, replies to the delivery;
* ``commands``: the answers to ``/new``, ``/reset``, ``/stop``, ``/status``, ``/help``;
* ``session``, ``settings``: a conversation's live state, and the sessions' settings.
"""

from .manager import SessionManager
from .session import Session
from .settings import (
    DEFAULT_QUEUE_MODE,
    CoalesceSettings,
    QueueMode,
    ResetPolicy,
    RunHooks,
    SessionSettings,
)

__all__ = [
    "DEFAULT_QUEUE_MODE",
    "CoalesceSettings",
    "QueueMode",
    "ResetPolicy",
    "RunHooks",
    "Session",
    "SessionManager",
    "SessionSettings",
]
