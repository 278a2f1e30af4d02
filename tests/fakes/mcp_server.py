"""A small MCP server for the tests, on the MCP SDK's own server side.

Run as a script it serves over stdio (``python tests/fakes/mcp_server.py``), or over
streamable HTTP with ``--http PORT`` (on 127.0.0.1, path ``/mcp``); ``--token T`` then
refuses every request without ``Authorization: Bearer T``. Its tools:

- ``echo(text)``: the text back; ``add(a, b)``: the sum, as text;
- ``image()``: a tiny PNG as an image block, after a line of text;
- ``fail(why)``: raises, so the SDK answers an error result (``isError``);
- ``crash()``: the process exits at once, mid-call;
- ``sleep(seconds)``: answers after that long (with ``FAKE_MCP_SLEEPING`` set, it first
  appends a line to that file, so a test knows the call reached the server);
- ``env(name)``: the server's environment variable ``name`` (or ``unset``).

With ``FAKE_MCP_PIDFILE`` set, each process appends its pid to that file on start, so a
test can check that no server process outlives the daemon. ``FAKE_MCP_STDERR`` is written to
stderr on start, as servers write their banners. Misbehaving on request (stdio only):

- ``FAKE_MCP_CHILD_PIDFILE``: start a child process (``sleep 1000``) and append its pid
  to that file, as a server starts helpers of its own;
- ``FAKE_MCP_IGNORE_EOF``: keep running once stdin has ended (until a signal ends it);
- ``FAKE_MCP_BAD_TOOL``: list one more tool, ``broken``, whose input schema on the wire is
  ``{"type": "string"}`` (the SDK's server side refuses to send that, so its output is
  rewritten on the way out).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from mcp.server.mcpserver import Image, MCPServer
from mcp.types import ImageContent, TextContent

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
"""A 1x1 PNG."""

server = MCPServer("botd-test-server")


@server.tool(description="Say the text back.")
def echo(text: str) -> str:
    return f"echo: {text}"


@server.tool(description="Add two numbers.")
def add(a: float, b: float) -> str:
    return f"{a + b:g}"


@server.tool(description="A picture.")
def image() -> list[TextContent | ImageContent]:
    return [
        TextContent(type="text", text="a 1x1 picture:"),
        Image(data=PNG, format="png").to_image_content(),
    ]


@server.tool(description="Always fails.")
def fail(why: str = "asked to fail") -> str:
    raise RuntimeError(why)


@server.tool(description="Ends the server process at once.")
def crash() -> str:
    os._exit(3)


@server.tool(description="Answers after a while.")
async def sleep(seconds: float) -> str:
    sleeping = os.environ.get("FAKE_MCP_SLEEPING")
    if sleeping:
        with open(sleeping, "a", encoding="utf-8") as handle:
            handle.write(f"{seconds}\n")
    await asyncio.sleep(seconds)
    return "awake"


@server.tool(description="An environment variable of the server.")
def env(name: str) -> str:
    return os.environ.get(name, "unset")


def broken(text: str) -> str:
    return f"broken: {text}"


def _break_listings() -> None:
    """From now on the process's stdout passes through a thread that gives the tool
    ``broken`` the input schema ``{"type": "string"}`` in every listing."""
    wire = os.dup(1)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 1)
    os.close(write_end)

    def relay() -> None:
        with os.fdopen(read_end, "rb") as source, os.fdopen(wire, "wb", buffering=0) as sink:
            for line in source:
                try:
                    message = json.loads(line)
                    for tool in message.get("result", {}).get("tools", []):
                        if tool.get("name") == "broken":
                            tool["inputSchema"] = {"type": "string"}
                    line = json.dumps(message).encode() + b"\n"
                except (ValueError, AttributeError):
                    pass  # not a JSON-RPC message: as it was
                sink.write(line)

    threading.Thread(target=relay, name="break-listings", daemon=True).start()


def _start_child(pidfile: str) -> None:
    child = subprocess.Popen(["sleep", "1000"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    with open(pidfile, "a", encoding="utf-8") as handle:
        handle.write(f"{child.pid}\n")


def _require_token(app: Any, token: str) -> Any:
    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"no token"})
                return
        await app(scope, receive, send)

    return guarded


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None)
    parser.add_argument("--token", default=None)
    args = parser.parse_args()
    pidfile = os.environ.get("FAKE_MCP_PIDFILE")
    if pidfile:
        with open(pidfile, "a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()}\n")
    banner = os.environ.get("FAKE_MCP_STDERR")
    if banner:
        print(banner, flush=True, file=sys.stderr)
    if args.http is None:
        children = os.environ.get("FAKE_MCP_CHILD_PIDFILE")
        if children:
            _start_child(children)
        if os.environ.get("FAKE_MCP_BAD_TOOL"):
            server.add_tool(broken, description="Listed with a schema that is not an object.")
            _break_listings()
        server.run()
        while os.environ.get("FAKE_MCP_IGNORE_EOF"):
            time.sleep(3600)
        return
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")
    if args.token:
        app = _require_token(app, args.token)
    # Listen before saying so: a client that connects at once is queued, not refused.
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.http))
    listener.listen(64)
    print("serving", flush=True, file=sys.stderr)
    config = uvicorn.Config(app, log_level="warning")
    uvicorn.Server(config).run(sockets=[listener])


if __name__ == "__main__":
    main()
