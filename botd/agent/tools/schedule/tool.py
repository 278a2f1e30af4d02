"""The ``schedule`` tool: reminders the agent sets, lists and cancels when asked in chat.

A reminder is a persisted one-shot scheduler job (id ``reminder-…``) that, when due, runs a
prompt in the conversation it was created in and posts there (the call's origin, without the
reply-to: the message it answered may be long gone). It survives restarts, and ``list`` and
``/status`` see it through ``Scheduler.list_jobs``. ``cancel`` only touches this conversation's
reminders. The tool knows the scheduler only as ``Reminders``: what it asks of it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from ....chat import Target
from ....cluster.fencing import Fence
from ....config.cron import zone
from ...types import ToolDefinition
from ..base import ToolContext, ToolOutput

_DESCRIPTION = (
    "Reminders in this conversation. action 'create' schedules 'message' to be posted here "
    "later: give 'at' (an ISO 8601 date-time; without an offset it is read in the bot's time "
    "zone) or 'in_minutes'. action 'list' shows this conversation's scheduled jobs with ids. "
    "action 'cancel' removes the reminder 'id'."
)

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["create", "list", "cancel"]},
        "message": {"type": "string", "minLength": 1, "description": "What to remind of."},
        "at": {"type": "string", "description": "When, ISO 8601 (2025-06-01T17:00+02:00)."},
        "in_minutes": {"type": "number", "exclusiveMinimum": 0},
        "id": {"type": "string", "description": "The reminder to cancel."},
    },
    "required": ["action"],
    "additionalProperties": False,
}


class ScheduledJob(Protocol):
    """A job as the tool shows it (``botd.scheduler.JobInfo`` is one)."""

    @property
    def id(self) -> str: ...
    @property
    def next_run_time(self) -> datetime | None: ...
    @property
    def description(self) -> str: ...
    @property
    def conversation_key(self) -> str: ...


class Reminders(Protocol):
    """What the tool asks of the scheduler (``botd.scheduler.Scheduler`` is one): its zone and
    clock, the id prefix that marks a reminder, and one-shot jobs set, listed, looked up and
    cancelled."""

    @property
    def reminder_prefix(self) -> str: ...
    @property
    def timezone(self) -> str: ...
    def now(self) -> datetime: ...
    async def add_at(
        self,
        job_id: str,
        when: datetime,
        *,
        prompt: str,
        target: Target,
        conversation_key: str | None = None,
        label: str | None = None,
        fence: Fence | None = None,
    ) -> ScheduledJob: ...
    async def list_jobs(self, conversation_key: str | None = None) -> Sequence[ScheduledJob]: ...
    async def get(self, job_id: str) -> ScheduledJob | None: ...
    async def cancel(self, job_id: str, *, fence: Fence | None = None) -> bool: ...


PROMPT = "Reminder you scheduled earlier in this conversation; tell the user now: {message}"


def _error(text: str) -> ToolOutput:
    return ToolOutput(text=text, is_error=True, details={"status": "error", "error": text})


class ScheduleTool:
    """The ``schedule`` tool over the scheduler's ``Reminders`` (see the module docstring)."""

    def __init__(self, scheduler: Reminders, *, timeout: float | None = 10.0) -> None:
        self._scheduler = scheduler
        self.timeout = timeout
        self.spec = ToolDefinition(name="schedule", description=_DESCRIPTION, input_schema=_SCHEMA)

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        action = args.get("action")
        if action == "create":
            return await self._create(args, context)
        if action == "list":
            return await self._list(context)
        if action == "cancel":
            return await self._cancel(args, context)
        return _error(f"unknown action {action!r}: use create, list or cancel")

    def _when(self, args: dict[str, Any]) -> datetime | str:
        """When the reminder is due, or why that cannot be told."""
        at, minutes = args.get("at"), args.get("in_minutes")
        if (at is None) == (minutes is None):
            return "give exactly one of 'at' and 'in_minutes'"
        now = self._scheduler.now()
        if minutes is not None:
            if isinstance(minutes, bool) or not isinstance(minutes, int | float) or minutes <= 0:
                return f"'in_minutes' must be a positive number, got {minutes!r}"
            return now + timedelta(minutes=minutes)
        try:
            when = datetime.fromisoformat(str(at))
        except ValueError:
            return f"'at' is not an ISO 8601 date-time: {at!r}"
        if when.tzinfo is None:
            when = when.replace(tzinfo=zone(self._scheduler.timezone))
        if when <= now:
            return f"'at' is in the past ({when.isoformat()}; now {now.isoformat()})"
        return when

    async def _create(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        origin = context.origin
        if origin is None:
            return _error("no conversation to post the reminder back to")
        text = str(args.get("message", "")).strip()
        if not text:
            return _error("'message' is empty: say what to remind of")
        when = self._when(args)
        if isinstance(when, str):
            return _error(when)
        target = Target(origin.channel, origin.chat_id, origin.account_id, origin.thread_id)
        job_id = f"{self._scheduler.reminder_prefix}{uuid.uuid4().hex[:10]}"
        info = await self._scheduler.add_at(
            job_id,
            when,
            prompt=PROMPT.format(message=text),
            target=target,
            conversation_key=context.conversation_key,
            label=f"reminder: {text}",
            fence=context.scope.fence,  # a run this node no longer owns sets nothing
        )
        return ToolOutput(
            text=f"reminder {job_id} set for {when.isoformat()}",
            details={"status": "ok", "id": info.id, "at": when.isoformat()},
        )

    async def _list(self, context: ToolContext) -> ToolOutput:
        jobs = await self._scheduler.list_jobs(context.conversation_key)
        if not jobs:
            return ToolOutput(text="no scheduled jobs in this conversation", details={"jobs": []})
        lines = [
            f"{job.id}: next {job.next_run_time.isoformat() if job.next_run_time else '-'}"
            f" — {job.description}"
            for job in jobs
        ]
        return ToolOutput(text="\n".join(lines), details={"jobs": [job.id for job in jobs]})

    async def _cancel(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        job_id = str(args.get("id", "")).strip()
        if not job_id:
            return _error("give the 'id' of the reminder to cancel (see action 'list')")
        job = await self._scheduler.get(job_id)
        if (
            job is None
            or not job_id.startswith(self._scheduler.reminder_prefix)
            or job.conversation_key != context.conversation_key
        ):
            return _error(f"no reminder {job_id} in this conversation")
        await self._scheduler.cancel(job_id, fence=context.scope.fence)
        return ToolOutput(text=f"reminder {job_id} cancelled", details={"status": "ok"})
