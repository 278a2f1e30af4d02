"""A loopback HTTP server of a few files, for what botd fetches (``MEDIA:`` URLs).

    async with FileServer({"cat.png": ("image/png", data)}) as server:
        server.url("cat.png")   # http://127.0.0.1:<port>/cat.png
        server.requests         # the names asked for, in order

A name it does not hold answers 404.
"""

from __future__ import annotations

from aiohttp import web

from .loopback import serve


class FileServer:
    """A loopback HTTP server of a few files (name -> (media type, bytes)); counts requests."""

    def __init__(self, files: dict[str, tuple[str, bytes]]) -> None:
        self.files = files
        self.requests: list[str] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    async def _serve(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.requests.append(name)
        if name not in self.files:
            return web.Response(status=404)
        media_type, body = self.files[name]
        return web.Response(body=body, content_type=media_type)

    async def __aenter__(self) -> FileServer:
        app = web.Application()
        app.router.add_get("/{name}", self._serve)
        self._runner, self.port = await serve(app)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
