"""A loopback HTTP server of a few files, for what botd fetches (``MEDIA:`` URLs).

    async with FileServer({"cat.png": ("image/png", data)}) as server:
        server.url("cat.png")   # http://127.0.0.1:<port>/cat.png
        server.requests         # the names asked for, in order

A name it does not hold answers 404. ``encodings`` (name -> ``Content-Encoding``) serves a
file's bytes as they are with that header (a compressed body, or a hostile one);
``accept_encodings`` lists the ``Accept-Encoding`` of each request.
"""

from __future__ import annotations

from aiohttp import web

from .loopback import serve


class FileServer:
    """A loopback HTTP server of a few files (name -> (media type, bytes)); counts requests."""

    def __init__(
        self, files: dict[str, tuple[str, bytes]], encodings: dict[str, str] | None = None
    ) -> None:
        self.files = files
        self.encodings = dict(encodings or {})
        self.requests: list[str] = []
        self.accept_encodings: list[str] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    async def _serve(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.requests.append(name)
        self.accept_encodings.append(request.headers.get("Accept-Encoding", ""))
        if name not in self.files:
            return web.Response(status=404)
        media_type, body = self.files[name]
        encoding = self.encodings.get(name)
        headers = {"Content-Encoding": encoding} if encoding is not None else {}
        return web.Response(body=body, content_type=media_type, headers=headers)

    async def __aenter__(self) -> FileServer:
        app = web.Application()
        app.router.add_get("/{name}", self._serve)
        self._runner, self.port = await serve(app)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
