"""The ``proxy:`` key of a channel section and of ``model``: which proxy that section's
connections go through.

Three kinds of value:

- unset (left out, or ``null``): what the environment says, as each SDK reads it (``HTTPS_PROXY``,
  ``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY``), as before the key existed;
- ``direct`` (or its synonym ``none``): no proxy, whatever the environment says;
- a URL ``http://``, ``https://``, ``socks5://`` or ``socks5h://`` (``socks5h``: the proxy
  resolves the host names), with ``user:password@`` when the proxy asks for them. The password
  is a secret: give it as ``${VAR}``. Like every URL password in the config it is masked in
  every log line, error and ``botd check``/``doctor`` line (``botd.config.secrets``), and
  ``shown`` spells the URL with it replaced for the lines that name the proxy.

Pure data: nothing here connects anywhere (``botd.net.proxy`` hands the value to the SDKs).
"""

from __future__ import annotations

from typing import Annotated, Final
from urllib.parse import urlsplit, urlunsplit

from pydantic import BeforeValidator

__all__ = ["DIRECT", "PROXY_SCHEMES", "Proxy", "proxy_value", "shown"]

DIRECT: Final = "direct"
"""The value that turns the environment's proxy off for a section."""

PROXY_SCHEMES: Final = ("http", "https", "socks5", "socks5h")
"""The kinds of proxy every SDK botd drives can use."""


def proxy_value(value: object) -> object:
    """``proxy:`` as the models keep it: ``direct`` for ``direct``/``none``, a checked URL."""
    if value is None or not isinstance(value, str):
        return value  # None: unset; anything else: pydantic names the wrong type
    text = value.strip()
    if text.lower() in (DIRECT, "none"):
        return DIRECT
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"is not a proxy URL ({exc})") from None
    if parts.scheme.lower() not in PROXY_SCHEMES:
        raise ValueError(
            f"takes an http://, https://, socks5:// or socks5h:// URL, or {DIRECT} "
            f"(no proxy, whatever the environment says); got {parts.scheme or 'no'} scheme"
        )
    if not parts.hostname:
        raise ValueError("names no proxy host (e.g. socks5://127.0.0.1:1080)")
    if port is None:
        raise ValueError("needs the proxy's port (e.g. http://proxy.example:3128)")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("is a proxy's address: scheme, credentials, host and port, no path")
    if parts.username is not None and parts.password is None:
        raise ValueError("has a user but no password (user:${PROXY_PASSWORD}@host:port)")
    return urlunsplit((parts.scheme.lower(), parts.netloc, "", "", ""))


Proxy = Annotated[str | None, BeforeValidator(proxy_value)]
"""A section's ``proxy:`` (see the module docstring); None: the environment's."""


def shown(proxy: str) -> str:
    """``proxy`` as a line may name it: the password replaced by ``***``."""
    parts = urlsplit(proxy)
    if parts.password is None:
        return proxy
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"{parts.username}:***@{host}", "", "", ""))
