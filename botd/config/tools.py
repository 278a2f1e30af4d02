"""The tools ``agent.tools`` may list: where each is registered, and what the config needs of it.

``tool_registrations`` finds them, as ``botd.config.channels`` finds the channels. botd's own
tools are the packages under ``botd.agent.tools`` that have a ``spec`` module (its ``SPEC``,
named by the package), found by looking at the files, so finding them imports none of the
agent runtime; a tool from another distribution registers its spec under the entry-point
group ``botd.tools``; an entry point named like one of botd's own tools is not loaded.

The config needs only each tool's name (``agent.tools`` and ``agent.approvals.tools`` are
checked against them) and whether what the tool needs is installed (``missing``). It loads
the specs itself (``registered_tools``) and so never imports the runtime: a spec imports its
tool only when the daemon builds one. A plugin that fails to load still counts as a name, so a
config that lists it is told why it cannot run instead of hearing of an unknown tool.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "BUILTIN_TOOLS_PACKAGE",
    "TOOLS_ENTRY_POINT_GROUP",
    "ToolEntry",
    "ToolRegistration",
    "registered_tools",
    "tool_registrations",
]

log = logging.getLogger(__name__)

TOOLS_ENTRY_POINT_GROUP = "botd.tools"
"""Where another distribution registers a tool's spec."""
BUILTIN_TOOLS_PACKAGE = "botd.agent.tools"
"""botd's own tools: each package in it with a ``spec`` module (its ``SPEC``)."""


@dataclass(frozen=True, slots=True)
class ToolRegistration:
    """One tool, before its spec is loaded: its name, where the spec is, and how to load it."""

    name: str
    value: str
    """Where the spec is, as an entry point spells it (``module:attribute``)."""
    builtin: bool
    load: Callable[[], Any]
    """Imports the module and returns the spec (whatever is there: the caller checks it)."""


def _attribute(module: str, name: str) -> Callable[[], Any]:
    def load() -> Any:
        return getattr(importlib.import_module(module), name)

    return load


def _builtins() -> list[ToolRegistration]:
    # find_spec imports the parents (botd.agent), not the package itself: its subpackages are
    # listed from the files, so that nothing of the runtime is loaded to learn the names.
    package = importlib.util.find_spec(BUILTIN_TOOLS_PACKAGE)
    if package is None or not package.submodule_search_locations:
        return []
    found = []
    for location in package.submodule_search_locations:
        for info in pkgutil.iter_modules([location]):
            if info.ispkg and (Path(location) / info.name / "spec.py").is_file():
                module = f"{BUILTIN_TOOLS_PACKAGE}.{info.name}.spec"
                load = _attribute(module, "SPEC")
                found.append(ToolRegistration(info.name, f"{module}:SPEC", True, load))
    return sorted(found, key=lambda registration: registration.name)


@functools.cache
def tool_registrations() -> tuple[ToolRegistration, ...]:
    """botd's own tools (by name), then the entry points' (see the module docstring); read
    once."""
    found = _builtins()
    own = {registration.name for registration in found}
    for point in entry_points(group=TOOLS_ENTRY_POINT_GROUP):
        if point.name in own:
            log.warning(
                "tool plugin %s (%s) is not loaded: %s is one of botd's own tools",
                point.name,
                point.value,
                point.name,
            )
            continue
        found.append(ToolRegistration(point.name, point.value, False, point.load))
    return tuple(found)


class ToolEntry(Protocol):
    """A registered tool as the config sees it (``botd.agent.tools.registry.ToolSpec`` is
    one)."""

    def missing(self) -> str | None:
        """What to install before the tool can run (None: ready); imports nothing."""
        ...


class _Broken:
    """A registered tool whose plugin could not be loaded."""

    def __init__(self, name: str, reason: str) -> None:
        self._why = f"the {name} tool's plugin cannot be loaded: {reason}"

    def missing(self) -> str | None:
        return self._why


@functools.cache
def registered_tools() -> Mapping[str, ToolEntry]:
    """Every registered tool (``tool_registrations``), by name (read once)."""
    found: dict[str, ToolEntry] = {}
    for point in tool_registrations():
        try:
            entry = point.load()
        except Exception as exc:
            found[point.name] = _Broken(point.name, f"{type(exc).__name__}: {exc}")
            continue
        if not callable(getattr(entry, "missing", None)):
            found[point.name] = _Broken(point.name, f"{point.value} is not a tool spec")
            continue
        found[point.name] = entry
    return found
