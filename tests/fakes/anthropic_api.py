"""A loopback fake of the Anthropic Messages API (``POST /v1/messages``), on aiohttp.

Tests script the replies, one per request, in order, and read back what the client sent:

    async with FakeAnthropicAPI(api_key="sk-test") as fake:
        fake.push(http_error(529, "overloaded_error"), stream(text("Hello ", "world")))
        ...  # point the SDK at fake.base_url
        fake.requests[1].body["messages"]

A reply is either ``stream(...)``, a server-sent-event stream built from a few block
descriptions (``text``, ``thinking``, ``tool_use``) with the exact framing the real API uses
(message_start, ping, content_block_start/delta/stop, message_delta, message_stop; see
spec/testing.md section 2), optionally broken by an ``event: error`` frame, slowed down, or
left hanging until the client goes away; or ``http_error(...)``, an error status with the
API's JSON error body and any headers (``retry-after``). Every stream served is recorded as a
``ServedStream`` saying whether it was completed or closed by the client before the end.

Once the scripted replies are used up, ``responder`` (when set) makes the reply from the
request's body, so a load of concurrent conversations can each get their own answer:

    fake.responder = lambda body: stream(text(f"{len(body['messages'])} messages read."))

``hold`` makes every request from then on wait, unanswered, until the gate it returns is set
(a model that takes its time); ``let_through`` answers one held request before the others.
Without ``hold``, the responder is called with no wait after the request was recorded, so
``requests[-1]`` is the request it answers (its ``via``, when several processes share the
fake through ``node_url``).

Like the real API, the fake refuses a request holding an image it cannot take before any
scripted reply is used: HTTP 400 ``invalid_request_error`` naming the image's place, as in
"messages.0.content.1.image.source.base64.data: At least one of the image dimensions exceed
max allowed size: 8000 pixels" (``max_image_side``, read from the image's header) or
"….image.source.base64: image exceeds 5 MB maximum: … bytes > 5242880 bytes". An image
whose header it cannot read is let through (see ``image_headers``).

With ``context_tokens`` set (the model's context window), a request estimated over it
(characters / 4 of its system prompt, tools and messages as sent) is refused the same way,
in the API's words: HTTP 400 ``invalid_request_error`` "prompt is too long: 215000 tokens >
200000 maximum".
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .image_headers import base64_image_size
from .loopback import serve

# --- reply descriptions -----------------------------------------------------------------


@dataclass(frozen=True)
class TextBlock:
    chunks: tuple[str, ...]


@dataclass(frozen=True)
class ThinkingBlock:
    chunks: tuple[str, ...]
    signature: str


@dataclass(frozen=True)
class ToolUseBlock:
    id: str
    name: str
    json_pieces: tuple[str, ...]


Block = TextBlock | ThinkingBlock | ToolUseBlock


def text(*chunks: str) -> TextBlock:
    """A text block streamed as these ``text_delta`` chunks."""
    return TextBlock(chunks)


def thinking(*chunks: str, signature: str) -> ThinkingBlock:
    """A thinking block: ``thinking_delta`` chunks, then one ``signature_delta``."""
    return ThinkingBlock(chunks, signature)


def tool_use(tool_id: str, name: str, *json_pieces: str) -> ToolUseBlock:
    """A tool_use block whose input JSON arrives in these ``input_json_delta`` pieces."""
    return ToolUseBlock(tool_id, name, json_pieces)


@dataclass(frozen=True)
class StreamReply:
    blocks: tuple[Block, ...]
    stop_reason: str = "end_turn"
    usage: dict[str, int] = field(default_factory=dict)
    error: tuple[str, str] | None = None
    delay: float = 0.0
    stall: bool = False
    hang_after: int | None = None


@dataclass(frozen=True)
class ErrorReply:
    status: int
    error_type: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)


Reply = StreamReply | ErrorReply

DEFAULT_USAGE = {
    "input_tokens": 12,
    "output_tokens": 7,
    "cache_read_input_tokens": 0,
    "cache_creation_input_tokens": 0,
}


def stream(
    *blocks: Block,
    stop_reason: str = "end_turn",
    usage: dict[str, int] | None = None,
    error: tuple[str, str] | None = None,
    delay: float = 0.0,
    stall: bool = False,
    hang_after: int | None = None,
) -> StreamReply:
    """An HTTP 200 event stream of these blocks.

    ``usage``: input/cache counts go in message_start, ``output_tokens`` in message_delta.
    ``error=(type, message)``: after the blocks (the last one left open, as if cut off
    mid-block) send ``event: error`` and end, with no message_delta/message_stop.
    ``delay``: seconds between frames. ``stall``: after the scripted frames, keep the
    response open (pinging) until the client closes it or the fake shuts down.
    ``hang_after=n``: send the headers and the first ``n`` frames (message_start is frame 0,
    its ping frame 1, then each block's start, deltas and stop), then nothing at all, not
    even a ping, until the client goes away: a model stream gone silent.
    """
    return StreamReply(
        blocks,
        stop_reason,
        dict(usage or DEFAULT_USAGE),
        error,
        delay=delay,
        stall=stall,
        hang_after=hang_after,
    )


def http_error(
    status: int,
    error_type: str,
    message: str = "",
    headers: dict[str, str] | None = None,
) -> ErrorReply:
    """An error response with the API's body ``{"type":"error","error":{type,message}}``."""
    return ErrorReply(status, error_type, message or error_type, dict(headers or {}))


# --- what the fake saw --------------------------------------------------------------------


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: dict[str, Any]
    via: str = ""
    """The path prefix it came through (``node_url``; empty: ``base_url``)."""


@dataclass
class ServedStream:
    """One event stream the fake served, and how it ended."""

    request_index: int
    completed: bool = False
    """Every scripted frame was written and the response finished."""
    closed_by_client: bool = False
    """The client went away before the end."""
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    silent: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once a ``hang_after`` stream has written its frames and fell silent."""


# --- SSE frames ---------------------------------------------------------------------------


def _frame(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _block_frames(index: int, block: Block) -> tuple[list[bytes], bytes]:
    """(start and delta frames, stop frame) of one content block."""

    def delta(payload: dict[str, Any]) -> bytes:
        return _frame(
            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": payload}
        )

    if isinstance(block, TextBlock):
        start: dict[str, Any] = {"type": "text", "text": ""}
        deltas = [delta({"type": "text_delta", "text": c}) for c in block.chunks]
    elif isinstance(block, ThinkingBlock):
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [delta({"type": "thinking_delta", "thinking": c}) for c in block.chunks]
        deltas.append(delta({"type": "signature_delta", "signature": block.signature}))
    else:
        start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
        deltas = [delta({"type": "input_json_delta", "partial_json": p}) for p in block.json_pieces]
    frames = [
        _frame(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        ),
        *deltas,
    ]
    return frames, _frame("content_block_stop", {"type": "content_block_stop", "index": index})


def answers_by_prompt(answers: dict[str, str]) -> Callable[[dict[str, Any]], Reply]:
    """A ``responder`` that answers each request with the text of the first of ``answers``
    whose key the request's last message contains (conversations that run side by side ask
    the model in no given order, so scripted replies in a queue could cross)."""

    def respond(body: dict[str, Any]) -> Reply:
        last = json.dumps(body["messages"][-1])
        for key, answer in answers.items():
            if key in last:
                return stream(text(answer))
        raise AssertionError(f"no answer scripted for {last[:200]}")

    return respond


def stream_frames(reply: StreamReply, *, model: str, message_id: str) -> list[bytes]:
    """The whole scripted event stream of a ``StreamReply``, frame by frame."""
    start_usage = {k: v for k, v in reply.usage.items() if k != "output_tokens"}
    start_usage["output_tokens"] = 1
    frames = [
        _frame(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        ),
        _frame("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(reply.blocks):
        body, stop = _block_frames(index, block)
        frames.extend(body)
        last = index == len(reply.blocks) - 1
        if not (last and reply.error is not None):
            frames.append(stop)
    if reply.error is not None:
        error_type, message = reply.error
        frames.append(
            _frame("error", {"type": "error", "error": {"type": error_type, "message": message}})
        )
        return frames
    frames.append(
        _frame(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": reply.usage.get("output_tokens", 0)},
            },
        )
    )
    frames.append(_frame("message_stop", {"type": "message_stop"}))
    return frames


def _error_json(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


MAX_IMAGE_SIDE = 8000
"""Pixels an image may have on a side (Anthropic's documented limit)."""
MAX_IMAGE_BASE64 = 5 * 1024 * 1024
"""Characters of base64 an image may take (the API's 5 MB)."""


def image_refusal(body: dict[str, Any], max_side: int = MAX_IMAGE_SIDE) -> str | None:
    """The API's message refusing the first image of ``body`` it cannot take, or None."""
    messages = body.get("messages")
    for n, message in enumerate(messages if isinstance(messages, list) else []):
        content = message.get("content") if isinstance(message, dict) else None
        for m, block in enumerate(content if isinstance(content, list) else []):
            places = [(f"messages.{n}.content.{m}", block)]
            inner = block.get("content") if isinstance(block, dict) else None
            if isinstance(block, dict) and block.get("type") == "tool_result":
                places += [
                    (f"messages.{n}.content.{m}.tool_result.content.{k}", part)
                    for k, part in enumerate(inner if isinstance(inner, list) else [])
                ]
            for place, candidate in places:
                refusal = _image_refusal(place, candidate, max_side)
                if refusal is not None:
                    return refusal
    return None


def _image_refusal(place: str, block: Any, max_side: int) -> str | None:
    if not isinstance(block, dict) or block.get("type") != "image":
        return None
    source = block.get("source")
    data = source.get("data") if isinstance(source, dict) else None
    if not isinstance(data, str):
        return None
    if len(data) > MAX_IMAGE_BASE64:
        return (
            f"{place}.image.source.base64: image exceeds 5 MB maximum: "
            f"{len(data)} bytes > {MAX_IMAGE_BASE64} bytes"
        )
    size = base64_image_size(data)
    if size is not None and max(size) > max_side:
        return (
            f"{place}.image.source.base64.data: At least one of the image dimensions "
            f"exceed max allowed size: {max_side} pixels"
        )
    return None


def prompt_tokens(body: dict[str, Any]) -> int:
    """The fake's estimate of a request's prompt: characters / 4 of what the model reads."""
    read = [body.get("system"), body.get("tools"), body.get("messages")]
    return len(json.dumps(read, ensure_ascii=False)) // 4


# --- the server ---------------------------------------------------------------------------


def _model_info(model_id: str) -> dict[str, str]:
    return {"type": "model", "id": model_id, "display_name": model_id, "created_at": ""}


class FakeAnthropicAPI:
    """The fake server: ``async with`` starts it on 127.0.0.1 (a free port) and stops it."""

    STALL_LIMIT = 30.0
    """A stalled stream gives up after this many seconds, so a broken test cannot hang."""

    def __init__(self, *, api_key: str = "sk-test-key") -> None:
        self.api_key = api_key
        self.requests: list[RecordedRequest] = []
        self.streams: list[ServedStream] = []
        self._replies: list[Reply] = []
        self.responder: Callable[[dict[str, Any]], Reply] | None = None
        """The reply to a request once no scripted one is left (None: a 400)."""
        self.max_image_side = MAX_IMAGE_SIDE
        """Pixels on a side beyond which an image is refused (a model server may allow
        fewer than the API's 8000)."""
        self.refusals: list[str] = []
        """The image refusals sent, in order."""
        self.context_tokens: int | None = None
        """The model's context window (None: no limit); see the module docstring."""
        self.too_long: list[int] = []
        """The request indices refused as too long for ``context_tokens``, in order."""
        self.models: list[str] = ["claude-fake", "claude-sonnet-4-5-20250929"]
        """The ids ``GET /v1/models`` lists (dated ones, as the API lists them)."""
        self.aliases: dict[str, str] = {}
        """Other names ``GET /v1/models/{name}`` knows, to the listed id each stands for."""
        self._closing = asyncio.Event()
        self._gate: asyncio.Event | None = None
        self._let_through: dict[int, asyncio.Event] = {}
        """Held requests (by index) let through before their hold ends (``let_through``)."""
        self._runner: web.AppRunner | None = None
        self._port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def node_url(self, name: str) -> str:
        """A base URL serving the same API under the path prefix ``/name``: the requests
        made through it are recorded with ``via=name`` (which of several processes asked)."""
        return f"{self.base_url}/{name}"

    def push(self, *replies: Reply) -> None:
        """Queue replies; each request takes the next one."""
        self._replies.extend(replies)

    def hold(self) -> asyncio.Event:
        """From now on every request waits, unanswered, until the returned event is set (or
        the fake closes): a model that takes its time."""
        self._gate = asyncio.Event()
        return self._gate

    def let_through(self, index: int) -> None:
        """Answer the held request ``requests[index]`` (or that one once it comes) without
        waiting for its ``hold`` to end: one answer going before the others held with it."""
        self._let_through.setdefault(index, asyncio.Event()).set()

    @property
    def pending(self) -> int:
        """Scripted replies not yet used."""
        return len(self._replies)

    async def wait_silent(self, index: int = -1, timeout: float = 10.0) -> ServedStream:
        """The ``index``-th stream (waiting for it to be served), once it fell silent."""
        async with asyncio.timeout(timeout):
            while len(self.streams) <= (index if index >= 0 else 0):
                await asyncio.sleep(0.01)
            served = self.streams[index]
            await served.silent.wait()
        return served

    async def wait_stream_ended(self, index: int = -1, timeout: float = 10.0) -> ServedStream:
        """The ``index``-th served stream, once it has ended one way or the other."""
        served = self.streams[index]
        await asyncio.wait_for(served.ended.wait(), timeout)
        return served

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/{via}/v1/messages", self._messages)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/v1/models/{name}", self._model)
        self._runner, self._port = await serve(app, shutdown_timeout=1.0)

    async def close(self) -> None:
        self._closing.set()
        if self._gate is not None:
            self._gate.set()  # held requests end with the server
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeAnthropicAPI:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _authorized(self, request: web.Request) -> bool:
        bearer = request.headers.get("Authorization", "")
        return bearer == f"Bearer {self.api_key}" or request.headers.get("x-api-key") == (
            self.api_key
        )

    async def _models(self, request: web.Request) -> web.Response:
        """The models list (``models``, one page), or the API's 401 for a wrong key."""
        if not self._authorized(request):
            return web.json_response(
                _error_json("authentication_error", "invalid x-api-key"), status=401
            )
        data = [_model_info(model) for model in self.models]
        return web.json_response(
            {
                "data": data,
                "has_more": False,
                "first_id": self.models[0] if self.models else None,
                "last_id": self.models[-1] if self.models else None,
            }
        )

    async def _model(self, request: web.Request) -> web.Response:
        """One model by its id or an alias, or the API's 404."""
        if not self._authorized(request):
            return web.json_response(
                _error_json("authentication_error", "invalid x-api-key"), status=401
            )
        name = request.match_info["name"]
        found = name if name in self.models else self.aliases.get(name)
        if found is None:
            return web.json_response(_error_json("not_found_error", f"model: {name}"), status=404)
        return web.json_response(_model_info(found))

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            body = {}
        self.requests.append(
            RecordedRequest(
                method=request.method,
                path=request.path,
                headers={k.lower(): v for k, v in request.headers.items()},
                body=body if isinstance(body, dict) else {"_raw": body},
                via=request.match_info.get("via", ""),
            )
        )
        if not self._authorized(request):
            return web.json_response(
                _error_json("authentication_error", "invalid x-api-key"), status=401
            )
        if self._gate is not None:
            await self._held(len(self.requests) - 1, self._gate)
        refusal = image_refusal(body, self.max_image_side) if isinstance(body, dict) else None
        if refusal is not None:
            self.refusals.append(refusal)
            return web.json_response(_error_json("invalid_request_error", refusal), status=400)
        tokens = prompt_tokens(body) if isinstance(body, dict) else 0
        if self.context_tokens is not None and tokens > self.context_tokens:
            self.too_long.append(len(self.requests) - 1)
            message = f"prompt is too long: {tokens} tokens > {self.context_tokens} maximum"
            return web.json_response(_error_json("invalid_request_error", message), status=400)
        if self._replies:
            reply = self._replies.pop(0)
        elif self.responder is not None:
            reply = self.responder(body if isinstance(body, dict) else {})
        else:
            return web.json_response(
                _error_json("invalid_request_error", "fake: no scripted reply left"), status=400
            )
        if isinstance(reply, ErrorReply):
            return web.json_response(
                _error_json(reply.error_type, reply.message),
                status=reply.status,
                headers=reply.headers,
            )
        return await self._serve_stream(request, reply, model=str(body.get("model", "fake")))

    async def _held(self, index: int, gate: asyncio.Event) -> None:
        """Wait until ``gate`` is set or the request ``index`` is let through. Either done
        already, return without giving way: the responder then still finds the request it
        answers last in ``requests`` (nothing came in between), as without ``hold``."""
        own = self._let_through.get(index)
        if gate.is_set() or (own is not None and own.is_set()):
            return
        own = self._let_through.setdefault(index, asyncio.Event())
        waits = {asyncio.ensure_future(gate.wait()), asyncio.ensure_future(own.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    async def _serve_stream(
        self, request: web.Request, reply: StreamReply, *, model: str
    ) -> web.StreamResponse:
        served = ServedStream(request_index=len(self.requests) - 1)
        self.streams.append(served)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        frames = stream_frames(reply, model=model, message_id=f"msg_fake_{len(self.requests)}")
        try:
            await response.prepare(request)
            if reply.hang_after is not None:
                frames = frames[: reply.hang_after]
            for number, frame in enumerate(frames):
                if number and reply.delay:
                    await asyncio.sleep(reply.delay)
                await response.write(frame)
            if reply.hang_after is not None:
                served.silent.set()
                served.closed_by_client = await self._hang(request)
                return response
            if reply.stall:
                await self._stall(response, reply.delay or 0.02)
            await response.write_eof()
            served.completed = not reply.stall
        except ConnectionError:
            # aiohttp raises a ConnectionResetError subclass on writing to a closed transport.
            served.closed_by_client = True
        except asyncio.CancelledError:
            served.closed_by_client = True
            raise
        finally:
            served.ended.set()
        return response

    async def _hang(self, request: web.Request) -> bool:
        """Send nothing until the client closes the connection (True) or the fake gives up."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.STALL_LIMIT
        while not self._closing.is_set() and loop.time() < give_up:
            transport = request.transport
            if transport is None or transport.is_closing():
                return True
            await asyncio.sleep(0.01)
        return False

    async def _stall(self, response: web.StreamResponse, interval: float) -> None:
        """Keep a stream open, pinging so a client that left is noticed on the next write."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.STALL_LIMIT
        while not self._closing.is_set() and loop.time() < give_up:
            await asyncio.sleep(interval)
            await response.write(_frame("ping", {"type": "ping"}))
