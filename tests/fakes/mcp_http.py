"""The fake MCP server (``mcp_server.py``) on streamable HTTP, as a test starts it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.health_probe import free_port

FAKE = str(Path(__file__).resolve().parent / "mcp_server.py")


@contextmanager
def serving_mcp_http(token: str) -> Iterator[str]:
    """The fake listening on a free port, requiring bearer ``token``; yields its URL and
    kills it after."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, FAKE, "--http", str(port), "--token", token],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        assert process.stderr.readline().strip() == "serving"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait(timeout=30)
