"""Which botd ``botd status`` asks when it is given no ``--config``: never the built-in
console config by default, but the running daemon's own.

The places looked at, in this order:

1. ``./botd.yaml`` in the current directory (what ``botd init`` writes);
2. the ``--config`` in ``ExecStart`` of the installed systemd unit ``botd.service``
   (``UNIT_DIRS``, the first that has one; a drop-in that replaces ``ExecStart`` is not read);
3. ``./var``, the state dir of a ``botd run`` without ``--config``.

The first whose state dir a botd holds now is the one asked, with the config its lock file
names (``botd.ops.statelock.Holder``: the file it runs, which may be another than the one
that led to its state dir; the built-in config when it runs none). When no botd runs on any
of them, the first config file found is used, so ``botd status`` says it is not running there
(and on PostgreSQL still reads the database); when there is none, nothing is guessed:
``NotFound`` says where it looked and how to point at the right config (``--config``).
Each way says how it was found (``Found.how``), and ``botd status`` prints it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import BotdConfig

__all__ = ["UNIT_DIRS", "Found", "NotFound", "find_config", "unit_config"]

UNIT_DIRS = (
    Path("/etc/systemd/system"),
    Path("/usr/local/lib/systemd/system"),
    Path("/usr/lib/systemd/system"),
    Path("/lib/systemd/system"),
)
"""Where systemd finds an installed ``botd.service``, the administrator's first."""
UNIT = "botd.service"
LOCAL_CONFIG = "botd.yaml"
DEFAULT_STATE_DIR = "var"


@dataclass(frozen=True, slots=True)
class Found:
    """The config ``botd status`` uses."""

    config: BotdConfig
    path: Path | None
    """Its file (None: the built-in config a ``botd run`` without ``--config`` runs)."""
    how: str
    """How it was found, for people: ``./botd.yaml in the current directory``."""


class NotFound(Exception):
    """No config and no running botd were found; the message says where it looked."""


def find_config(
    cwd: Path, env: Mapping[str, str], *, unit_dirs: Sequence[Path] = UNIT_DIRS
) -> Found:
    """The config of the botd to ask (see the module docstring). Raises ``ConfigError``
    when the config to use cannot be read, ``NotFound`` when there is none."""
    from ..config import ConfigError, default_config, load_config
    from ..ops.statelock import holder_of

    candidates: list[tuple[Path, str]] = []
    local = cwd / LOCAL_CONFIG
    if local.is_file():
        candidates.append((local, f"{LOCAL_CONFIG} in the current directory"))
    unit = unit_config(unit_dirs)
    if unit is not None:
        candidates.append((unit[0], f"the --config of {unit[1]}"))
    tried: list[Found | ConfigError] = []
    for path, how in candidates:
        try:
            config = load_config(path, unset_ok=True)
        except ConfigError as exc:
            tried.append(exc)
            continue
        tried.append(Found(config, path, how))
        holding = holder_of(Path(config.state_dir))
        if holding is not None:
            return _run_by(holding.config, path, config, f"{how}; the botd holding its state dir")
    default_state = cwd / DEFAULT_STATE_DIR
    holding = holder_of(default_state)
    if holding is not None:
        how = f"the botd holding {default_state} (the state dir of botd run without --config)"
        return _run_by(holding.config, None, default_config(env), how)
    if tried:  # none runs: the first config found says so
        if isinstance(tried[0], ConfigError):
            raise tried[0]
        return tried[0]
    raise NotFound(
        f"found no botd to ask: no {LOCAL_CONFIG} in {cwd}, no {UNIT} with --config in "
        f"{', '.join(map(str, unit_dirs))}, and no botd holds {default_state}; "
        "name its config with --config FILE"
    )


def _run_by(named: Path | None, path: Path | None, config: BotdConfig, how: str) -> Found:
    """The config the holder's lock names (the one it runs), else the one that led to it."""
    from ..config import ConfigError, load_config

    if named is None or named == (path.absolute() if path else None) or not named.is_file():
        return Found(config, path, how)
    try:
        return Found(load_config(named, unset_ok=True), named, f"{how}, which runs it")
    except (ConfigError, OSError):
        return Found(config, path, how)


def unit_config(unit_dirs: Sequence[Path] = UNIT_DIRS) -> tuple[Path, Path] | None:
    """The ``--config`` of the first ``botd.service`` in ``unit_dirs``, and the unit file;
    None when there is none, or its ``ExecStart`` names no ``--config``."""
    for directory in unit_dirs:
        unit = directory / UNIT
        try:
            text = unit.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for line in text.splitlines():
            key, _, value = line.strip().partition("=")
            if key.strip() != "ExecStart":
                continue
            try:
                words = shlex.split(value)
            except ValueError:
                return None
            for at, word in enumerate(words):
                if word == "--config" and at + 1 < len(words):
                    return Path(words[at + 1]), unit
                if word.startswith("--config="):
                    return Path(word.removeprefix("--config=")), unit
        return None  # the first unit found is the one systemd runs
    return None
