"""A section's ``proxy:`` (``botd.config.proxy``) as the HTTP libraries under the SDKs take it.

Two libraries carry every connection botd makes to a platform or a model:

- httpx (python-telegram-bot, the model clients, the doctor): ``httpx_options`` gives the
  client's keyword arguments. A URL is httpx's ``proxy=`` (SOCKS through ``socksio``); httpx
  then sends every request through it, loopback addresses included (``NO_PROXY`` applies
  only to the environment's proxy). ``direct`` is ``trust_env=False``; unset leaves httpx
  to read the environment as it always did.
- aiohttp (slack_sdk, discord.py): ``AiohttpProxy`` says what to hand the SDK. aiohttp
  speaks HTTP(S) proxies itself (``proxy=``, credentials in the URL) but not SOCKS: a SOCKS
  proxy is a connector of ``aiohttp-socks`` (``connector()``), the session's every
  connection, a websocket's too. Unset, ``aiohttp_proxy`` reads the environment for the URL the SDK
  connects to (``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY``, ``NO_PROXY`` honoured, the way
  urllib reads them) for an SDK that would otherwise go direct (discord.py).

``web_fetch`` takes no proxy, neither a section's nor the environment's: its guard checks the
address it connects to, and a proxy would connect on its behalf to whatever the URL names
(``botd.net.fetch``).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit
from urllib.request import getproxies, proxy_bypass

from ..config.proxy import DIRECT, shown

if TYPE_CHECKING:
    from aiohttp_socks import ProxyConnector

__all__ = [
    "AiohttpProxy",
    "aiohttp_proxy",
    "environment_proxy",
    "httpx_options",
    "proxy_failure",
]


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
    """What an aiohttp-based SDK is given for one proxy (both None: go direct)."""

    url: str | None = None
    """An HTTP(S) proxy, its credentials in the URL (aiohttp sends them as
    ``Proxy-Authorization``): aiohttp's ``proxy=``."""
    socks: str | None = None
    """A SOCKS5 proxy's URL (credentials included): the session's ``connector()``."""

    def connector(self, **options: Any) -> ProxyConnector | None:
        """A new connector for a SOCKS proxy (None for an HTTP one, or none): aiohttp's own
        pool, each connection opened through the proxy. ``options``: the pool's
        (``limit=0``, ``ssl=``)."""
        if self.socks is None:
            return None
        try:
            # The extras of the channels whose SDKs run on aiohttp bring it.
            from aiohttp_socks import ProxyConnector, ProxyType
        except ImportError:
            raise RuntimeError(
                "a socks5:// proxy needs aiohttp-socks: install that channel's extra of botd "
                "again (it brings it), or pip install aiohttp-socks"
            ) from None

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


def aiohttp_proxy(proxy: str | None, target: str) -> AiohttpProxy:
    """``proxy`` for an aiohttp session that connects to ``target``. Unset: the environment's
    proxy for ``target`` (see ``environment_proxy``)."""
    if proxy == DIRECT:
        return AiohttpProxy()
    if proxy is None:
        proxy = environment_proxy(target)
        if proxy is None:
            return AiohttpProxy()
    if urlsplit(proxy).scheme.startswith("socks"):
        return AiohttpProxy(socks=proxy)
    return AiohttpProxy(url=proxy)


_AUTH_REFUSED = re.compile(r"\b407\b|proxy authentication|authentication failure|username/password")


def proxy_failure(exc: BaseException, proxy: str | None, key: str) -> str | None:
    """The one-line reason of a failure that the proxy caused (None: it was not the proxy's):
    its credentials refused (a 407, a SOCKS5 authentication failure) or the proxy itself
    failing (unreachable, refusing the tunnel). ``proxy``: the section's ``proxy:`` (None:
    the environment's), named with its password masked; ``key``: the config key to check
    (``channels.telegram.proxy``). ``exc`` and its causes are read, whichever SDK raised them."""
    found = None if proxy == DIRECT else _proxy_error(exc)
    if found is None:
        return None
    if proxy is None:
        where, key = "the proxy from the environment", f"HTTPS_PROXY and the like (or set {key})"
    else:
        where = f"the proxy {shown(proxy)}"
    if _AUTH_REFUSED.search(found.lower()):
        return f"{where} refused the credentials ({found}): check the user and password of {key}"
    return f"cannot get through {where} ({found}): check {key}"


def _proxy_error(exc: BaseException) -> str | None:
    """What the proxy said in ``exc`` or its causes, as one line (None: nothing of a proxy)."""
    # aiohttp is loaded only by the SDKs that use it (Slack's, Discord's): when it is not,
    # no error can be one of its.
    aiohttp = sys.modules.get("aiohttp")
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = " ".join(str(current).split()) or type(current).__name__
        text = text.removeprefix("httpx.ProxyError: ")  # python-telegram-bot's wording
        if aiohttp is not None and isinstance(current, aiohttp.ClientHttpProxyError):
            return f"{current.status} {current.message}"
        if aiohttp is not None and isinstance(current, aiohttp.ClientProxyConnectionError):
            return text
        if type(current).__name__ == "ProxyError" or type(current).__module__.startswith(
            "python_socks"
        ):
            return text
        if _AUTH_REFUSED.search(text.lower()):
            return "407 Proxy Authentication Required" if "407" in text else text
        current = current.__cause__ or current.__context__
    return None
