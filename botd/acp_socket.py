"""Where a daemon serves ACP: the one spelling of the ACP channel's socket path, which the
channel (``channels.acp``) binds and ``botd acp`` connects to."""

from __future__ import annotations

from pathlib import Path

__all__ = ["SOCKET_NAME", "acp_socket"]

SOCKET_NAME = "acp.sock"
"""The socket's file name in the state dir, unless ``channels.acp.socket`` names a path."""


def acp_socket(state_dir: Path, configured: str | None = None) -> Path:
    """The socket's path: ``configured`` (``~`` expanded) or ``<state_dir>/acp.sock``."""
    if configured:
        return Path(configured).expanduser()
    return state_dir / SOCKET_NAME
