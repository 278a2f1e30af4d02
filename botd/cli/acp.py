"""``botd acp``: botd as an editor's ACP agent on stdio (what an editor starts, e.g. Zed's
``agent_servers`` entry).

It connects to the ACP socket of the daemon running on the config's state dir
(``channels.acp``, ``botd.acp_socket``) and copies bytes both ways: stdin to the socket, the
socket to stdout. So an editor and the daemon's chats share one daemon, its sessions and its
store. With no daemon serving there, it runs the daemon itself, in this process, on the
config's state dir (the state dir's lock: one daemon per state dir), and bridges to its own
socket the same way; another ``botd acp`` started meanwhile bridges to it too. Its end of
input (the editor closed the pipe) stops it.

stdout carries only the protocol's frames: the daemon's log goes to stderr, and a config
that enables a channel writing to the terminal (the console) is refused when ``botd acp``
runs the daemon itself. Without ``--config`` it runs the embedded default with the ACP
channel instead of the console (state in ``./var``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..acp_socket import acp_socket

if TYPE_CHECKING:
    from ..app import App
    from ..config import BotdConfig

__all__ = ["acp_command"]

CHANNEL = "acp"
_CHUNK = 64 * 1024
_STARTING_POLL = 0.05
"""Seconds between looks at the socket while the daemon of ``botd acp`` starts."""


def socket_of(config: BotdConfig) -> Path:
    """Where the daemon of ``config`` serves ACP."""
    section = config.channels.section(CHANNEL)
    return acp_socket(Path(config.state_dir), getattr(section, "socket", None))


async def _connect(path: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    try:
        return await asyncio.open_unix_connection(str(path), limit=_CHUNK * 16)
    except (FileNotFoundError, ConnectionRefusedError):
        return None


async def _copy(reader: asyncio.StreamReader, write: Callable[[bytes], None]) -> None:
    while chunk := await reader.read(_CHUNK):
        write(chunk)


async def _bridge(socket: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
    """Copy stdin to the socket and the socket to stdout until the daemon's side ends (it
    ends once the editor closed stdin and every answer came, or when the daemon stops)."""
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader(limit=_CHUNK * 16)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    out = sys.stdout.buffer
    from_daemon, to_daemon = socket

    def to_stdout(chunk: bytes) -> None:
        out.write(chunk)
        out.flush()

    async def editor_to_daemon() -> None:
        await _copy(stdin, to_daemon.write)
        with contextlib.suppress(OSError):
            to_daemon.write_eof()  # the daemon sees the editor go; its answers still come

    upstream = asyncio.create_task(editor_to_daemon())
    try:
        await _copy(from_daemon, to_stdout)
    finally:
        upstream.cancel()
        await asyncio.gather(upstream, return_exceptions=True)
        to_daemon.close()


def _refusal(config: BotdConfig) -> str | None:
    """Why ``botd acp`` cannot run ``config``'s daemon itself (None: it can)."""
    from ..channels.registry import platform_specs

    enabled = config.channels.enabled()
    if CHANNEL not in enabled:
        return (
            f"no daemon serves ACP on {socket_of(config)}, and the config does not enable "
            "channels.acp: enable it (and restart the daemon running on this state dir, if any)"
        )
    specs = platform_specs(config.channels)
    local = [name for name in enabled if name in specs and specs[name].local]
    if local:
        return (
            f"channels.{local[0]} writes to this terminal, and stdout carries ACP alone: "
            f"disable it in the config botd acp runs"
        )
    return None


async def _own_daemon(daemon: App, path: Path) -> int:
    """Run ``daemon`` and bridge to its socket once it serves; stop it when the editor goes."""
    running = asyncio.create_task(daemon.run())
    try:
        socket = None
        while socket is None and not running.done():
            socket = await _connect(path)
            if socket is None:
                await asyncio.wait({running}, timeout=_STARTING_POLL)
        if socket is not None:
            await _bridge(socket)
    finally:
        if not running.done():
            daemon.request_stop()
    return await running


def acp_command(
    config: BotdConfig, config_path: Path | None, debug: bool, say: Callable[[str], None]
) -> int:
    """``botd acp`` with ``config`` (see the module docstring); its exit status."""
    from ..app import App

    path = socket_of(config)

    async def main() -> int:
        socket = await _connect(path)
        if socket is not None:
            await _bridge(socket)
            return 0
        refusal = _refusal(config)
        if refusal is not None:
            say(f"botd acp: {refusal}")
            return 2
        return await _own_daemon(App(config, config_path=config_path, debug=debug), path)

    return asyncio.run(main())
