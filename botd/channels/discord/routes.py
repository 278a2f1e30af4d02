"""Where one Discord client's requests go: Discord itself, or the REST and gateway URLs its
section names (``api_base_url``, ``gateway_url``: a proxy, a test's loopback fake).

discord.py has no base-URL option: it builds every REST URL from the class attribute
``Route.BASE`` and opens the gateway at ``DiscordWebSocket.DEFAULT_GATEWAY`` (until READY
names a resume URL), both shared by every client in the process. Setting them would point
every bot of the process at one place, so two Discord channels could not talk to two. Instead
each client gets its own ``RoutedHTTPClient``: every REST request and gateway connection of
the client passes through it (``request``, ``ws_connect``), and it rebases the URLs discord.py
made on those defaults onto the client's own. Interaction responses and followups do not go
through the client: discord.py sends them with the webhook adapter in its context variable
``async_context``, which ``DiscordRoutes.interactions`` points at the client's URLs for the
code that answers an interaction. discord.py's class attributes are never written.

A call made for a conversation held by lease carries its fence to the request
(``fenced_channel``): discord.py's models take no per-request argument, so the call goes
through a view of the client (``RoutedHTTPClient.fenced``) reached by a view of its connection
state, whose requests hand the fence to aiohttp as ``trace_request_ctx``; the client's trace
(``check_fence``) checks it as each request starts, after discord.py's rate-limit wait. A
request held up past the lease's end is not written.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import discord
import yarl
from discord.gateway import DiscordWebSocket
from discord.http import HTTPClient, Route
from discord.types.user import User as UserPayload
from discord.utils import MISSING
from discord.webhook.async_ import AsyncWebhookAdapter, async_context

from ...cluster.fencing import Fence
from ...net.proxy import AiohttpProxy

__all__ = ["DiscordRoutes", "RoutedHTTPClient", "check_fence", "fenced_channel"]


@dataclass(frozen=True, eq=False)
class DiscordRoutes:
    """One client's REST base (``https://discord.com/api/v10`` unless ``api``) and gateway
    (``wss://gateway.discord.gg/`` unless ``gateway``)."""

    api: str | None = None
    """The REST API's base URL, version included, as ``Route.BASE`` spells Discord's."""
    gateway: yarl.URL | None = None
    _webhooks: AsyncWebhookAdapter = field(init=False, repr=False)

    @classmethod
    def of(cls, api_base_url: str | None, gateway_url: str | None) -> DiscordRoutes:
        """The routes a section names (None: Discord's own)."""
        api = api_base_url.rstrip("/") if api_base_url else None
        return cls(api, yarl.URL(gateway_url) if gateway_url else None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_webhooks", _RoutedWebhooks(self))

    def rest(self, route: Route) -> Route:
        """``route`` going to this client's REST base (``route`` itself when that is
        Discord's, or when discord.py did not build it on the default base)."""
        default = Route.BASE  # read now: discord.py may move it to another API version
        if self.api is None or not route.url.startswith(default):
            return route
        rebased = copy.copy(route)  # discord.py makes a Route per request; it stays as made
        rebased.url = self.api + route.url[len(default) :]
        return rebased

    def socket(self, url: str) -> str:
        """The gateway ``url`` discord.py asks for, on this client's gateway when it is the
        default one (a resume URL READY named is used as given)."""
        if self.gateway is None:
            return url
        asked = yarl.URL(url)
        if asked.with_query(None) != DiscordWebSocket.DEFAULT_GATEWAY.with_query(None):
            return url
        return str(self.gateway.with_query(asked.query))

    @contextlib.contextmanager
    def interactions(self) -> Iterator[None]:
        """Within the block, interaction responses and followups go to this client's REST
        base (discord.py sends them through ``async_context``, not through the client)."""
        if self.api is None:
            yield
            return
        token = async_context.set(self._webhooks)
        try:
            yield
        finally:
            async_context.reset(token)


class _RoutedWebhooks(AsyncWebhookAdapter):
    """discord.py's webhook adapter, its requests rebased onto one client's routes."""

    def __init__(self, routes: DiscordRoutes) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # discord.py leaves it untyped
        self._routes = routes

    async def request(self, route: Route, session: aiohttp.ClientSession, **kwargs: Any) -> Any:
        return await super().request(self._routes.rest(route), session, **kwargs)


class RoutedHTTPClient(HTTPClient):
    """discord.py's HTTP client for one client, its REST requests and gateway connections
    rebased onto that client's ``routes``."""

    def __init__(
        self,
        routes: DiscordRoutes,
        loop: asyncio.AbstractEventLoop,
        *,
        http_trace: aiohttp.TraceConfig | None = None,
        proxy: AiohttpProxy | None = None,
    ) -> None:
        """``proxy``: what its REST requests and gateway connections go through (None:
        direct). An HTTP(S) proxy is discord.py's own ``proxy`` (its credentials in the URL:
        ``proxy_auth`` is deprecated in aiohttp); a SOCKS one
        is the connector of the session ``static_login`` opens (the gateway's websocket is
        opened on that session too)."""
        proxy = proxy or AiohttpProxy()
        super().__init__(loop, http_trace=http_trace, proxy=proxy.url)
        self.routes = routes
        self._proxy = proxy

    async def static_login(self, token: str) -> UserPayload:
        # The connector is made here, in the loop, as discord.py makes its own default one.
        if self.connector is MISSING and self._proxy.socks is not None:
            self.connector = self._proxy.connector(limit=0) or MISSING
        return await super().static_login(token)

    fence: Fence | None = None
    """The lease its requests are made under (a ``fenced`` view's; None: unfenced)."""

    def fenced(self, fence: Fence) -> RoutedHTTPClient:
        """This client for the requests of one call made under ``fence``: a shallow copy
        (the session, the rate limits and the routes are the client's own) whose requests
        carry the fence to the trace."""
        view = copy.copy(self)
        view.fence = fence
        return view

    async def request(self, route: Route, **kwargs: Any) -> Any:
        if self.fence is not None:
            kwargs["trace_request_ctx"] = self.fence
        return await super().request(self.routes.rest(route), **kwargs)

    async def ws_connect(self, url: str, *, compress: int = 0) -> aiohttp.ClientWebSocketResponse:
        return await super().ws_connect(self.routes.socket(url), compress=compress)


async def check_fence(
    _session: aiohttp.ClientSession,
    context: Any,
    _params: aiohttp.TraceRequestStartParams,
) -> None:
    """The client's ``on_request_start`` trace callback: a request made under a fence
    (``trace_request_ctx``) starts only while its lease has its margin left."""
    fence = context.trace_request_ctx
    if isinstance(fence, Fence):
        fence.check_send(time.monotonic())


class _FencedState:
    """A client's connection state whose ``http`` is a fenced view of its client; everything
    else is the state's own (its methods stay bound to it)."""

    def __init__(self, state: Any, http: RoutedHTTPClient) -> None:
        self._state = state
        self.http = http

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)


def fenced_channel(
    state: Any, http: RoutedHTTPClient, channel_id: int, fence: Fence | None
) -> discord.PartialMessageable:
    """The channel ``channel_id`` as discord.py's model over ``state`` (a client's connection
    state): the calls made through it (and the messages it hands out) are made under
    ``fence`` (None: unfenced)."""
    if fence is not None:
        state = _FencedState(state, http.fenced(fence))
    return discord.PartialMessageable(state=state, id=channel_id)
