"""Reload planning: what a reload from one valid config to another has to do, as pure data.

``plan_reload`` compares two configs section by section and returns a ``ReloadPlan``:
channels to restart (their section changed), start and stop, whether the scheduled jobs,
the logging, the shutdown grace or the message targets changed, and which top-level
sections changed that apply only after a restart. Nothing is touched here; the App applies
the plan (``botd.app``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .schema import BotdConfig

__all__ = ["LIVE_KEYS", "RESTART_ONLY", "ReloadPlan", "channel_sections", "plan_reload"]

RESTART_ONLY = ("state_dir", "model", "agent", "health", "web", "store")
"""Top-level sections read only at start: a change is logged and waits for a restart."""
LIVE_KEYS = {"agent": {"message_targets", "skills_dir"}, "web": {"token"}}
"""Keys of those sections read when used (the message tool's targets, the web page's token)
or again on each reload (the skills): a reload applies them."""


def channel_sections(config: BotdConfig) -> dict[str, dict[str, Any]]:
    """Each enabled channel's section as plain data (what a reload compares)."""
    sections = config.channels.sections()
    return {name: sections[name].model_dump(mode="json") for name in config.channels.enabled()}


@dataclass(frozen=True, slots=True)
class ReloadPlan:
    """What a reload from one valid config to another has to do."""

    restart: frozenset[str] = frozenset()
    """Channels configured before and after whose section changed."""
    start: frozenset[str] = frozenset()
    stop: frozenset[str] = frozenset()
    jobs_changed: bool = False
    logging_changed: bool = False
    grace_changed: bool = False
    targets_changed: bool = False
    """``agent.message_targets`` changed (read live by the message tool)."""
    restart_only: tuple[str, ...] = ()
    """Changed top-level sections that take effect only when botd restarts."""
    unchanged: frozenset[str] = field(default_factory=frozenset)

    @property
    def empty(self) -> bool:
        return not (
            self.restart
            or self.start
            or self.stop
            or self.jobs_changed
            or self.logging_changed
            or self.grace_changed
            or self.targets_changed
            or self.restart_only
        )

    def describe(self) -> str:
        parts = [
            f"{what} {', '.join(sorted(names))}"
            for what, names in (
                ("restarting", self.restart),
                ("starting", self.start),
                ("stopping", self.stop),
            )
            if names
        ]
        if self.jobs_changed:
            parts.append("re-syncing scheduled jobs")
        if self.logging_changed:
            parts.append("new logging settings")
        if self.grace_changed:
            parts.append("new shutdown grace")
        if self.targets_changed:
            parts.append("new message targets")
        if self.restart_only:
            parts.append(f"changed {', '.join(self.restart_only)} (applies after a restart)")
        return "; ".join(parts) or "nothing changed"


def plan_reload(old: BotdConfig, new: BotdConfig) -> ReloadPlan:
    """Compare two valid configs section by section (see ``ReloadPlan``)."""
    before, after = channel_sections(old), channel_sections(new)
    both = before.keys() & after.keys()
    restart_only = tuple(
        key for key in RESTART_ONLY if _restart_view(old, key) != _restart_view(new, key)
    )
    return ReloadPlan(
        restart=frozenset(n for n in both if before[n] != after[n]),
        start=frozenset(after.keys() - before.keys()),
        stop=frozenset(before.keys() - after.keys()),
        jobs_changed=_dump(old.scheduler) != _dump(new.scheduler),
        logging_changed=_dump(old.logging) != _dump(new.logging),
        grace_changed=old.shutdown_grace != new.shutdown_grace,
        targets_changed=old.agent.message_targets != new.agent.message_targets,
        restart_only=restart_only,
        unchanged=frozenset(n for n in both if before[n] == after[n]),
    )


def _restart_view(config: BotdConfig, key: str) -> Any:
    """Section ``key`` without the keys a reload applies live."""
    value = getattr(config, key)
    if not hasattr(value, "model_dump"):
        return value
    return value.model_dump(mode="json", exclude=LIVE_KEYS.get(key))


def _dump(value: Any) -> Any:
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value
