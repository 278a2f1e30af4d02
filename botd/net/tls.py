"""The TLS client settings every HTTP client botd makes shares.

Building a TLS context reads the whole CA bundle (tens of milliseconds of CPU), and each
httpx client builds its own unless it is handed one: a model provider, each Telegram request
pool, each web_fetch and each file download would pay that again. One context, made on
first use the way httpx makes its default (certifi's CAs, or ``SSL_CERT_FILE`` /
``SSL_CERT_DIR`` when set), serves them all; a context may be shared by any number of
connections.
"""

from __future__ import annotations

import functools
import ssl


@functools.cache
def verified_context() -> ssl.SSLContext:
    """The shared client context: certificates and host names verified."""
    import httpx  # on first use too: a botd that makes no HTTP client never loads httpx

    return httpx.create_ssl_context()


__all__ = ["verified_context"]
