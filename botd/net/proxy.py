"""A section's ``proxy:`` (``botd.config.proxy``) as the HTTP libraries under the SDKs take it.

Two libraries carry every connection botd makes to a platform or a model:

- httpx (python-telegram-bot, the model clients, the doctor): ``httpx_options`` gives the
  client's keyword arguments. A URL is httpx's ``proxy=`` (SOCKS through ``socksio``); httpx
  then sends every request through it, loopback addresses included (``NO_PROXY`` applies
  only to the environment's proxy). ``direct`` is ``trust_env=False``; unset leaves httpx
  to read the environment as it always did.
- aiohttp (slack_sdk, discord.py): ``AiohttpProxy`` says what to hand the SDK. aiohttp
  speaks HTTP(S) proxies itself (``proxy=``, ``proxy_auth=``) but not SOCKS: a SOCKS proxy is
  a connector of ``aiohttp-socks`` (``connector()``), the session's every connection, a
  websocket's too. Unset, ``aiohttp_proxy`` reads the environment for the URL the SDK
  connects to (``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY``, ``NO_PROXY`` honoured, the way
  urllib reads them) for an SDK that would otherwise go direct (discord.py).

``web_fetch`` takes no proxy, neither a section's nor the environment's: its guard checks the
address it connects to, and a proxy would connect on its behalf to whatever the URL names
(``botd.net.fetch``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit
from urllib.request import getproxies, proxy_bypass

import aiohttp

from ..config.proxy import DIRECT

if TYPE_CHECKING:
    from aiohttp_socks import ProxyConnector

__all__ = ["AiohttpProxy", "aiohttp_proxy", "environment_proxy", "httpx_options"]


def httpx_options(proxy: str | None) -> dict[str, Any]:
    """An httpx client's keyword arguments for ``proxy`` (empty when unset: the environment's)."""
    if proxy is None:
        return {}
    if proxy == DIRECT:
        return {"trust_env": False}
    return {"proxy": proxy}


def environment_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (None: none, or ``NO_PROXY`` exempts it)."""
    parts = urlsplit(url)
    scheme = {"wss": "https", "ws": "http"}.get(parts.scheme, parts.scheme)
    proxies = getproxies()
    found = proxies.get(scheme) or proxies.get("all")
    if not found or proxy_bypass(parts.hostname or ""):
        return None
    return found


@dataclass(frozen=True, slots=True)
class AiohttpProxy:
    """What an aiohttp-based SDK is given for one proxy (all None: go direct)."""

    url: str | None = None
    """An HTTP(S) proxy without its credentials: aiohttp's ``proxy=``."""
    auth: aiohttp.BasicAuth | None = None
    """Its credentials: aiohttp's ``proxy_auth=``."""
    socks: str | None = None
    """A SOCKS5 proxy's URL (credentials included): the session's ``connector()``."""

    @property
    def url_with_auth(self) -> str | None:
        """The HTTP(S) proxy with its credentials in the URL, for an SDK that takes no
        ``proxy_auth`` (slack_sdk; aiohttp reads them from the URL)."""
        return _with_auth(self.url, self.auth)

    def connector(self, **options: Any) -> ProxyConnector | None:
        """A new connector for a SOCKS proxy (None for an HTTP one, or none): aiohttp's own
        pool, each connection opened through the proxy. ``options``: the pool's
        (``limit=0``, ``ssl=``)."""
        if self.socks is None:
            return None
        from aiohttp_socks import ProxyConnector, ProxyType  # the slack and discord extras'

        parts = urlsplit(self.socks)
        return ProxyConnector(
            host=parts.hostname or "",
            port=parts.port or 1080,
            proxy_type=ProxyType.SOCKS5,
            username=unquote(parts.username) if parts.username is not None else None,
            password=unquote(parts.password) if parts.password is not None else None,
            rdns=parts.scheme == "socks5h",
            **options,
        )


def aiohttp_proxy(proxy: str | None, target: str, *, environment: bool = True) -> AiohttpProxy:
    """``proxy`` for an aiohttp session that connects to ``target``. Unset: the environment's
    proxy for ``target`` when ``environment`` (else nothing: the SDK reads it itself)."""
    if proxy == DIRECT:
        return AiohttpProxy()
    if proxy is None:
        found = environment_proxy(target) if environment else None
        if found is None:
            return AiohttpProxy()
        proxy = found
    parts = urlsplit(proxy)
    if parts.scheme.startswith("socks"):
        return AiohttpProxy(socks=proxy)
    auth = None
    if parts.username is not None:
        auth = aiohttp.BasicAuth(unquote(parts.username), unquote(parts.password or ""))
    bare = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    return AiohttpProxy(url=bare, auth=auth)


def _with_auth(url: str | None, auth: aiohttp.BasicAuth | None) -> str | None:
    if url is None or auth is None:
        return url
    parts = urlsplit(url)
    credentials = f"{quote(auth.login, safe='')}:{quote(auth.password, safe='')}"
    return parts._replace(netloc=f"{credentials}@{parts.netloc}").geturl()
