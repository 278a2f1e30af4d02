"""Whether an address botd is configured to serve on can be listened on, asked before it is
needed: ``botd run`` asks for ``health.port`` before it connects any channel, and ``botd
doctor`` warns.

The question is asked the way the server will bind (asyncio's ``create_server``, which the
health endpoint's aiohttp uses): every address the host name stands for, ``SO_REUSEADDR``
set (so a port left in ``TIME_WAIT`` by a botd that just stopped is free), IPv6 sockets
for IPv6 only, and an address the system cannot assign (``localhost``'s ``::1`` with IPv6
off) skipped as long as another one binds. Each socket is closed again at once; a port
taken in between is found by the server itself. ``cannot_listen`` is the one line both say
it in (here, not in ``health``, so the question is asked without importing aiohttp).
"""

from __future__ import annotations

import errno
import os
import socket

__all__ = ["cannot_listen", "health_url", "listen_problem"]

_ANY_ADDRESS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


def health_url(host: str, port: int) -> str:
    """Where ``/healthz`` of an endpoint bound to ``host``:``port`` is asked (an endpoint on
    every address is asked on loopback)."""
    host = _ANY_ADDRESS.get(host, host)
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/healthz"


def listen_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (``127.0.0.1:8480: Address already in
    use``), or None when it can."""
    try:
        addresses = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        return f"{host}: {exc.strerror}"
    unassignable: str | None = None
    bound = False
    for family, kind, proto, _, address in dict.fromkeys(addresses):
        ip = address[0] if isinstance(address[0], str) else host
        shown = f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
        except OSError as exc:
            why = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
            if exc.errno == errno.EADDRNOTAVAIL:
                unassignable = unassignable or f"{shown}: {why}"
                continue
            return f"{shown}: {why}"
        bound = True
    return None if bound else unassignable


def cannot_listen(problem: str) -> str:
    """The one line for a health endpoint that cannot listen: ``problem`` says where and why
    (``127.0.0.1:8480: Address already in use``, from ``listen_problem`` or a bind)."""
    return (
        f"health.port: cannot listen on {problem}; stop what listens there, choose another "
        "health.port, or set health.enabled: false"
    )
