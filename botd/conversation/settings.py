"""The sessions' settings: queue mode, reset policy, run hooks and how runs are paced."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from ..agent.loop import LoopConfig
from ..chat import InboundMessage
from ..config.overrides import Defaults, Effective, resolve
from ..delivery import CoalesceSettings, RunOptions
from ..delivery.voice import Voice
from ..store import ModelUsage
from ..subscriber import SubscriberConfig

log = logging.getLogger(__package__)

QueueMode = Literal["steer", "followup", "collect", "interrupt"]
DEFAULT_QUEUE_MODE: QueueMode = "collect"


@dataclass(frozen=True, slots=True)
class ResetPolicy:
    """When a conversation starts over: never (default), after idle minutes, or
    daily at an hour (local time)."""

    mode: Literal["off", "idle", "daily"] = "off"
    idle_minutes: int = 0
    daily_hour: int = 4

    def is_due(self, last_activity: float, now: float) -> bool:
        if self.mode == "idle":
            return now - last_activity >= self.idle_minutes * 60
        if self.mode == "daily":
            current = datetime.fromtimestamp(now)
            boundary = current.replace(hour=self.daily_hour, minute=0, second=0, microsecond=0)
            if boundary > current:
                boundary -= timedelta(days=1)
            return last_activity < boundary.timestamp()
        return False

    def notice(self) -> str:
        """What the first answer after a reset by this policy says first."""
        if self.mode == "idle":
            why = f"the last one was idle for {self.idle_minutes} minutes or more"
        else:
            why = f"conversations start over every day at {self.daily_hour:02d}:00"
        return f"(A new conversation: {why}.)"


@dataclass(frozen=True, slots=True)
class SessionSettings:
    loop: LoopConfig
    subscriber: SubscriberConfig = field(default_factory=SubscriberConfig)
    queue_mode: QueueMode = DEFAULT_QUEUE_MODE
    debounce: float = 0.0
    """Seconds a new message waits for more from its conversation before its run starts;
    messages that came within it of each other are answered together (0: off)."""
    max_concurrent_runs: int = 8
    reset: ResetPolicy = field(default_factory=ResetPolicy)
    record_events_dir: Path | None = None
    """With a directory, each run's events are written there as JSONL for ``botd replay``."""
    context_budget_tokens: int = 100_000
    """When a transcript grows past this, its older turns are compacted."""
    keep_recent_tokens: int = 20_000
    """How much of the latest conversation compaction keeps word for word."""
    typing_delay: float = 1.0
    """How long a run works with no reply out before the typing indicator shows."""
    typing_interval: float = 5.0
    """How often a running session renews the typing indicator (platforms expire it)."""
    coalesce: CoalesceSettings | None = None
    """Join small blocks that stream in quick succession into one message (blocks mode)."""
    tool_status: bool = False
    """Show which tool a run waits on while one takes longer than a second
    (``agent.tool_progress: status``; ``progress.py``)."""
    show_command: bool = False
    """Tool progress shows the ``exec`` tool's command line, not only "a command"
    (``agent.exec.show_command``)."""
    speech: Voice | None = None
    """Speaks the replies asked for as voice notes (``media.speech``; None: not set)."""

    def run_options(self) -> RunOptions:
        """How the delivery paces each run's output."""
        return RunOptions(
            coalesce=self.coalesce,
            typing_delay=self.typing_delay,
            typing_interval=self.typing_interval,
            speech=self.speech,
        )


@dataclass(frozen=True, slots=True)
class RunHooks:
    """Callbacks around a run (the daemon's metrics); each is optional and must not block.

    ``on_end`` gets the run's stop reason, ``"exception"`` when the run raised, or
    ``"cancelled"`` when its task was cancelled. ``on_first_reply`` gets the seconds from the
    arrival of the prompt's earliest message to the run's first delivered reply (``None`` when
    the arrival is unknown, e.g. steering run as a follow-up). ``on_usage`` gets the tokens
    each model used in the run. A hook that raises is logged.
    """

    on_start: Callable[[InboundMessage], None] | None = None
    on_end: Callable[[InboundMessage, str], None] | None = None
    on_first_reply: Callable[[InboundMessage, float | None], None] | None = None
    on_usage: Callable[[InboundMessage, ModelUsage], None] | None = None
    """The tokens one model used in the run (once per model that answered, at its end)."""


def everywhere(settings: SessionSettings, model: str) -> Effective:
    """The settings of every chat alike where no chat's own are known: ``settings``'
    system prompt and queue mode, the primary ``model``, botd's own loop answering."""
    return resolve(None, Defaults(settings.loop.system, model, settings.queue_mode), channel="")


def call_hook(hook: Callable[..., None] | None, *args: object) -> None:
    """Call ``hook`` if set; a hook that raises is logged and does not reach the run."""
    if hook is None:
        return
    try:
        hook(*args)
    except Exception:
        log.exception("run hook failed")


__all__ = [
    "DEFAULT_QUEUE_MODE",
    "CoalesceSettings",
    "QueueMode",
    "ResetPolicy",
    "RunHooks",
    "SessionSettings",
    "call_hook",
    "everywhere",
]
