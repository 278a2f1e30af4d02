"""The tool registry: each tool described once, and found like the channels.

A ``ToolSpec`` names a tool and brings what botd needs to offer it: the config section its
settings are read from (``section``, a dotted key such as ``agent.web_fetch``; None for a tool
without settings), the factory that builds it for one run from ``ToolDeps`` (the config in
force and the runtime's parts a tool may use), whether its calls wait for a person's approval
even when ``agent.approvals.tools`` does not list it (``needs_approval``), and what must be
installed for it (``requirement``, ``modules``: probed without importing anything), and what
``botd check`` and ``botd doctor`` ask about the host (``probe``: the ``exec`` tool's bubblewrap).

botd's own tools declare their specs in their packages (``botd.agent.tools.<name>.spec``,
``SPEC``); a separate distribution adds a tool under the entry-point group ``botd.tools``
(``botd.config.tools``)::

    [project.entry-points."botd.tools"]
    shell = "botd_shell:SPEC"

A spec module imports no tool: its factory imports the tool's module when it is first called,
so listing the tools (``botd check``) loads none of them, and a tool with heavy imports
(``web_fetch``: httpx) costs nothing unless ``agent.tools`` lists it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel

from ...config.extras import installed
from ...config.tools import tool_registrations

if TYPE_CHECKING:
    from ...config import BotdConfig
    from ...media.sandbox import Sandbox
    from ...memory import MemoryHere
    from ...skills import SkillsHere
    from .base import SendFunction, Tool
    from .message.tool import ButtonSendFunction, MediaSendFunction, Refusal
    from .schedule.tool import Reminders

__all__ = ["ToolDeps", "ToolSpec", "host_problems", "load_tool_specs", "tool_specs"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class ToolDeps:
    """What a tool's factory may use: the config in force when the run starts, the tool's own
    section of it, and the parts of the runtime tools reach."""

    config: BotdConfig
    section: BaseModel | None
    """The tool's section (``ToolSpec.section``) of ``config``; None when it has none."""
    send: SendFunction
    """Posts text to a target through delivery."""
    send_media: MediaSendFunction
    """Posts text with files."""
    send_buttons: ButtonSendFunction
    """Posts text (and files) with buttons under it."""
    refusal: Refusal
    """Why the run may not post to a target (the operator's message-target policy)."""
    reminders: Reminders
    """The scheduler, as a tool setting reminders sees it."""
    sandbox: Sandbox
    """The reading workers (pages and files are parsed there, never in the event loop)."""
    memory: MemoryHere | None = None
    """The memory the run's message reaches (``botd.memory``; None: none, a scheduled job's
    run)."""
    skills: SkillsHere | None = None
    """The skills the run's chat is offered (``botd.skills``; None: none)."""


@dataclass(frozen=True, eq=False)
class ToolSpec:
    """One tool: its name, config section, factory, approval default and requirement."""

    name: str
    factory: Callable[[ToolDeps], Tool]
    """Builds the tool for one run; imports the tool's module only when called."""
    section: str | None = None
    """The dotted key of the tool's settings in the config (``agent.web_fetch``); None: it
    has none."""
    needs_approval: bool = False
    """Every call waits for a person's approval (``agent.approvals``), listed there or not."""
    requirement: str | None = None
    """What provides the modules the tool needs, as pip takes it: ``botd[web]``."""
    modules: tuple[str, ...] = ()
    """Top-level modules the tool needs, probed without importing them."""
    probe: Callable[[BotdConfig], str | None] | None = None
    """What keeps the tool from working on this host under ``config`` (one sentence; None:
    nothing), beyond its modules: a program or a kernel feature. ``botd check`` and ``botd
    doctor`` ask it for a listed tool; it may block for a moment."""

    def missing(self) -> str | None:
        """One sentence naming what to install before this tool can run; None if ready."""
        absent = [name for name in self.modules if not installed(name)]
        if not absent:
            return None
        install = self.requirement or absent[0]
        return (
            f"the {self.name} tool needs {install} ({', '.join(absent)} not installed): "
            f"pip install '{install}'"
        )

    def settings(self, config: BotdConfig) -> BaseModel | None:
        """The tool's section of ``config`` (None when it has none)."""
        if self.section is None:
            return None
        found: object = config
        for key in self.section.split("."):
            found = getattr(found, key)
        if not isinstance(found, BaseModel):
            raise TypeError(f"the {self.name} tool's section {self.section} is not a section")
        return found


def load_tool_specs() -> dict[str, ToolSpec]:
    """Every registered tool (botd's own, then the plugins'), by name.

    A plugin that fails to load is logged and left out: the config check reports it for a
    config that lists it.
    """
    specs: dict[str, ToolSpec] = {}
    for point in tool_registrations():
        try:
            spec = point.load()
        except Exception:
            log.exception("tool plugin %s (%s) cannot be loaded", point.name, point.value)
            continue
        if not isinstance(spec, ToolSpec) or spec.name != point.name:
            log.error("tool plugin %s: %s is not its ToolSpec", point.name, point.value)
            continue
        specs[point.name] = spec
    return specs


@functools.cache
def tool_specs() -> Mapping[str, ToolSpec]:
    """``load_tool_specs()``, read once per process."""
    return load_tool_specs()


def host_problems(config: BotdConfig) -> dict[str, str | None]:
    """For each tool ``agent.tools`` lists that has a ``probe``: what keeps it from working
    on this host (None: nothing), by name. Runs the probes, one after the other."""
    specs = tool_specs()
    return {
        name: spec.probe(config)
        for name in config.agent.tools
        if (spec := specs.get(name)) is not None and spec.probe is not None
    }
