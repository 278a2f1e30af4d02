"""systemd's notification protocol: READY, STATUS, WATCHDOG and STOPPING on ``$NOTIFY_SOCKET``.

``SystemdNotifier`` is a no-op outside systemd, so the daemon calls it unconditionally.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Mapping

__all__ = ["SystemdNotifier"]

log = logging.getLogger(__name__)


class SystemdNotifier:
    """Sends ``sd_notify`` messages to ``$NOTIFY_SOCKET``; does nothing when it is unset.

    The environment is read once, at construction. Sending never raises: a socket that is
    gone or refuses the datagram is logged once (a warning) and later failures stay quiet.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self._address = _notify_address(env.get("NOTIFY_SOCKET", ""))
        self._watchdog_usec = env.get("WATCHDOG_USEC", "")
        self._watchdog_pid = env.get("WATCHDOG_PID", "")
        self._warned = False

    @property
    def enabled(self) -> bool:
        """Whether a notify socket is configured."""
        return self._address is not None

    def notify(self, *assignments: str) -> bool:
        """Send ``KEY=VALUE`` lines as one datagram; True when it was sent."""
        if self._address is None or not assignments:
            return False
        payload = "\n".join(assignments).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.setblocking(False)
                sock.sendto(payload, self._address)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning("systemd notify socket %r unusable: %s", self._address, exc)
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """Tell systemd start-up is complete (``Type=notify``)."""
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> bool:
        """Set the one-line status shown by ``systemctl status``."""
        return self.notify(f"STATUS={_one_line(text)}")

    def watchdog(self) -> bool:
        """Ping the service watchdog."""
        return self.notify("WATCHDOG=1")

    def stopping(self, status: str | None = None) -> bool:
        """Tell systemd an orderly shutdown has begun."""
        return self.notify("STOPPING=1", *([f"STATUS={status}"] if status else []))

    def watchdog_interval(self) -> float | None:
        """Seconds between pings: half of ``$WATCHDOG_USEC``, or None when no watchdog is set.

        Like ``sd_watchdog_enabled``, a ``$WATCHDOG_PID`` naming another process disables it.
        """
        if self._watchdog_pid and self._watchdog_pid != str(os.getpid()):
            return None
        try:
            usec = int(self._watchdog_usec)
        except ValueError:
            return None
        return usec / 2_000_000 if usec > 0 else None

    async def run_watchdog(self, stop_event: asyncio.Event) -> None:
        """Ping at ``watchdog_interval()`` until ``stop_event`` is set (waits only if none)."""
        interval = self.watchdog_interval()
        if interval is None or not self.enabled:
            await stop_event.wait()
            return
        while not stop_event.is_set():
            self.watchdog()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop_event.wait(), interval)


def _notify_address(value: str) -> str | bytes | None:
    """``$NOTIFY_SOCKET`` as a ``sendto`` address; a leading ``@`` is the abstract namespace."""
    if not value:
        return None
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    return value


def _one_line(text: str) -> str:
    return " ".join(text.split())
