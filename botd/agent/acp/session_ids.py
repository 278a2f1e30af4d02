"""Which ACP session holds each botd session: ``<state_dir>/acp/sessions.json``.

A conversation's botd session (its transcript since its start or its last ``/new``) is one
session of the ACP agent. The agent's session id is kept here, by botd's session id, so that
after a restart of botd or of the agent the same session is loaded again (``session/load``,
where the agent offers it); a ``/new`` gives the conversation a new botd session, hence a new
agent session. The file is small (one line per session) and replaced whole on each change,
so a crash leaves the old or the new version, never half of one. It lives in this node's
state directory: on several nodes a conversation taken over by another node starts a new
agent session there (with the transcript, see ``botd.agent.acp.turn``).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

__all__ = ["SessionIds"]

log = logging.getLogger(__name__)


class SessionIds:
    """The agent's session id of each botd session, kept in a file (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._ids: dict[str, str] = {}
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            loaded = {}
        except (OSError, ValueError) as exc:
            log.warning("%s cannot be read (%s): every session starts anew", path, exc)
            loaded = {}
        if isinstance(loaded, dict):
            self._ids = {str(k): str(v) for k, v in loaded.items()}

    def get(self, session_id: str) -> str | None:
        return self._ids.get(session_id)

    def keep(self, session_id: str, agent_session_id: str) -> None:
        """Remember that ``session_id`` is the agent's ``agent_session_id`` from now on."""
        self._ids[session_id] = agent_session_id
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fresh = self._path.with_suffix(".json.new")
        fresh.write_text(json.dumps(self._ids, indent=0, sort_keys=True), encoding="utf-8")
        os.replace(fresh, self._path)
