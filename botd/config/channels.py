"""The channels a config may name: where each is registered, and what the config needs of it.

``registrations`` finds them. botd's own channels are the packages under ``botd.channels``
that have a ``spec`` module (its ``SPEC``, named by the package): found where the code is,
so they need no package metadata, and an install whose metadata is older than the code
(an editable install, a checkout on ``PYTHONPATH``) still has them. A channel from another
distribution registers its spec under the entry-point group ``botd.channels``; an entry
point named like one of botd's own channels is not loaded (a plugin does not replace a
built-in; botd's own entries in an older install's metadata are left alone quietly).

The config needs only each one's section model, to validate ``channels.<name>`` (the section
named after the channel, or any section whose ``platform`` key names it), and
whether its platform SDK is installed; it loads the specs itself (``registered_channels``)
and so never imports the runtime. A plugin that fails to load still counts as a name, so a
config that uses it is told why it cannot run instead of hearing of an unknown channel.
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
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

__all__ = [
    "BUILTIN_PACKAGE",
    "ENTRY_POINT_GROUP",
    "ChannelEntry",
    "Registration",
    "registered_channels",
    "registrations",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "botd.channels"
"""Where another distribution registers a channel's spec."""
BUILTIN_PACKAGE = "botd.channels"
"""botd's own channels: each package in it with a ``spec`` module (its ``SPEC``)."""


@dataclass(frozen=True, slots=True)
class Registration:
    """One channel, before its spec is loaded: its name, where the spec is, and how to load it."""

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


def _builtins() -> list[Registration]:
    package = importlib.util.find_spec(BUILTIN_PACKAGE)
    if package is None or not package.submodule_search_locations:
        return []
    found = []
    for info in pkgutil.iter_modules(package.submodule_search_locations):
        module = f"{BUILTIN_PACKAGE}.{info.name}.spec"
        if info.ispkg and importlib.util.find_spec(module) is not None:
            found.append(
                Registration(info.name, f"{module}:SPEC", True, _attribute(module, "SPEC"))
            )
    return sorted(found, key=lambda registration: registration.name)


@functools.cache
def registrations() -> tuple[Registration, ...]:
    """botd's own channels, then the entry points' (see the module docstring); read once."""
    found = _builtins()
    own = {registration.name for registration in found}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in own:
            # botd's own entry in metadata older than the code says nothing new; another
            # distribution's would replace a built-in, which is not done.
            stale = point.module.partition(".")[0] == BUILTIN_PACKAGE.partition(".")[0]
            log.log(
                logging.DEBUG if stale else logging.WARNING,
                "channel plugin %s (%s) is not loaded: %s is one of botd's own channels",
                point.name,
                point.value,
                point.name,
            )
            continue
        found.append(Registration(point.name, point.value, False, point.load))
    return tuple(found)


class ChannelEntry(Protocol):
    """A registered channel as the config sees it (``ChannelSpec`` is one)."""

    @property
    def section(self) -> type[BaseModel]:
        """The model of its ``channels.<name>`` section."""
        ...

    def missing(self) -> str | None:
        """What to install before the channel can run (None: ready); imports nothing."""
        ...


class _AnySection(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class _Broken:
    """A registered channel whose plugin could not be loaded."""

    section: type[BaseModel] = _AnySection

    def __init__(self, name: str, reason: str) -> None:
        self._why = f"the {name} channel's plugin cannot be loaded: {reason}"

    def missing(self) -> str | None:
        return self._why


@functools.cache
def registered_channels() -> Mapping[str, ChannelEntry]:
    """Every registered channel (``registrations``), by name (read once)."""
    found: dict[str, ChannelEntry] = {}
    for point in registrations():
        try:
            entry = point.load()
        except Exception as exc:
            found[point.name] = _Broken(point.name, f"{type(exc).__name__}: {exc}")
            continue
        section = getattr(entry, "section", None)
        if not (
            isinstance(section, type)
            and issubclass(section, BaseModel)
            and callable(getattr(entry, "missing", None))
        ):
            found[point.name] = _Broken(point.name, f"{point.value} is not a channel spec")
            continue
        found[point.name] = entry
    return found
