"""The search services ``web_search`` asks, each as the request to send and how to read its
JSON answer into results (title, URL, snippet).

``searxng``: a SearXNG instance's search API, ``GET <base_url>/search?q=…&format=json``,
answering ``{"results": [{"title", "url", "content"}, …]}`` (the instance's settings must
list ``json`` among ``search.formats``, or it answers 403). ``brave``: the Brave Search API,
``GET <base_url>/res/v1/web/search?q=…&count=…`` with the key in ``X-Subscription-Token``,
answering ``{"web": {"results": [{"title", "url", "description"}, …]}}``; its snippets mark
the query's words with ``<strong>``.

Whatever a service answers is read defensively: results without a title or an http(s) URL
are skipped, markup is removed from titles and snippets, and each field is flattened to
one line and cut (``TITLE_CHARS``, ``URL_CHARS``, ``SNIPPET_CHARS``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlencode

from ....config.schema import BRAVE_SEARCH_URL, WebSearchSection

__all__ = [
    "SNIPPET_CHARS",
    "TITLE_CHARS",
    "URL_CHARS",
    "SearchProvider",
    "SearchRequest",
    "SearchResult",
    "numbered",
    "provider_for",
]

TITLE_CHARS = 200
URL_CHARS = 500
SNIPPET_CHARS = 400

_TAG = re.compile(r"<[^>]{0,200}>")


@dataclass(frozen=True, slots=True)
class SearchResult:
    title: str
    url: str
    snippet: str


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """The GET to send: its URL and the headers it needs."""

    url: str
    headers: dict[str, str]


class SearchProvider(Protocol):
    name: str

    def request(self, query: str, count: int) -> SearchRequest:
        """The request asking for ``count`` results for ``query``."""
        ...

    def results(self, answer: Any) -> list[SearchResult]:
        """The results in a decoded JSON answer (raises ``ValueError`` for another shape)."""
        ...


def _line(value: object, cut: int) -> str:
    if not isinstance(value, str):
        return ""
    text = " ".join(html.unescape(_TAG.sub("", value)).split())
    return text if len(text) <= cut else text[: cut - 1] + "…"


def _read(items: object, snippet_key: str) -> list[SearchResult]:
    if not isinstance(items, list):
        raise ValueError("the answer has no list of results")
    found = []
    for item in items:
        if not isinstance(item, dict):
            continue
        url = item.get("url")
        title = _line(item.get("title"), TITLE_CHARS)
        if not isinstance(url, str) or not url.startswith(("http://", "https://")) or not title:
            continue
        if len(url) > URL_CHARS or any(c.isspace() for c in url):
            continue  # a URL the model could not use as it is
        found.append(SearchResult(title, url, _line(item.get(snippet_key), SNIPPET_CHARS)))
    return found


class SearxngProvider:
    """A SearXNG instance's JSON API (see the module docstring)."""

    name = "searxng"

    def __init__(self, base_url: str) -> None:
        self._base = base_url.rstrip("/")

    def request(self, query: str, count: int) -> SearchRequest:
        # SearXNG has no count parameter: its first page is cut to ``count`` when read.
        params = urlencode({"q": query, "format": "json"})
        return SearchRequest(f"{self._base}/search?{params}", {"Accept": "application/json"})

    def results(self, answer: Any) -> list[SearchResult]:
        if not isinstance(answer, dict):
            raise ValueError("the answer is not a JSON object")
        return _read(answer.get("results"), "content")


class BraveProvider:
    """The Brave Search API (see the module docstring)."""

    name = "brave"

    def __init__(self, base_url: str, api_key: str) -> None:
        self._base = base_url.rstrip("/")
        self._key = api_key

    def request(self, query: str, count: int) -> SearchRequest:
        params = urlencode({"q": query, "count": count})
        return SearchRequest(
            f"{self._base}/res/v1/web/search?{params}",
            {"Accept": "application/json", "X-Subscription-Token": self._key},
        )

    def results(self, answer: Any) -> list[SearchResult]:
        if not isinstance(answer, dict):
            raise ValueError("the answer is not a JSON object")
        web = answer.get("web")
        if web is None:
            return []  # Brave leaves ``web`` out when nothing was found
        if not isinstance(web, dict):
            raise ValueError("its web results are not a JSON object")
        return _read(web.get("results"), "description")


def provider_for(section: WebSearchSection) -> SearchProvider:
    """The provider ``section`` configures."""
    if section.provider == "brave":
        assert section.api_key is not None  # the section needs it
        return BraveProvider(section.base_url or BRAVE_SEARCH_URL, section.api_key)
    assert section.base_url is not None  # the section needs it
    return SearxngProvider(section.base_url)


def numbered(query: str, results: Iterable[SearchResult]) -> str:
    """The results as the model reads them: a heading, then each one numbered, its title,
    URL and snippet on lines of their own."""
    lines = []
    for number, result in enumerate(results, 1):
        lines.append(f"{number}. {result.title}\n   {result.url}")
        if result.snippet:
            lines.append(f"   {result.snippet}")
    shown = _line(query, TITLE_CHARS)
    if not lines:
        return f"No results for {shown!r}."
    return f"Results for {shown!r}:\n" + "\n".join(lines)
