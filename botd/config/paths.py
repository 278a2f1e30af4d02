"""Where the directories a config names really are, and which of them must not be sent from.

``configured_path`` is the one rule for where a path a config file names is: ``~`` is the home
directory, and a relative path is taken from the directory that holds the config file (the
working directory only for a config without a file: the built-in default). The loader applies
it to ``state_dir`` and ``media.outbound_dir``, so ``botd run``, ``check``, ``doctor`` and
``pairing`` all read the same directories wherever they are started from. ``resolved`` is that
path with its symlinks resolved; every comparison between configured paths goes through it.

``outbound_dir_problem`` is ``botd check``'s rule for ``media.outbound_dir``: every file
beneath it can be sent to a chat by the agent, so it must not be, nor hold, a place with
botd's own secrets or the system's:

* ``/`` and the home directory of the user botd runs as (``~/.ssh``, tokens of other tools);
* the state dir (the database holds every conversation) and the config file (its secrets);
* ``/proc`` (``/proc/self/environ`` holds botd's environment, tokens included), ``/sys`` and
  ``/dev``, nor anything inside them;
* ``/etc``, ``/run`` (systemd credentials, container secrets) and ``/root``; a directory
  inside them is allowed (``/run/botd/out`` from systemd's ``RuntimeDirectory``), except
  inside ``/run/credentials`` (systemd's ``LoadCredential=``) and ``/run/secrets`` (container
  secrets), which hold nothing else.
"""

from __future__ import annotations

import contextlib
import os
import pwd
from pathlib import Path

__all__ = ["configured_path", "outbound_dir_problem", "resolved"]

_KERNEL_DIRS = (Path("/proc"), Path("/sys"), Path("/dev"))
"""Nothing inside these is a file to send."""
_SECRET_DIRS = (Path("/run/credentials"), Path("/run/secrets"))
"""Secrets handed to services: nothing inside these is a file to send either."""
_SYSTEM_DIRS = (Path("/etc"), Path("/run"), Path("/root"))
"""These and what holds them are refused; a directory of botd's own inside is not."""
_ADVICE = "point it at a directory that holds only files meant to be sent"


def configured_path(path: Path, config_file: Path | None = None) -> Path:
    """Where ``path``, as ``config_file`` names it, is: ``~`` expanded, a relative path taken
    from the config file's directory (as named, its links not followed) or, without a file,
    from the working directory."""
    path = path.expanduser()
    if path.is_absolute():
        return path
    base = config_file.absolute().parent if config_file is not None else Path.cwd()
    return base / path


def resolved(path: Path, config_file: Path | None = None) -> Path:
    """``path`` as botd uses it (``configured_path``), links resolved (those that exist)."""
    return configured_path(path, config_file).resolve()


def _homes() -> list[Path]:
    """The home directory of the user botd runs as: ``$HOME`` and the password database's."""
    homes = []
    with contextlib.suppress(RuntimeError):  # no $HOME and no entry in the database
        homes.append(Path.home())
    with contextlib.suppress(KeyError):
        homes.append(Path(pwd.getpwuid(os.geteuid()).pw_dir))
    return [resolved(home) for home in homes if home.is_absolute()]


def outbound_dir_problem(
    outbound_dir: Path, *, state_dir: Path, config_file: Path | None
) -> str | None:
    """Why ``outbound_dir`` must not be where uploads come from (None: it may be)."""
    out = resolved(outbound_dir)

    def holds(path: Path) -> bool:
        return resolved(path).is_relative_to(out)

    if out == Path("/"):
        return f"is /, so the agent could send any file botd can read; {_ADVICE}"
    for home in _homes():
        if holds(home):
            what = "is" if home == out else f"holds {home},"
            return f"{what} the home directory of the user botd runs as; {_ADVICE}"
    if holds(state_dir):
        return f"holds the state dir ({resolved(state_dir)}), botd's database; {_ADVICE}"
    if config_file is not None and holds(config_file):
        return f"holds the config file ({resolved(config_file)}) with its secrets; {_ADVICE}"
    for system in (*_KERNEL_DIRS, *_SYSTEM_DIRS):
        if holds(system):
            return f"{'is' if out == resolved(system) else 'holds'} {system}; {_ADVICE}"
    for system in (*_KERNEL_DIRS, *_SECRET_DIRS):
        if out.is_relative_to(resolved(system)):
            return f"lies inside {system}; {_ADVICE}"
    return None
