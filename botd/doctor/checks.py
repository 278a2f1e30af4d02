"""What every doctor check shares: the report line, and one HTTP request with its failures.

A probe asks with ``request`` and gets an ``Answer`` (status and JSON body, whatever the
status) or ``Unreachable`` (no HTTP answer at all: refused, reset, timed out, no such host),
so each probe can say what a status means for its service.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import httpx

from ..logging import mask_secrets

__all__ = [
    "PROBE_TIMEOUT",
    "Answer",
    "Check",
    "Unreachable",
    "failed",
    "passed",
    "reason",
    "request",
    "unreachable",
]

PROBE_TIMEOUT = 10.0
"""Seconds each request may take (connect, send, wait for the answer) before it counts as down."""


@dataclass(frozen=True)
class Check:
    """One line of the report: whether it passed, what was checked, and what to do if not."""

    ok: bool
    what: str
    fix: str = ""

    def line(self, marks: tuple[str, str] = ("✓", "✗")) -> str:
        mark = marks[0] if self.ok else marks[1]
        text = f"{mark} {self.what}"
        if not self.ok and self.fix:
            text += f": {self.fix}"
        return mask_secrets(text)


def passed(what: str) -> Check:
    return Check(True, what)


def failed(what: str, fix: str) -> Check:
    return Check(False, what, fix)


class Answer:
    """An HTTP answer: its status, headers and JSON body (None when the body was not JSON)."""

    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self.headers = response.headers
        self.body: Any
        try:
            self.body = response.json()
        except ValueError:
            self.body = None

    def field(self, name: str) -> Any:
        return self.body.get(name) if isinstance(self.body, dict) else None


class Unreachable(Exception):
    """The request got no HTTP answer (refused, reset, timed out, name not resolved)."""


async def request(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
) -> Answer:
    try:
        response = await client.request(method, url, headers=headers, params=params)
    except httpx.TimeoutException:
        raise Unreachable(f"no answer within {client.timeout.read or PROBE_TIMEOUT:g} s") from None
    except httpx.HTTPError as exc:
        raise Unreachable(reason(exc)) from None
    return Answer(response)


def reason(exc: BaseException) -> str:
    """Why a connection failed, in a few words (the exception's text names no URL)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and isinstance(cause.errno, int) and cause.errno > 0:
            return os.strerror(cause.errno)
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        cause = cause.__cause__ or cause.__context__
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def unreachable(name: str, base: str, why: object, key: str) -> Check:
    return failed(
        f"{name}: cannot reach {base} ({why})",
        f"check the network (proxy, firewall, DNS) and {key}",
    )
