"""The channels a config may name: what the config needs of each registered channel.

Channels are registered under the entry-point group ``botd.channels`` (the four built-ins
too). The config needs only each one's section model, to validate ``channels.<name>``, and
whether its platform SDK is installed; it reads the entry points itself and so never
imports the runtime. A plugin that fails to load still counts as a name, so a config that
uses it is told why it cannot run instead of hearing of an unknown channel.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Protocol

from pydantic import BaseModel, ConfigDict

__all__ = ["ENTRY_POINT_GROUP", "ChannelEntry", "registered_channels"]

ENTRY_POINT_GROUP = "botd.channels"


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
    """Every channel registered under ``botd.channels``, by entry-point name (read once)."""
    found: dict[str, ChannelEntry] = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
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
