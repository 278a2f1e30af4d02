"""A loopback fake of an OpenAI-compatible chat-completions API (``POST /v1/chat/completions``).

``GET /v1/models`` lists ``models`` (a 401 when ``api_key`` is set and not sent).

Each request takes the next scripted reply from a queue: a ``ChatStream`` (server-sent events
built chunk by chunk: text, reasoning, tool calls with arguments split over chunks, finish reason,
usage, an error chunk, a dropped connection, a delay between chunks) or an ``ErrorReply`` (a status
with headers and a JSON or text body). Every request is recorded with its headers and JSON body.
A stream the client closes before its last frame sets ``stream_closed_early``.

Like OpenAI, the fake refuses a request holding an image it cannot take before any scripted
reply is used: HTTP 400 ``{"error": {"message": "Invalid image.", "type":
"invalid_request_error", "param": null, "code": "invalid_image"}}`` for a data-URL image whose
header claims more than ``max_image_side`` pixels on a side (an unreadable header is let
through, see ``image_headers``). The error names no place, as OpenAI's does not. With
``context_tokens`` set (the model's context window), a request estimated over it (characters
/ 4 of its messages and tools) gets OpenAI's HTTP 400 ``context_length_exceeded``: "This
model's maximum context length is … tokens. However, your messages resulted in … tokens.
Please reduce the length of the messages."

    async with FakeOpenAI() as fake:
        fake.enqueue(ChatStream().text("Hel", "lo").finish("stop").usage(12, 3))
        provider = OpenAIProvider(base_url=fake.base_url)

``POST /v1/audio/transcriptions`` (multipart ``model`` and ``file``, as OpenAI's API takes
them) answers ``{"text": transcript}``; every upload is recorded in ``transcriptions``, and
``fail_transcriptions`` answers the next ones with an error status instead.

``POST /v1/audio/speech`` (JSON ``model``, ``voice``, ``input``, ``response_format``, as
OpenAI's API takes them) answers ``speech_audio`` as ``audio/ogg``: by default a small valid
Ogg Opus stream (``ogg_opus.silence``); only ``opus`` is spoken. Every request is recorded in
``speeches``, and ``fail_speech`` answers the next ones with an error status and OpenAI's
error body instead.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

from .image_headers import base64_image_size
from .loopback import serve
from .ogg_opus import silence

INVALID_IMAGE = {
    "error": {
        "message": "Invalid image.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_image",
    }
}
"""OpenAI's answer to an image it cannot take."""


def context_length_exceeded(maximum: int, tokens: int) -> dict[str, Any]:
    """OpenAI's answer to a request longer than the model's context window."""
    return {
        "error": {
            "message": (
                f"This model's maximum context length is {maximum} tokens. However, your "
                f"messages resulted in {tokens} tokens. Please reduce the length of the messages."
            ),
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


def too_large_image(body: Any, max_side: int) -> bool:
    """Whether the request ``body`` holds a data-URL image over ``max_side`` pixels a side."""
    messages = body.get("messages") if isinstance(body, dict) else None
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            image = part.get("image_url") if isinstance(part, dict) else None
            url = image.get("url") if isinstance(image, dict) else None
            if not isinstance(url, str) or ";base64," not in url:
                continue
            size = base64_image_size(url.partition(";base64,")[2])
            if size is not None and max(size) > max_side:
                return True
    return False


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    """Header names in lower case."""
    body: Any


@dataclass(frozen=True)
class Transcription:
    """One upload to ``/audio/transcriptions``."""

    model: str
    filename: str
    content_type: str
    data: bytes
    authorization: str


@dataclass(frozen=True)
class Speech:
    """One request to ``/audio/speech``."""

    body: dict[str, Any]
    authorization: str


@dataclass
class ErrorReply:
    """An HTTP error: ``body`` is sent as JSON when it is a dict, as plain text otherwise."""

    status: int
    body: dict[str, Any] | str = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


class ChatStream:
    """A scripted ``text/event-stream`` reply; each builder method appends frames, returns self."""

    def __init__(self, model: str = "fake-model", *, completion_id: str = "chatcmpl-fake") -> None:
        self.model = model
        self.completion_id = completion_id
        self.frames: list[str] = []
        self.delay = 0.0
        self.drop = False
        self.send_done = True
        self.hang = False

    # -- chunks -------------------------------------------------------------------------

    def chunk(
        self,
        delta: dict[str, Any] | None = None,
        *,
        finish_reason: str | None = None,
        usage: dict[str, Any] | None = None,
        with_choice: bool = True,
    ) -> ChatStream:
        """One ``chat.completion.chunk`` (the other methods are shorthands for this)."""
        payload: dict[str, Any] = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": self.model,
            "choices": [],
        }
        if with_choice:
            payload["choices"] = [
                {"index": 0, "delta": delta or {}, "finish_reason": finish_reason}
            ]
        if usage is not None:
            payload["usage"] = usage
        return self.data(json.dumps(payload))

    def role(self) -> ChatStream:
        """The opening chunk real servers send: a role and empty content."""
        return self.chunk({"role": "assistant", "content": ""})

    def text(self, *parts: str) -> ChatStream:
        for part in parts:
            self.chunk({"content": part})
        return self

    def reasoning(self, *parts: str, key: str = "reasoning_content") -> ChatStream:
        """Reasoning chunks under ``key`` (``reasoning_content``, or ``reasoning``)."""
        for part in parts:
            self.chunk({"content": None, key: part})
        return self

    def tool_call(
        self, call_id: str, name: str, *argument_parts: str, index: int = 0
    ) -> ChatStream:
        """A tool call as OpenAI streams it: id and name first, then argument fragments."""
        self.chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }
                ]
            }
        )
        for part in argument_parts:
            self.chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
        return self

    def finish(self, reason: str) -> ChatStream:
        return self.chunk({}, finish_reason=reason)

    def usage(self, prompt_tokens: int, completion_tokens: int) -> ChatStream:
        """The usage chunk ``stream_options.include_usage`` asks for (no choices)."""
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        return self.chunk(usage=usage, with_choice=False)

    def error(self, message: str, *, code: int | str | None = None) -> ChatStream:
        """An error object in the stream, as OpenRouter and vLLM send one mid-stream."""
        error: dict[str, Any] = {"message": message, "type": "server_error"}
        if code is not None:
            error["code"] = code
        return self.data(json.dumps({"error": error}))

    # -- raw frames and faults ------------------------------------------------------------

    def data(self, payload: str) -> ChatStream:
        """One event whose data is ``payload`` (several ``data:`` lines if it has newlines)."""
        lines = "".join(f"data: {line}\n" for line in payload.split("\n"))
        return self.frame(lines + "\n")

    def comment(self, text: str = "keepalive") -> ChatStream:
        return self.frame(f": {text}\n\n")

    def frame(self, raw: str) -> ChatStream:
        """Text written to the stream as it is."""
        self.frames.append(raw)
        return self

    def slow(self, delay: float) -> ChatStream:
        """Wait ``delay`` seconds before each frame."""
        self.delay = delay
        return self

    def drop_connection(self) -> ChatStream:
        """Cut the connection after the frames, without ``[DONE]`` or the end of the body."""
        self.drop = True
        return self

    def then_hang(self) -> ChatStream:
        """After the frames send nothing at all (no ``[DONE]``, no keep-alive) until the
        client goes away: a model stream gone silent."""
        self.hang = True
        return self

    def without_done(self) -> ChatStream:
        """End the body normally but without ``data: [DONE]``."""
        self.send_done = False
        return self


Reply = ChatStream | ErrorReply


class FakeOpenAI:
    """The fake server; use as ``async with FakeOpenAI() as fake`` and read ``fake.base_url``."""

    def __init__(
        self, *, api_key: str | None = None, models: tuple[str, ...] = ("fake-model",)
    ) -> None:
        self.api_key = api_key
        """When set, ``GET /v1/models`` without ``Bearer <api_key>`` gets a 401."""
        self.models = models
        """What ``GET /v1/models`` lists."""
        self.requests: list[RecordedRequest] = []
        self.stream_closed_early = asyncio.Event()
        self._replies: list[Reply] = []
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.transcript = "this is the transcript"
        """What ``/audio/transcriptions`` answers."""
        self.transcriptions: list[Transcription] = []
        self._transcription_failures: list[int] = []
        self.speech_audio = silence()
        """What ``/audio/speech`` answers: Ogg Opus audio."""
        self.speeches: list[Speech] = []
        self._speech_failures: list[int] = []
        self.max_image_side = 8000
        """Pixels on a side beyond which an image is refused."""
        self.refusals = 0
        """Requests refused for an image."""
        self.context_tokens: int | None = None
        """The model's context window (None: no limit); see the module docstring."""
        self.too_long = 0
        """Requests refused as longer than ``context_tokens``."""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def enqueue(self, *replies: Reply) -> None:
        """Script the next replies, one per request, in order."""
        self._replies.extend(replies)

    @property
    def pending(self) -> int:
        """Scripted replies no request has taken yet."""
        return len(self._replies)

    async def __aenter__(self) -> FakeOpenAI:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/audio/speech", self._speak)
        self._runner, self.port = await serve(app, access_log=None, shutdown_timeout=1.0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def fail_transcriptions(self, status: int = 500, *, times: int = 1) -> None:
        """Answer the next ``times`` transcription requests with HTTP ``status``."""
        self._transcription_failures.extend([status] * times)

    def fail_speech(self, status: int = 500, *, times: int = 1) -> None:
        """Answer the next ``times`` speech requests with HTTP ``status``."""
        self._speech_failures.extend([status] * times)

    async def _speak(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            error = {"message": "We could not parse the JSON body", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=400)
        self.speeches.append(Speech(body, request.headers.get("Authorization", "")))
        if self._speech_failures:
            status = self._speech_failures.pop(0)
            error = {
                "message": "The server had an error while processing your request.",
                "type": "server_error",
            }
            return web.json_response({"error": error}, status=status)
        if self.api_key is not None and request.headers.get("Authorization") != (
            f"Bearer {self.api_key}"
        ):
            error = {"message": "Incorrect API key provided", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=401)
        missing = [key for key in ("model", "voice", "input") if not body.get(key)]
        if missing:
            error = {"message": f"{missing[0]} is required", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=400)
        if body.get("response_format", "mp3") != "opus":
            error = {"message": "the fake speaks opus only", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=400)
        return web.Response(body=self.speech_audio, content_type="audio/ogg")

    async def _transcribe(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form.get("file")
        model = form.get("model")
        if not isinstance(upload, web.FileField) or not isinstance(model, str):
            error = {"message": "file and model are required", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=400)
        self.transcriptions.append(
            Transcription(
                model=model,
                filename=upload.filename,
                content_type=upload.content_type,
                data=upload.file.read(),
                authorization=request.headers.get("Authorization", ""),
            )
        )
        if self._transcription_failures:
            status = self._transcription_failures.pop(0)
            error = {"message": "The server had an error", "type": "server_error"}
            return web.json_response({"error": error}, status=status)
        if self.api_key is not None and request.headers.get("Authorization") != (
            f"Bearer {self.api_key}"
        ):
            error = {"message": "Incorrect API key provided", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=401)
        return web.json_response({"text": self.transcript})

    async def _models(self, request: web.Request) -> web.Response:
        if self.api_key is not None and request.headers.get("Authorization") != (
            f"Bearer {self.api_key}"
        ):
            error = {"message": "Incorrect API key provided", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=401)
        data = [{"id": name, "object": "model", "owned_by": "fake"} for name in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {name.lower(): value for name, value in request.headers.items()}
        self.requests.append(RecordedRequest(request.path, headers, body))
        if too_large_image(body, self.max_image_side):
            self.refusals += 1
            return web.json_response(INVALID_IMAGE, status=400)
        if self.context_tokens is not None and isinstance(body, dict):
            tokens = len(json.dumps([body.get("tools"), body.get("messages")])) // 4
            if tokens > self.context_tokens:
                self.too_long += 1
                return web.json_response(
                    context_length_exceeded(self.context_tokens, tokens), status=400
                )
        if not self._replies:
            return web.json_response(
                {"error": {"message": "fake: no scripted reply for this request"}}, status=418
            )
        reply = self._replies.pop(0)
        if isinstance(reply, ErrorReply):
            if isinstance(reply.body, dict):
                return web.json_response(reply.body, status=reply.status, headers=reply.headers)
            return web.Response(text=reply.body, status=reply.status, headers=reply.headers)
        return await self._stream(request, reply)

    HANG_LIMIT = 30.0
    """A hanging stream gives up after this many seconds, so a broken test cannot hang."""

    async def _hang(self, request: web.Request) -> None:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.HANG_LIMIT
        while loop.time() < give_up:
            transport = request.transport
            if transport is None or transport.is_closing():
                self.stream_closed_early.set()
                return
            await asyncio.sleep(0.01)

    async def _stream(self, request: web.Request, script: ChatStream) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        frames = list(script.frames)
        if script.send_done and not script.drop and not script.hang:
            frames.append("data: [DONE]\n\n")
        for frame in frames:
            if script.delay:
                await asyncio.sleep(script.delay)
            if request.transport is None or request.transport.is_closing():
                self.stream_closed_early.set()
                return response
            try:
                await response.write(frame.encode())
            except ConnectionResetError:  # aiohttp's ClientConnectionResetError is one
                self.stream_closed_early.set()
                return response
        if script.hang:
            await self._hang(request)
            return response
        if script.drop:
            assert request.transport is not None
            request.transport.close()
            return response
        await response.write_eof()
        return response
