"""Reading a file over HTTP without ever holding more than a size limit of it.

Every adapter that downloads attachments goes through ``fetch_capped``: the response is
streamed and read by ``botd.net.capped_body`` (the same reader as ``botd.net.fetch``), so a
``Content-Length`` over the limit is refused before the body is read, and the reading stops
as soon as the bytes pass the limit, counted after decoding as the decoding happens (a
server may send more than it declared, declare nothing, or send a small compressed body
that expands to gigabytes). At most one content encoding (gzip or deflate) is decoded;
stacked, unknown or broken encodings are refused. Failures become ``DownloadError``s whose
text is safe to show a user: the URL (which may carry a token) is never part of it.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..chat import DownloadError, TooLarge
from ..net.capped_body import ACCEPT_ENCODING, BodyTooLarge, BodyUnreadable, read_capped_body
from ..net.proxy import httpx_options
from ..net.tls import verified_context

DOWNLOAD_TIMEOUT = 60.0
"""Seconds a download may take to connect, and between two pieces of its body."""


async def fetch_capped(
    url: str,
    max_bytes: int,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = DOWNLOAD_TIMEOUT,
    proxy: str | None = None,
) -> tuple[bytes, str]:
    """The body at ``url`` and its content type; ``TooLarge`` past ``max_bytes``. ``proxy``:
    the channel's ``proxy:`` (a URL, ``direct``; None: the environment's, as httpx reads it).

    Redirects are followed (httpx drops an ``Authorization`` header when one leaves the
    host), a 4xx/5xx, a lost connection or a body that cannot be decoded raises
    ``DownloadError``.
    """
    import httpx  # at the first download: an adapter that never downloads does not load it

    sent = {**(headers or {}), "Accept-Encoding": ACCEPT_ENCODING}
    try:
        async with (
            httpx.AsyncClient(
                timeout=timeout,
                follow_redirects=True,
                verify=verified_context(),
                **httpx_options(proxy),
            ) as client,
            client.stream("GET", url, headers=sent) as response,
        ):
            if response.status_code >= 400:
                raise DownloadError(f"the download failed (HTTP {response.status_code})")
            body = await read_capped_body(response, max_bytes)
            return body, response.headers.get("content-type", "")
    except BodyTooLarge as exc:
        raise TooLarge(exc.declared, max_bytes) from None
    except BodyUnreadable as exc:
        raise DownloadError(str(exc)) from None
    except httpx.TimeoutException:
        raise DownloadError("the download timed out") from None
    except httpx.HTTPError as exc:
        raise DownloadError(f"the download failed ({type(exc).__name__})") from None


__all__ = ["DOWNLOAD_TIMEOUT", "fetch_capped"]
