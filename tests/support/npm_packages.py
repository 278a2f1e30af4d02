"""npm packages the tests run (an ACP agent botd drives), installed once into a cache.

Each set is a directory of ``tests/support/npm/`` holding a ``package.json`` with exact
versions and its ``package-lock.json``. ``installed(name)`` runs ``npm ci`` for it into
``<cache>/<name>-<hash of the lock>`` unless that is there already, and returns the
directory (its ``node_modules`` beside the two files); a lock that changes gets a directory
of its own. The cache is ``$BOTD_TEST_NPM_CACHE``, else ``~/.cache/botd-tests/npm``. A lock
file beside each directory keeps two test workers from installing the same set at once.

``.ci/run`` installs every set before the tests (``python3 -m tests.support.npm_packages``),
so the tests themselves find them in place; this module uses the standard library only.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

SETS = Path(__file__).resolve().parent / "npm"
INSTALL_GUARD = 600.0
"""Seconds an ``npm ci`` may take (a first download of a large package)."""


class NpmMissing(RuntimeError):
    """Node.js or npm is not installed."""


def cache_root() -> Path:
    configured = os.environ.get("BOTD_TEST_NPM_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "botd-tests" / "npm"


def installed(name: str) -> Path:
    """The directory where the set ``name`` is installed (see the module docstring)."""
    source = SETS / name
    lock = (source / "package-lock.json").read_bytes()
    manifest = (source / "package.json").read_bytes()
    digest = hashlib.sha256(manifest + lock).hexdigest()[:16]
    root = cache_root()
    target = root / f"{name}-{digest}"
    done = target / ".installed"
    if done.exists():
        return target
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise NpmMissing("node and npm are needed (Debian: apt-get install nodejs npm)")
    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{name}.lock").open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if done.exists():  # another worker installed it meanwhile
            return target
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir()
        shutil.copy(source / "package.json", target / "package.json")
        shutil.copy(source / "package-lock.json", target / "package-lock.json")
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=target,
            check=True,
            timeout=INSTALL_GUARD,
            stdout=subprocess.DEVNULL,
        )
        done.touch()
    return target


def main() -> int:
    for source in sorted(SETS.iterdir()):
        if (source / "package-lock.json").exists():
            print(f"npm set {source.name}: {installed(source.name)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
