"""Loopback fakes of the two search services ``web_search`` speaks: SearXNG's JSON API and the
Brave Search API, on aiohttp.

Each answers ``GET`` on the real path with the real JSON shape, from the pages a test gives it
by query (``pages``; an unknown query gets no results), and records every request it got:

    async with FakeSearxng(pages={"botd": [hit("botd", "https://botd.dev/", "A daemon")]}) as fake:
        ...  # point agent.web_search.base_url at fake.base_url
        fake.requests[0].query["format"] == "json"

``FakeSearxng`` refuses a request without ``format=json`` with 403, as an instance whose
settings do not list the format does. ``FakeBrave`` refuses a request without the right
``X-Subscription-Token`` with 401 and the API's JSON error, reads ``count`` (at most 20) and
marks the query's words in snippets with ``<strong>``, as the real API does. ``answer``, when
set, replaces the answer's body (bytes sent as they are, for answers that are not JSON).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .loopback import serve

__all__ = ["FakeBrave", "FakeSearxng", "Hit", "SearchRequest", "hit"]


@dataclass(frozen=True, slots=True)
class Hit:
    title: str
    url: str
    snippet: str


def hit(title: str, url: str, snippet: str = "") -> Hit:
    return Hit(title, url, snippet)


@dataclass(frozen=True, slots=True)
class SearchRequest:
    path: str
    query: dict[str, str]
    headers: dict[str, str]


@dataclass
class _FakeSearch:
    pages: dict[str, list[Hit]] = field(default_factory=dict)
    answer: bytes | None = None
    requests: list[SearchRequest] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    _port: int = 0

    path = "/"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    async def __aenter__(self) -> _FakeSearch:
        app = web.Application()
        app.router.add_get(self.path, self._handle)
        self._runner, self._port = await serve(app)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests.append(
            SearchRequest(request.path, dict(request.query), dict(request.headers))
        )
        refused = self._refusal(request)
        if refused is not None:
            return refused
        if self.answer is not None:
            return web.Response(body=self.answer, content_type="application/json")
        hits = self.pages.get(request.query.get("q", ""), [])
        return web.json_response(self._body(request, hits))

    def _refusal(self, request: web.Request) -> web.Response | None:
        return None

    def _body(self, request: web.Request, hits: list[Hit]) -> dict[str, Any]:
        raise NotImplementedError


class FakeSearxng(_FakeSearch):
    """SearXNG's ``/search?format=json`` (see the module docstring)."""

    path = "/search"

    async def __aenter__(self) -> FakeSearxng:
        await super().__aenter__()
        return self

    def _refusal(self, request: web.Request) -> web.Response | None:
        if request.query.get("format") != "json":
            return web.Response(status=403, text="403 Forbidden")
        return None

    def _body(self, request: web.Request, hits: list[Hit]) -> dict[str, Any]:
        results = [
            {"title": h.title, "url": h.url, "content": h.snippet, "engine": "fake", "score": 1.0}
            for h in hits
        ]
        return {"query": request.query.get("q", ""), "number_of_results": 0, "results": results}


class FakeBrave(_FakeSearch):
    """The Brave Search API's ``/res/v1/web/search`` (see the module docstring)."""

    path = "/res/v1/web/search"

    def __init__(self, *, api_key: str, pages: dict[str, list[Hit]] | None = None) -> None:
        super().__init__(pages=pages or {})
        self.api_key = api_key

    async def __aenter__(self) -> FakeBrave:
        await super().__aenter__()
        return self

    def _refusal(self, request: web.Request) -> web.Response | None:
        if request.headers.get("X-Subscription-Token") != self.api_key:
            error = {
                "type": "ErrorResponse",
                "error": {"code": "SUBSCRIPTION_TOKEN_INVALID", "status": 401},
            }
            return web.Response(status=401, text=json.dumps(error), content_type="application/json")
        return None

    def _body(self, request: web.Request, hits: list[Hit]) -> dict[str, Any]:
        count = min(int(request.query.get("count", "20")), 20)
        words = request.query.get("q", "").split()
        results = []
        for h in hits[:count]:
            snippet = h.snippet
            for word in words:
                snippet = snippet.replace(word, f"<strong>{word}</strong>")
            results.append(
                {"title": h.title, "url": h.url, "description": snippet, "type": "search_result"}
            )
        body: dict[str, Any] = {"type": "search", "query": {"original": request.query.get("q")}}
        if results:
            body["web"] = {"type": "search", "results": results}
        return body
