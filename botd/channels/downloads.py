"""Reading a file over HTTP without ever holding more than a size limit of it.

Every adapter that downloads attachments goes through ``fetch_capped``: the response is
streamed, a ``Content-Length`` over the limit is refused before the body is read, and the
reading stops as soon as the bytes pass the limit (a server may send more than it declared,
or declare nothing). Failures become ``DownloadError``s whose text is safe to show a user:
the URL (which may carry a token) is never part of it.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from .base import DownloadError, TooLarge

DOWNLOAD_TIMEOUT = 60.0
"""Seconds a download may take to connect, and between two pieces of its body."""


async def fetch_capped(
    url: str,
    max_bytes: int,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = DOWNLOAD_TIMEOUT,
) -> tuple[bytes, str]:
    """The body at ``url`` and its content type; ``TooLarge`` past ``max_bytes``.

    Redirects are followed (httpx drops an ``Authorization`` header when one leaves the
    host), a 4xx/5xx or a lost connection raises ``DownloadError``.
    """
    try:
        async with (
            httpx.AsyncClient(timeout=timeout, follow_redirects=True) as client,
            client.stream("GET", url, headers=dict(headers or {})) as response,
        ):
            if response.status_code >= 400:
                raise DownloadError(f"the download failed (HTTP {response.status_code})")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise TooLarge(int(declared), max_bytes)
            body = bytearray()
            async for piece in response.aiter_bytes():
                body += piece
                if len(body) > max_bytes:
                    raise TooLarge(None, max_bytes)
            return bytes(body), response.headers.get("content-type", "")
    except httpx.TimeoutException:
        raise DownloadError("the download timed out") from None
    except httpx.HTTPError as exc:
        raise DownloadError(f"the download failed ({type(exc).__name__})") from None


__all__ = ["DOWNLOAD_TIMEOUT", "fetch_capped"]
