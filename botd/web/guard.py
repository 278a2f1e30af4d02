"""The one guard in front of every route of the web page, its chat and its OpenAI endpoint.

``guarded(handler, web, writes=...)`` answers a request only when:

* its ``Host`` header names the address botd is bound to (loopback names for a loopback
  bind, the bound address itself otherwise; any name on a wildcard bind, which needs the
  token): a page of another site whose name was re-pointed at this machine (DNS rebinding)
  is refused with 421;
* with ``web.token`` set, it carries the token: ``Authorization: Bearer <token>``, or the
  page's cookie, which ``GET /login?token=`` or the login form's ``POST /login`` sets
  (HttpOnly, SameSite=Strict; its value is derived from the token, never the token). Else 401.
  The token is compared in constant time and never logged or rendered;
* for a route that changes something (``writes``), it came from the page itself: a request
  with an ``Authorization`` header passes (a page of another site cannot send one without a
  CORS preflight, which botd never grants); any other needs ``X-Botd-Console: 1`` (which a
  cross-site form cannot send), and an ``Origin`` / ``Sec-Fetch-Site`` that, when sent, say
  same origin. Else 403.

Every response to a guarded route, a refusal or a stream included, carries the security
headers (``SECURITY_HEADERS``: a CSP allowing only botd's own files and no inline script,
``nosniff``, ``no-referrer``, no framing, ``no-store``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Callable
from urllib.parse import urlsplit

from aiohttp import web

from ..config.schema import WebSection, is_loopback
from ..http.routes import Handler
from ..http.server import RESPONSE_HEADERS

__all__ = [
    "COOKIE",
    "SECURITY_HEADERS",
    "cookie_value",
    "guarded",
    "login_handler",
    "token_accepted",
]

log = logging.getLogger(__name__)

COOKIE = "botd_web"
"""The cookie the login sets (``cookie_value``)."""
PAGE_HEADER = "X-Botd-Console"

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

_WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def cookie_value(token: str) -> str:
    """What the page's cookie holds for ``token``: a digest of it, so the cookie jar never
    holds the token itself."""
    return hmac.new(token.encode(), b"botd web page", hashlib.sha256).hexdigest()


def token_accepted(request: web.Request, token: str) -> bool:
    """Whether ``request`` carries ``token`` (a Bearer header or the page's cookie)."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return True
    cookie = request.cookies.get(COOKIE, "")
    return hmac.compare_digest(cookie.encode(), cookie_value(token).encode())


def _host_name(header: str) -> str:
    """The name of a ``Host`` header, without its port or IPv6 brackets, lower case."""
    parsed = urlsplit(f"//{header}")
    return (parsed.hostname or "").lower()


def host_allowed(header: str, bound: str) -> bool:
    """Whether a request's ``Host`` header names ``bound``, the address served at."""
    name = _host_name(header)
    if bound in _WILDCARDS:
        return bool(name)
    if is_loopback(bound):
        return is_loopback(name)
    return name == bound.lower().strip("[]")


def _same_origin(request: web.Request) -> bool:
    if "Authorization" in request.headers:
        return True
    if request.headers.get(PAGE_HEADER) != "1":
        return False
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == request.host.lower()


def _refusal(status: int, text: str) -> web.Response:
    return web.json_response({"error": text}, status=status)


def guarded(handler: Handler, web_section: Callable[[], WebSection], *, writes: bool) -> Handler:
    """``handler`` behind the checks of the module docstring; ``web_section`` is read at
    each request (a reload's token applies at once)."""

    async def guard(request: web.Request) -> web.StreamResponse:
        request[RESPONSE_HEADERS] = SECURITY_HEADERS
        section = web_section()
        if not host_allowed(request.host, section.host):
            log.warning("web: refused a request for host %r", request.host[:100])
            return _refusal(421, "this server does not answer for that host name")
        if section.token is not None and not token_accepted(request, section.token):
            if request.method == "GET" and "text/html" in request.headers.get("Accept", ""):
                form = _LOGIN_FORM.format(problem="")
                return web.Response(text=form, content_type="text/html", status=401)
            return _refusal(401, "the web token is needed (open /login?token=...)")
        if writes and not _same_origin(request):
            return _refusal(403, "refused: the request did not come from the page")
        return await handler(request)

    return guard


_LOGIN_FORM = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>botd: log in</title>
<link rel="stylesheet" href="/console.css"></head>
<body><main class="login"><h1>botd</h1>
<form method="post" action="/login"><label>Token <input type="password" name="token"
autocomplete="current-password" required></label> <button type="submit">Log in</button></form>
<p class="problem">{problem}</p></main></body></html>
"""


def login_handler(web_section: Callable[[], WebSection]) -> Handler:
    """``GET /login`` (the form, or ``?token=`` at once) and ``POST /login`` (the form sent):
    the right token sets the page's cookie and goes to the page; a wrong one shows the
    form again, 401. Guard it with ``writes=False``: it is how a browser gets in."""

    async def login(request: web.Request) -> web.StreamResponse:
        request[RESPONSE_HEADERS] = SECURITY_HEADERS
        section = web_section()
        if not host_allowed(request.host, section.host):
            return _refusal(421, "this server does not answer for that host name")
        if request.method == "POST":
            given = str((await request.post()).get("token", ""))
        else:
            given = request.query.get("token", "")
        if section.token is None:
            raise web.HTTPSeeOther("/")
        if not given:
            return web.Response(text=_LOGIN_FORM.format(problem=""), content_type="text/html")
        if not hmac.compare_digest(given.encode(), section.token.encode()):
            log.warning("web: a login with a wrong token")
            form = _LOGIN_FORM.format(problem="That is not the token.")
            return web.Response(text=form, content_type="text/html", status=401)
        response = web.Response(status=303, headers={"Location": "/"})
        response.set_cookie(
            COOKIE, cookie_value(section.token), httponly=True, samesite="Strict", path="/"
        )
        return response

    return login
