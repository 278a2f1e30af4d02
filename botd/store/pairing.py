"""DM pairing's storage: one-time codes for unknown senders and the senders an admin approved.

The rules are the same on every backend (``PAIRING_TTL_SECONDS``, ``MAX_PENDING_PER_CHANNEL``,
codes from ``PAIRING_ALPHABET``); the SQLite backend keeps them in ``pairing.json`` in the state
directory (``PairingFile``), where ``botd pairing`` and the daemon both read it; the PostgreSQL
backend keeps them in the database (``botd.store.postgres.pairing``). Both implement
``store.protocols.Pairing``.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable, Container
from pathlib import Path

from .records import PendingCode, Welcome

log = logging.getLogger(__name__)

PAIRING_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
PAIRING_TTL_SECONDS = 3600.0
MAX_PENDING_PER_CHANNEL = 3
"""How many pairing codes may wait per channel; a new one expires the oldest beyond that."""
HELD_AT_MOST = 3
"""How many messages of a sender waiting for approval are kept, to be answered once approved
(the first ones: later ones are dropped, logged); they go with the code when it expires."""


def new_code(taken: Container[str]) -> str:
    """A fresh pairing code: eight characters no one mistakes for others, not in ``taken``."""
    while True:
        code = "".join(secrets.choice(PAIRING_ALPHABET) for _ in range(8))
        if code not in taken:
            return code


class PairingFileError(ValueError):
    """``pairing.json`` exists but cannot be read; the message says which file and why."""


class PairingFile:
    """``Pairing`` in ``pairing.json``: one-time codes for unknown DM senders, and the senders
    an admin approved.

    Both live in a small JSON file in the state directory, so approvals survive restarts
    and ``botd pairing approve`` (another process) can approve a code while the daemon
    runs: the daemon reads the file again whenever it changed. A pending code is stored as
    ``[channel, sender, issued_at, name]``; files written before names were kept have no
    name and still load.

    A flood of strangers cannot pile up codes: at most ``MAX_PENDING_PER_CHANNEL`` wait per
    channel, and a new one expires the oldest of them first (it can no longer be approved).

    A pending code keeps the first ``HELD_AT_MOST`` messages its sender wrote while waiting
    (``hold``); approving it turns them into a welcome (``welcomes``), kept in the file until
    the daemon told the sender and took the messages (``welcomed``): an approval by ``botd
    pairing approve`` while the daemon is down is welcomed at its next start.
    """

    def __init__(self, path: Path | None, clock: Callable[[], float] = time.time) -> None:
        self._path = path
        self._clock = clock
        self._pending: dict[str, PendingCode] = {}
        self._approved: set[tuple[str, str]] = set()
        self._names: dict[tuple[str, str], str] = {}
        """Display names of approved senders, where known."""
        self._held: dict[str, list[str]] = {}
        """The messages kept with each pending code (``inbound_json``), oldest first."""
        self._welcomes: dict[tuple[str, str], list[str]] = {}
        """Approved senders not told yet, with their held messages."""
        self._loaded_mtime: float | None = None
        self._reload()

    def is_approved(self, channel: str, sender: str) -> bool:
        self._reload()
        return (channel, sender) in self._approved

    async def refresh(self) -> None:
        """Nothing to do: every read looks at the file's timestamp first."""

    async def pending(self) -> list[tuple[str, str, str]]:
        """``(code, channel, sender)`` of every code still waiting for approval."""
        return [(p.code, p.channel, p.sender) for p in await self.waiting()]

    async def waiting(self) -> list[PendingCode]:
        """Every code still waiting for approval, by code."""
        self._reload()
        self._expire()
        return [self._pending[code] for code in sorted(self._pending)]

    async def approved(self) -> list[tuple[str, str, str | None]]:
        """``(channel, sender, name)`` of every approved sender."""
        self._reload()
        return [(ch, who, self._names.get((ch, who))) for ch, who in sorted(self._approved)]

    async def channels(self) -> set[str]:
        """The channels that have a pending code or an approved sender."""
        self._reload()
        return {p.channel for p in self._pending.values()} | {ch for ch, _ in self._approved}

    async def request(self, channel: str, sender: str, name: str | None = None) -> str:
        """The sender's pending code (a new one when none is pending)."""
        return (await self.issue(channel, sender, name))[0]

    async def issue(self, channel: str, sender: str, name: str | None = None) -> tuple[str, bool]:
        """The sender's pending code, and whether it was issued just now.

        ``name`` is the sender's display name, kept for ``botd pairing list``. A new code
        expires the channel's oldest pending ones so that at most ``MAX_PENDING_PER_CHANNEL``
        wait; each expiry is logged.
        """
        self._reload()
        self._expire()
        for code, entry in self._pending.items():
            if (entry.channel, entry.sender) == (channel, sender):
                return code, False
        # Oldest first: by the time issued, ties in the order issued (the dict's order).
        waiting = [(e.issued_at, code) for code, e in self._pending.items() if e.channel == channel]
        waiting.sort(key=lambda pair: pair[0])
        while len(waiting) >= MAX_PENDING_PER_CHANNEL:
            _when, oldest = waiting.pop(0)
            who = self._pending.pop(oldest).sender
            self._held.pop(oldest, None)
            log.warning(
                "pairing: the code of %s on %s expired early: %d codes were waiting there",
                who,
                channel,
                MAX_PENDING_PER_CHANNEL,
            )
        code = self._new_code()
        self._pending[code] = PendingCode(code, channel, sender, name or None, self._clock())
        self._save()
        return code, True

    def _new_code(self) -> str:
        return new_code(self._pending)

    async def approve(self, channel: str, code: str) -> str | None:
        """Approve a pending code; returns the sender it admits, or None."""
        self._reload()
        self._expire()
        key = code.strip().upper()
        entry = self._pending.get(key)
        if entry is None or entry.channel != channel:
            return None
        del self._pending[key]
        self._approved.add((channel, entry.sender))
        self._welcomes[(channel, entry.sender)] = self._held.pop(key, [])
        if entry.name:
            self._names[(channel, entry.sender)] = entry.name
        self._save()
        return entry.sender

    async def hold(self, channel: str, sender: str, message: str) -> bool:
        self._reload()
        self._expire()
        for code, entry in self._pending.items():
            if (entry.channel, entry.sender) == (channel, sender):
                held = self._held.setdefault(code, [])
                if len(held) >= HELD_AT_MOST:
                    return False
                held.append(message)
                self._save()
                return True
        return False

    async def welcomes(self) -> list[Welcome]:
        self._reload()
        return [Welcome(ch, who, tuple(held)) for (ch, who), held in self._welcomes.items()]

    async def welcomed(self, channel: str, sender: str) -> None:
        self._reload()
        if self._welcomes.pop((channel, sender), None) is not None:
            self._save()

    async def revoke(self, channel: str, sender: str) -> bool:
        """Take back a sender's approval; False when they were not approved."""
        self._reload()
        if (channel, sender) not in self._approved:
            return False
        self._approved.discard((channel, sender))
        self._names.pop((channel, sender), None)
        self._welcomes.pop((channel, sender), None)  # taken back before they were told
        self._save()
        return True

    def forget(self, channel: str, sender: str) -> int:
        """Remove everything the file keeps of ``sender`` on ``channel`` (their waiting code
        and the messages held with it, their approval, name and welcome); how many entries
        (``botd.store.forgetting``)."""
        self._reload()
        codes = [c for c, e in self._pending.items() if (e.channel, e.sender) == (channel, sender)]
        for code in codes:
            del self._pending[code]
            self._held.pop(code, None)
        who = (channel, sender)
        count = len(codes) + (who in self._approved) + (self._welcomes.pop(who, None) is not None)
        self._approved.discard(who)
        self._names.pop(who, None)
        if count:
            self._save()
        return count

    def _expire(self) -> None:
        now = self._clock()
        for code, entry in list(self._pending.items()):
            if now - entry.issued_at > PAIRING_TTL_SECONDS:
                del self._pending[code]
                self._held.pop(code, None)

    def _reload(self) -> None:
        path = self._path
        if path is None or not path.exists():
            return
        try:
            mtime = path.stat().st_mtime
            if mtime == self._loaded_mtime:
                return
            data = json.loads(path.read_text(encoding="utf-8"))
            approved = {(str(c), str(s)) for c, s in data.get("approved", [])}
            names = {(str(c), str(s)): str(n) for c, s, n in data.get("approved_names", [])}
            pending = {
                str(code): PendingCode(
                    str(code),
                    str(entry[0]),
                    str(entry[1]),
                    str(entry[3]) if len(entry) > 3 and entry[3] else None,
                    float(entry[2]),
                )
                for code, entry in data.get("pending", {}).items()
            }
            held = {
                str(code): [str(m) for m in kept] for code, kept in data.get("held", {}).items()
            }
            welcomes = {
                (str(c), str(s)): [str(m) for m in kept] for c, s, kept in data.get("welcomes", [])
            }
        except (OSError, ValueError, TypeError, IndexError, AttributeError) as exc:
            # A damaged file (edited by hand, a full disk): whoever asks is refused, and the
            # file is left as it is for the admin to fix.
            raise PairingFileError(
                f"{path} cannot be read ({type(exc).__name__}: {exc}); fix or remove it"
            ) from None
        self._approved, self._names, self._pending = approved, names, pending
        self._held = {code: kept for code, kept in held.items() if code in pending}
        self._welcomes = welcomes
        self._loaded_mtime = mtime

    def _save(self) -> None:
        if self._path is None:
            return
        self._path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "approved": sorted([list(pair) for pair in self._approved]),
            "approved_names": sorted([[c, s, n] for (c, s), n in self._names.items()]),
            "pending": {
                code: [e.channel, e.sender, e.issued_at, e.name]
                for code, e in self._pending.items()
            },
            "held": {code: kept for code, kept in self._held.items() if code in self._pending},
            "welcomes": [[c, s, kept] for (c, s), kept in sorted(self._welcomes.items())],
        }
        temporary = self._path.with_suffix(".tmp")
        temporary.write_text(json.dumps(data), encoding="utf-8")
        temporary.replace(self._path)  # atomic: the daemon never reads half a file
        self._loaded_mtime = self._path.stat().st_mtime
