"""Tool progress (``agent.tool_progress: status``): which tool a run is waiting on.

``ToolProgress`` watches a run's events. A tool that is still running a second after it
started shows in the chat (the delivery's ``ToolStatus``: Slack's assistant thread status,
or a status line edited in place); the next tool to start replaces it at once, and when no
tool has run for that second it is removed; the run's end (its answer, a ``/stop``, a
failure, a shutdown) removes it in any case. A run of quick tools shows nothing at all.

An agent that follows a plan (an ACP agent's ``plan`` update, ``plan``) shows the step under
way whenever no tool does, at once ("📋 Step 2 of 5: …"); the run's end removes it too.

What shows is plain words: the tool's name (an MCP tool's with its server), and for
``web_fetch`` the host it reads; never another argument, which could hold a secret. The
``exec`` tool shows as "a command", with its command line (secrets masked, cut short) only
where ``agent.exec.show_command`` is on.

``StatusKeeper`` is the run's ``StatusJournal`` over the store (``StatusLines``), and
``remove_leftovers`` removes, for a resumed run, what a process that crashed mid-tool left.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import urlsplit

from ..chat import MessageRef
from ..cluster.fencing import RunScope
from ..delivery import Delivery, PlanStep, StatusKind, ToolActivity, ToolStatus
from ..events import AgentEvent, ToolExecutionEnd, ToolExecutionStart
from ..ops.logging import mask_secrets
from ..store import StatusLine
from ..store.protocols import StatusLines

log = logging.getLogger(__name__)

SLOW_TOOL_SECONDS = 1.0
"""How long a tool runs before the chat is shown which."""

_HINT_CHARS = 60


def activity_of(name: str, args: dict[str, Any], *, show_command: bool = False) -> ToolActivity:
    """What the chat is shown of a call to tool ``name`` with ``args``; ``show_command``:
    the ``exec`` tool's command line is shown (``agent.exec.show_command``)."""
    if name == "exec":
        command = args.get("command")
        hint = ""
        if show_command and isinstance(command, str):
            hint = mask_secrets(" ".join(command.split()))
            hint = hint if len(hint) <= _HINT_CHARS else hint[: _HINT_CHARS - 1] + "…"
        return ToolActivity(name, hint=hint, phrase="a command")
    where = ""
    if name.startswith("mcp__"):
        server, _, tool = name.removeprefix("mcp__").partition("__")
        if tool:
            name, where = tool, server
    hint = ""
    if name == "web_fetch" and not where:
        url = args.get("url")
        if isinstance(url, str):
            try:
                hint = urlsplit(url.strip()).hostname or ""
            except ValueError:
                hint = ""
    return ToolActivity(name, where, hint[:_HINT_CHARS])


class ToolProgress:
    """Feeds one run's ``ToolStatus`` from its events (see the module docstring)."""

    def __init__(
        self, status: ToolStatus, delay: float = SLOW_TOOL_SECONDS, *, show_command: bool = False
    ) -> None:
        self._status = status
        self._show_command = show_command
        self._delay = delay
        self._loop = asyncio.get_running_loop()
        self._running: dict[str, ToolActivity] = {}
        """The calls under way, by id, in the order they started."""
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._idle: asyncio.TimerHandle | None = None
        self._showing = False
        self._plan: PlanStep | None = None
        """The plan's step under way (None: no plan, or every step done)."""

    def on_event(self, event: AgentEvent) -> None:
        if isinstance(event, ToolExecutionStart):
            self._started(
                event.tool_call_id,
                activity_of(event.tool_name, event.args, show_command=self._show_command),
            )
        elif isinstance(event, ToolExecutionEnd):
            self._ended(event.tool_call_id)

    def _started(self, call_id: str, activity: ToolActivity) -> None:
        self._running[call_id] = activity
        if self._showing:
            self._cancel_idle()
            self._status.show(activity)  # the next tool takes the place at once
        else:
            self._timers[call_id] = self._loop.call_later(self._delay, self._slow, call_id)

    def _ended(self, call_id: str) -> None:
        self._running.pop(call_id, None)
        timer = self._timers.pop(call_id, None)
        if timer is not None:
            timer.cancel()
        if not self._showing:
            return
        if self._running:
            self._status.show(next(reversed(self._running.values())))
        elif self._idle is None:
            # Removed unless another tool starts within the delay (a run of tools in a row).
            self._idle = self._loop.call_later(self._delay, self._hide)

    def plan(self, step: PlanStep | None) -> None:
        """The agent's plan is at ``step`` now (None: no step left): shown at once unless a
        tool shows, in which case it shows when the tools are done."""
        self._plan = step
        if self._running and self._showing:
            return
        if step is not None:
            self._cancel_idle()
            self._showing = True
            self._status.show(step)
        elif self._showing and not self._running:
            self._showing = False
            self._status.show(None)

    def _slow(self, call_id: str) -> None:
        self._timers.pop(call_id, None)
        activity = self._running.get(call_id)
        if activity is not None:
            self._showing = True
            self._status.show(activity)

    def _hide(self) -> None:
        self._idle = None
        if self._running:
            return
        if self._plan is not None:
            self._status.show(self._plan)  # the tools are done: back to the plan's step
        else:
            self._showing = False
            self._status.show(None)

    def _cancel_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    async def close(self) -> None:
        """The run is over: remove what shows, whatever the interval."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._cancel_idle()
        self._running.clear()
        await self._status.close()


class StatusKeeper:
    """A run's ``StatusJournal``: what its tool status shows, kept per conversation."""

    def __init__(self, store: StatusLines, conversation_key: str) -> None:
        self._store = store
        self._key = conversation_key

    async def kept(self, kind: StatusKind, ref: MessageRef) -> None:
        await self._store.keep_status_line(self._key, StatusLine(kind, ref.target, ref.message_id))

    async def removed(self, kind: StatusKind, ref: MessageRef) -> None:
        await self._store.forget_status_line(self._key, kind, ref.message_id)


async def remove_leftovers(
    store: StatusLines, delivery: Delivery, conversation_key: str, scope: RunScope | None = None
) -> None:
    """Remove the tool status an earlier process left in the conversation (it crashed
    mid-tool), for its run's ``scope``; one that cannot be removed is logged and stays kept
    for the next try."""
    try:
        lines = await store.status_lines(conversation_key)
    except Exception as exc:
        log.warning("reading the tool status left in %s failed: %s", conversation_key, exc)
        return
    for line in lines:
        ref = MessageRef(line.target, line.message_id)
        try:
            await delivery.remove_status(line.kind, ref, scope=scope)
            await store.forget_status_line(conversation_key, line.kind, line.message_id)
        except Exception as exc:
            log.warning("removing the tool status left in %s failed: %s", conversation_key, exc)
        else:
            log.info("removed the tool status an interrupted run left in %s", conversation_key)


__all__ = ["SLOW_TOOL_SECONDS", "StatusKeeper", "ToolProgress", "activity_of", "remove_leftovers"]
