"""``botd.net.proxy``: a section's ``proxy:`` as httpx and aiohttp take it, the environment's
proxy where the section sets none, and a failure told as the proxy's only when it is."""

from __future__ import annotations

import httpx
import pytest

from botd.net.proxy import (
    AiohttpProxy,
    aiohttp_proxy,
    environment_proxy,
    httpx_options,
    proxy_failure,
)


def test_httpx_takes_the_url_direct_turns_the_environment_off_unset_leaves_it() -> None:
    assert httpx_options("socks5://127.0.0.1:1080") == {"proxy": "socks5://127.0.0.1:1080"}
    assert httpx_options("direct") == {"trust_env": False}
    assert httpx_options(None) == {}


def test_the_environment_s_proxy_for_a_url_honours_no_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://env-proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    monkeypatch.setenv("no_proxy", "internal.example")
    assert environment_proxy("https://discord.com/api/v10") == "http://env-proxy.example:3128"
    assert environment_proxy("wss://gateway.discord.gg/") == "http://env-proxy.example:3128"
    assert environment_proxy("https://internal.example/api") is None
    # Unset: the environment's; direct: none whatever it says.
    assert aiohttp_proxy(None, "https://discord.com/api/v10") == AiohttpProxy(
        url="http://env-proxy.example:3128"
    )
    assert aiohttp_proxy("direct", "https://discord.com/api/v10") == AiohttpProxy()


def test_aiohttp_gets_an_http_proxy_as_its_url_and_socks_as_a_connector() -> None:
    http = aiohttp_proxy("http://bob:pw@127.0.0.1:3128", "https://slack.com/api/")
    assert http == AiohttpProxy(url="http://bob:pw@127.0.0.1:3128")
    assert http.connector() is None
    socks = aiohttp_proxy("socks5h://bob:pw@127.0.0.1:1080", "https://slack.com/api/")
    assert socks == AiohttpProxy(socks="socks5h://bob:pw@127.0.0.1:1080")


async def test_a_socks_connector_carries_the_credentials_and_remote_resolution() -> None:
    connector = AiohttpProxy(socks="socks5h://bob:p%40ss@127.0.0.1:1080").connector(limit=0)
    assert connector is not None
    try:
        assert (connector._proxy_username, connector._proxy_password) == ("bob", "p@ss")
        assert connector._rdns is True
    finally:
        await connector.close()


def test_only_a_failure_of_the_proxy_is_told_as_one() -> None:
    key = "channels.slack.proxy"
    refused = RuntimeError("auth.test failed: HTTP 401 invalid_auth")
    assert proxy_failure(refused, "http://127.0.0.1:3128", key) is None
    assert proxy_failure(OSError("Connection refused"), None, key) is None
    tunnel = httpx.ProxyError("407 Proxy Authentication Required")
    said = proxy_failure(RuntimeError("start failed"), "http://bob:pw@127.0.0.1:3128", key)
    assert said is None
    wrapped = RuntimeError("start failed")
    wrapped.__cause__ = tunnel
    said = proxy_failure(wrapped, "http://bob:pw@127.0.0.1:3128", key)
    assert said == (
        "the proxy http://bob:***@127.0.0.1:3128 refused the credentials (407 Proxy "
        "Authentication Required): check the user and password of channels.slack.proxy"
    )
    down = httpx.ProxyError("Connection refused by the proxy")
    assert proxy_failure(down, None, key) == (
        "cannot get through the proxy from the environment (Connection refused by the proxy): "
        "check HTTPS_PROXY and the like (or set channels.slack.proxy)"
    )
