"""The chat's HTTP routes (``chat_routes``): post a message, read a conversation, follow it.

- ``POST /api/chat/messages`` with ``{"conversation": id, "text": str, "client_id": id?}``
  answers 202 ``{"id": <message id>}`` once the router took the message (the durable inbox).
  A ``client_id`` is the message's id: a retried POST with the same one is taken once, and
  answered with the same id.
- ``GET /api/chat/messages?conversation=id`` answers ``{"messages": [...]}``: the
  conversation as it stands now, each message ``{"id", "role", "text", "final"}``.
- ``GET /api/chat/events?conversation=id`` is a ``text/event-stream``: an ``event: message``
  with the same object at every post and edit (a growing answer is the same id again), an
  ``event: delete`` with ``{"id"}`` when a message goes (a tool's status line), and a comment
  every ``heartbeat`` seconds. A client that falls ``QUEUE_LIMIT`` events behind is dropped
  (its stream ends; the page reads the conversation again and follows anew).

Conversation ids are what ``CONVERSATION_ID`` allows. A refused request is a 400 with
``{"error": "<one line>"}``. JSON is written with ``<``, ``>`` and ``&`` escaped, so no text a
user or the model wrote can read as markup, whatever a client makes of the body.

No guard here: the page's (``botd.web``) registers these routes behind its token, host and
origin checks (``writes``: whether a route changes anything), with
``chat_routes(lambda: web_channel(runtime.adapters))``: the routes find the web channel
running when a request comes (a 503 when there is none), so they may be served before it
starts and across a restart of it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ...config.schema import WEB_CHANNEL
from ...http.event_stream import follow
from ..base import ChannelAdapter
from .adapter import Event, NotTaken, WebChatAdapter
from .targets import CONVERSATION_ID

if TYPE_CHECKING:
    from ...http.routes import Handler

__all__ = ["HEARTBEAT", "MAX_TEXT_BYTES", "BadRequest", "ChatRoute", "chat_routes", "dumps"]

MAX_TEXT_BYTES = 64 * 1024
"""The longest message the page may post (UTF-8)."""
HEARTBEAT = 15.0
"""Seconds between two comments on an idle event stream (proxies keep it open)."""

ChatRoute = tuple[str, str, "Handler", bool]
"""(method, path, handler, writes)."""
WebChannel = Callable[[], WebChatAdapter | None]
"""The web channel running now, if any (``web_channel`` of the runtime's adapters)."""
NOT_RUNNING = "the web chat is not running"


class BadRequest(ValueError):
    """A request refused, with the one line its client is told."""


def dumps(value: object) -> str:
    """``value`` as JSON that holds no ``<``, ``>`` or ``&`` (escaped as ``\\u003c`` …)."""
    text = json.dumps(value)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def json_response(value: object, status: int = 200) -> web.Response:
    return web.Response(
        text=dumps(value),
        status=status,
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def refused(why: str, status: int = 400) -> web.Response:
    return json_response({"error": why}, status)


def conversation_id(value: object, what: str = "conversation") -> str:
    """``value`` as a conversation id; ``BadRequest`` saying what is wrong otherwise."""
    if not isinstance(value, str) or not CONVERSATION_ID.fullmatch(value):
        raise BadRequest(f"{what} must be 8 to 64 letters, digits, '_' or '-'")
    return value


def message_text(value: object) -> str:
    """``value`` as a message's text; ``BadRequest`` saying what is wrong otherwise."""
    if not isinstance(value, str) or not value.strip():
        raise BadRequest("text must be a non-empty string")
    if "\x00" in value:
        raise BadRequest("text must not contain NUL characters")
    size = len(value.encode("utf-8", errors="surrogatepass"))
    if size > MAX_TEXT_BYTES:
        raise BadRequest(f"text is {size} bytes, over the {MAX_TEXT_BYTES // 1024} KiB limit")
    return value


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object; ``BadRequest`` if it is none."""
    try:
        body = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def encoded(event: Event) -> bytes:
    """One chat event as the stream writes it (its JSON escaped as ``dumps`` does)."""
    name, data = event
    return f"event: {name}\ndata: {dumps(data)}\n\n".encode()


def web_channel(adapters: Mapping[str, ChannelAdapter]) -> WebChatAdapter | None:
    """The running web channel among ``adapters`` (the runtime's live ones), if any."""
    adapter = adapters.get(WEB_CHANNEL)
    return adapter if isinstance(adapter, WebChatAdapter) else None


def chat_routes(channel: WebChannel, *, heartbeat: float = HEARTBEAT) -> list[ChatRoute]:
    """The chat's three routes, answered by the web channel ``channel()`` returns when asked
    (see the module docstring): the one running then, if any (503 when none is)."""

    async def post_message(request: web.Request) -> web.StreamResponse:
        try:
            body = await json_body(request)
            unknown = sorted(set(body) - {"conversation", "text", "client_id"})
            if unknown:
                raise BadRequest(f"unknown key {unknown[0]!r}: conversation, text, client_id")
            chat = conversation_id(body.get("conversation"))
            text = message_text(body.get("text"))
            client_id = body.get("client_id")
            if client_id is not None:
                client_id = conversation_id(client_id, "client_id")
        except BadRequest as exc:
            return refused(str(exc))
        adapter = channel()
        if adapter is None:
            return refused(NOT_RUNNING, 503)
        try:
            message_id = await adapter.submit(chat, text, client_id)
        except NotTaken as exc:
            return refused(str(exc), 503)
        return json_response({"id": message_id}, 202)

    def reading(request: web.Request) -> tuple[str, WebChatAdapter] | web.Response:
        """The conversation a read names and the channel answering it, or the refusal."""
        try:
            chat = conversation_id(request.query.get("conversation"))
        except BadRequest as exc:
            return refused(str(exc))
        adapter = channel()
        if adapter is None:
            return refused(NOT_RUNNING, 503)
        return chat, adapter

    async def get_messages(request: web.Request) -> web.StreamResponse:
        found = reading(request)
        if isinstance(found, web.Response):
            return found
        chat, adapter = found
        conversation = await adapter.conversation(chat)
        return json_response({"messages": conversation.snapshot()})

    async def events(request: web.Request) -> web.StreamResponse:
        found = reading(request)
        if isinstance(found, web.Response):
            return found
        chat, adapter = found
        async with adapter.subscribed(chat) as (_, subscriber):
            return await follow(
                request, subscriber, encoded, heartbeat=heartbeat, greeting=b": following\n\n"
            )

    return [
        ("POST", "/api/chat/messages", post_message, True),
        ("GET", "/api/chat/messages", get_messages, False),
        ("GET", "/api/chat/events", events, False),
    ]
