"""What every doctor check shares: the report line, and one HTTP request with its failures.

A check has a name (what was checked, e.g. ``telegram.token``, ``health.port``), a status
(``ok``; ``warn``: it works, but likely not as meant; ``fail``: it does not work) and its
words: what was found and, unless it passed, what to do.

A probe asks with ``request`` and gets an ``Answer`` (status and JSON body, whatever the
status) or ``Unreachable`` (no HTTP answer at all: refused, reset, timed out, no such host),
so each probe can say what a status means for its service.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from ..logging import mask_secrets

__all__ = [
    "ASCII_MARKS",
    "MARKS",
    "PROBE_TIMEOUT",
    "Answer",
    "Check",
    "Status",
    "Unreachable",
    "failed",
    "passed",
    "reason",
    "request",
    "unreachable",
    "warned",
]

PROBE_TIMEOUT = 10.0
"""Seconds each request may take (connect, send, wait for the answer) before it counts as down."""


Status = Literal["ok", "warn", "fail"]
MARKS: dict[Status, str] = {"ok": "✓", "warn": "⚠", "fail": "✗"}
ASCII_MARKS: dict[Status, str] = {"ok": "+", "warn": "!", "fail": "x"}
"""The marks where the output cannot encode the others."""


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, how it went, and what to do if not well."""

    name: str
    status: Status
    what: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        """Whether it works (a warning does)."""
        return self.status != "fail"

    def detail(self) -> str:
        """What was found, and what to do unless it passed; secrets masked."""
        text = self.what
        if self.status != "ok" and self.fix:
            text += f": {self.fix}"
        return mask_secrets(text)

    def line(self, marks: dict[Status, str] = MARKS) -> str:
        return f"{marks[self.status]} {self.detail()}"


def passed(name: str, what: str) -> Check:
    return Check(name, "ok", what)


def warned(name: str, what: str, fix: str) -> Check:
    return Check(name, "warn", what, fix)


def failed(name: str, what: str, fix: str) -> Check:
    return Check(name, "fail", what, fix)


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
    except httpx.ProxyError as exc:  # a tunnel refused, a SOCKS5 login failed
        raise Unreachable(f"through the proxy: {reason(exc)}") from None
    except httpx.HTTPError as exc:
        raise Unreachable(reason(exc)) from None
    if response.status_code == 407:  # a proxy forwarding plain HTTP answers for the server
        raise Unreachable("the proxy refused the credentials: 407 Proxy Authentication Required")
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


def unreachable(name: str, label: str, base: str, why: object, key: str) -> Check:
    """``name``'s check failed for want of an answer from ``base``; ``label`` starts the line."""
    return failed(
        name,
        f"{label}: cannot reach {base} ({why})",
        f"check the network (proxy, firewall, DNS) and {key}",
    )
