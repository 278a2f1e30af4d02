"""The ACP client the tests drive ``botd acp`` with: the TypeScript SDK's client app from the
npm registry, at the version ``package-lock.json`` pins, installed once into a cache directory
(``npm ci``) and shared by every test and worker. Without Node.js or the registry the tests
skip with the reason, except under CI (``CI`` set), where they fail: ``.ci/run`` installs
Node.js and npm on a fresh machine.

``editors`` opens what every test starts with (``editors.py``): the config, the daemon when
one runs before the editor, a client connected and initialized, a session; ``model`` is the
loopback Anthropic API they answer with."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.channels.acp.editors import Editors
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.support.daemon_inprocess import ANTHROPIC_KEY

HERE = Path(__file__).resolve().parent
CLIENT = HERE / "client.mjs"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"the ACP test client cannot be installed: {reason}")
    pytest.skip(f"the ACP test client cannot be installed: {reason}")


@pytest.fixture(scope="session")
def acp_client() -> Path:
    """The client script, beside the ``node_modules`` it imports (in the cache directory)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _unavailable("node and npm are not on PATH (apt-get install nodejs npm)")
    lock = (HERE / "package-lock.json").read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    home = cache / "botd-tests" / f"acp-client-{hashlib.sha256(lock).hexdigest()[:12]}"
    home.mkdir(parents=True, exist_ok=True)
    with (home / ".lock").open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # one worker installs, the others wait for it
        if not (home / "node_modules" / "@agentclientprotocol" / "sdk").is_dir():
            for name in ("package.json", "package-lock.json"):
                shutil.copyfile(HERE / name, home / name)
            try:
                done = subprocess.run(
                    [str(npm), "ci", "--no-audit", "--no-fund"],
                    cwd=home,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
            except subprocess.TimeoutExpired:
                _unavailable("npm ci took over 300 s")
            if done.returncode != 0:
                _unavailable(f"npm ci failed: {done.stderr.strip()[-500:]}")
        shutil.copyfile(CLIENT, home / CLIENT.name)
    return home / CLIENT.name


@pytest.fixture
async def model() -> AsyncIterator[FakeAnthropicAPI]:
    async with FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as api:
        yield api


@pytest.fixture
async def editors(
    acp_client: Path, tmp_path: Path, model: FakeAnthropicAPI
) -> AsyncIterator[Editors]:
    opened = Editors(acp_client, tmp_path, model)
    try:
        yield opened
    finally:
        await opened.aclose()
