"""The web page (``web.enabled``): its files and its API on botd's HTTP server at
``web.host``/``web.port``, every route behind ``botd.web.guard``.

=========================  ================================================================
route                      answers
=========================  ================================================================
``GET /``                  the page (``static/index.html``); ``/console.js``, ``/console.css``
``GET|POST /login``        the token asked for, the page's cookie set (``guard``)
``GET /api/status``        ``StatusReport.read``: what ``/healthz`` and ``botd status`` show
``GET /api/events``        server-sent events: ``status``, ``conversations``, ``approvals``,
                           each sent when it changes (``Live``)
``GET /api/conversations`` the conversations (channel, chat, last activity, queue); with
                           ``?key=<conversation key>`` that conversation's messages and pieces
                           with their delivery state
``GET /api/approvals``     the pending approval requests
``POST /api/approvals/     ``{"token", "verb"}``: decided as a press decides
decide``                   (``Approvals.decide``), by "the web page"
``GET /api/about``         what the page needs to know of botd: version, whether there is chat
=========================  ================================================================

The chat (``botd.channels.web``) brings its own routes (``chat_routes``, and with
``web.openai_api`` the OpenAI-compatible ``openai_routes``) as ``(method, path, handler,
writes)``: when the web channel runs they are served here behind the same guard, each request
answered by the channel running then. Without it the page's Chat view says chat is not
available.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

from aiohttp import web

from .. import __version__
from ..channels.web.openai_api import openai_routes
from ..channels.web.routes import BadRequest, chat_routes, json_body, web_channel
from ..config.schema import WebSection
from ..http.routes import CannotListen, Handler, Route
from ..ops.status import StatusReport
from .guard import guarded, login_handler
from .live import Live
from .views import approval_view, conversation_view, piece_view

if TYPE_CHECKING:
    from ..runtime import Runtime

__all__ = ["DECIDED_BY", "WebPage", "WebPortInUse"]

log = logging.getLogger(__name__)

DECIDED_BY = "the web page"
"""Who a decision made on the page is said to be by."""

_FILES = {
    "/": ("index.html", "text/html"),
    "/console.js": ("console.js", "text/javascript"),
    "/console.css": ("console.css", "text/css"),
}
KEY_LIMIT = 500
"""The longest conversation key asked for (keys are far shorter)."""


class WebPortInUse(OSError):
    """The page cannot be served where ``web.host``/``web.port`` say."""


RouteSpec = tuple[str, str, Handler, bool]
"""A route as the chat gives it: method, path, handler, whether it writes."""


class WebPage:
    """The page and its API (see the module docstring)."""

    def __init__(
        self, runtime: Runtime, status: StatusReport, web_section: Callable[[], WebSection]
    ) -> None:
        self._runtime = runtime
        self._status = status
        self._web = web_section
        self._routes: list[Route] = []
        self.live = Live(
            {
                "status": status.read,
                "conversations": self._conversations,
                "approvals": self._approvals,
            }
        )
        self.chat = False
        """Whether a chat's routes are served (the page's Chat view)."""

    def routes(self) -> list[RouteSpec]:
        """Every route of the page and its API, then the chat's."""
        own: list[RouteSpec] = [
            *(("GET", path, self._file(*file), False) for path, file in _FILES.items()),
            ("GET", "/api/status", self._api_status, False),
            ("GET", "/api/events", self.live.stream, False),
            ("GET", "/api/conversations", self._api_conversations, False),
            ("GET", "/api/approvals", self._api_approvals, False),
            ("POST", "/api/approvals/decide", self._api_decide, True),
            ("GET", "/api/about", self._api_about, False),
        ]
        chat: list[RouteSpec] = []
        adapters = self._runtime.adapters
        if web_channel(adapters) is not None:
            # The routes ask for the channel running when a request comes (a reload may
            # have started it again).
            running = functools.partial(web_channel, adapters)
            chat.extend(chat_routes(running))
            if self._web().openai_api:
                chat.extend(openai_routes(running))
        self.chat = any(path.startswith("/api/chat/") for _, path, _, _ in chat)
        return own + chat

    async def serve(self) -> None:
        """Serve every route at ``web.host``/``web.port``; ``WebPortInUse`` when it cannot."""
        section = self._web()
        host, port = section.host, section.port
        login = login_handler(self._web)
        try:
            for method in ("GET", "POST"):
                self._routes.append(
                    await self._runtime.http.add(method, "/login", login, host=host, port=port)
                )
            for method, path, handler, writes in self.routes():
                route = await self._runtime.http.add(
                    method, path, guarded(handler, self._web, writes=writes), host=host, port=port
                )
                self._routes.append(route)
        except CannotListen as exc:
            await self.close()
            raise WebPortInUse(
                f"web.port: cannot listen on {exc.where}: {exc.strerror}; stop what listens "
                "there, choose another web.port, or set web.enabled: false"
            ) from None
        log.info("web page on http://%s:%d/", host, self._routes[0].port)

    @property
    def port(self) -> int | None:
        """The port served on, once serving."""
        return self._routes[0].port if self._routes else None

    async def close(self) -> None:
        """End the live streams (the page's and the chat's), then serve nothing more; safe
        twice."""
        await self.live.close()
        chat = web_channel(self._runtime.adapters)
        if chat is not None:
            chat.end_streams()
        routes, self._routes = self._routes, []
        for route in routes:
            await route.remove()

    # -- the handlers --------------------------------------------------------------------------

    def _file(self, name: str, kind: str) -> Handler:
        body = resources.files(__package__).joinpath("static", name).read_bytes()

        async def serve_file(request: web.Request) -> web.StreamResponse:
            return web.Response(body=body, content_type=kind, charset="utf-8")

        return serve_file

    async def _api_status(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(await self._status.read())

    async def _api_about(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"version": __version__, "chat": self.chat})

    async def _conversations(self) -> list[dict[str, Any]]:
        summaries = await self._runtime.store.conversation_summaries()
        return [conversation_view(summary) for summary in summaries]

    async def _approvals(self) -> list[dict[str, Any]]:
        return [approval_view(a) for a in await self._runtime.store.pending_approvals()]

    async def _api_conversations(self, request: web.Request) -> web.StreamResponse:
        key = request.query.get("key")
        if key is None:
            return web.json_response({"conversations": await self._conversations()})
        if not key or len(key) > KEY_LIMIT:
            return web.json_response({"error": "key: a conversation key"}, status=400)
        pieces = await self._runtime.store.conversation_pieces(key)
        return web.json_response({"key": key, "pieces": [piece_view(p) for p in pieces]})

    async def _api_approvals(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"approvals": await self._approvals()})

    async def _api_decide(self, request: web.Request) -> web.StreamResponse:
        try:
            asked = await json_body(request)
        except BadRequest:
            return web.json_response({"error": 'a JSON object {"token", "verb"}'}, status=400)
        token, verb = asked.get("token"), asked.get("verb")
        if not isinstance(token, str) or not isinstance(verb, str) or not token or not verb:
            return web.json_response({"error": "token and verb: strings"}, status=400)
        decided, message = await self._runtime.approvals.decide(token[:100], verb, DECIDED_BY)
        self.live.poke()
        return web.json_response(
            {"decided": decided, "message": message}, status=200 if decided else 409
        )
