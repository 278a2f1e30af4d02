"""``OpenAIProvider``: the request, its retries, and the reading of its reply.

A stream silent for ``idle_timeout`` seconds (not one byte; SSE keep-alive comments count as
life) fails with httpx's read timeout. Before any event reached the consumer it is retried
like a dropped connection; after, it is not (the chat has shown that text, and a new attempt
would answer from the start), and the turn ends with an error keeping what streamed. A call
that times out for good ends with ``NO_ANSWER_IN_TIME``, the one line the user is shown.

A 400 about an image (an image error ``code`` such as ``invalid_image`` or
``image_parse_error``, a ``param`` naming an ``image_url``, or words such as "Invalid image."
from servers that send only a message) ends with ``refused_images`` set: the image at the
``messages[N].content[M]`` the error names, or every image of the request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx

from ....net.proxy import httpx_options
from ....net.tls import verified_context
from ....ops.outages import Reachability
from ....retry import Backoff, retry_after, retry_wait
from ...types import AssistantResult, ModelRequest, ProviderItem
from ..waits import CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT, NO_ANSWER_IN_TIME, retry_backoff
from .assembly import Assembly, SSEDecoder, SSEEvent, first_choice
from .request import build_request_body, image_data, image_data_at

log = logging.getLogger(__name__)

_DETAIL_LIMIT = 1000
"""Characters of a non-JSON error body kept in an error message."""


class OpenAIProvider:
    """A ``Provider`` for an OpenAI-compatible ``/chat/completions`` endpoint."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        max_retries: int = 3,
        max_retry_wait: float = 60.0,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        extra_headers: dict[str, str] | None = None,
        name: str = "openai",
        health: Reachability | None = None,
        proxy: str | None = None,
    ) -> None:
        """``proxy``: ``model.proxy`` (a URL, ``direct``; None: the environment's, as httpx
        reads it)."""
        if idle_timeout <= 0:
            raise ValueError("idle_timeout must be positive")
        self.name = name
        self._health = health
        self._idle_timeout = idle_timeout
        self._base_url = base_url.rstrip("/")
        self._url = f"{self._base_url}/chat/completions"
        self._max_retries = max(0, max_retries)
        self._max_retry_wait = max(0.0, max_retry_wait)
        headers = {"Accept": "text/event-stream", **(extra_headers or {})}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        # The read timeout is the longest silence allowed before the response and between
        # two chunks of its stream.
        timeout = httpx.Timeout(idle_timeout, connect=min(idle_timeout, CONNECT_TIMEOUT))
        self._client = httpx.AsyncClient(
            headers=headers, timeout=timeout, verify=verified_context(), **httpx_options(proxy)
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderItem]:
        body = build_request_body(request)
        attempt = 0
        backoff = retry_backoff()
        while True:
            assembly = Assembly(model=request.model)
            failure = ""
            timed_out = False
            wait: float | None = None
            finished = False
            refused = frozenset[str]()
            outage = False  # the failure says the server is not answering
            try:
                async with self._client.stream("POST", self._url, json=body) as response:
                    if response.is_success:
                        async for item in self._read_stream(response, assembly):
                            finished = isinstance(item, AssistantResult)
                            if finished and self._health is not None:
                                self._answered(item)
                            yield item
                        return
                    reply = await response.aread()
                    detail = _error_detail(reply, response.reason_phrase)
                    failure = f"HTTP {response.status_code}: {detail}"
                    if response.status_code == 400:
                        refused = refused_images(_parse_json_body(reply), body)
                    outage = _is_outage(response.status_code)
                    if _is_retryable(response.status_code) and attempt < self._max_retries:
                        wait = self._retry_wait(backoff, response.headers)
            except httpx.TransportError as exc:
                if finished:  # closing the response failed after the result: nothing to add
                    return
                outage = True
                failure = self._describe_transport_error(exc, mid_stream=assembly.started)
                timed_out = isinstance(exc, httpx.TimeoutException)
                if not assembly.started and attempt < self._max_retries:
                    wait = self._retry_wait(backoff, None)
            except Exception as exc:
                if finished:
                    return
                # A surprise (a bug, an odd reply) must still end the turn with a result.
                log.exception("%s: unexpected failure while streaming", self.name)
                failure = f"unexpected error: {type(exc).__name__}: {exc}"

            if wait is not None:
                attempt += 1
                log.warning(
                    "%s: %s; retry %d of %d in %.1fs",
                    self.name,
                    failure,
                    attempt,
                    self._max_retries,
                    wait,
                )
                await asyncio.sleep(wait)
                continue
            if attempt:
                failure = f"{failure} (gave up after {attempt} retries)"
            log.warning("%s: request failed: %s", self.name, failure)
            if outage and self._health is not None:
                self._health.failed(failure)
            for event in assembly.close_after_failure():
                yield event
            shown = NO_ANSWER_IN_TIME if timed_out else failure
            yield AssistantResult(assembly.message("error", shown), refused)
            return

    def _answered(self, item: ProviderItem) -> None:
        """A reply came: unless it is an error (in the stream), the server answers."""
        assert self._health is not None and isinstance(item, AssistantResult)
        if item.message.stop_reason != "error":
            self._health.answered()

    async def _read_stream(
        self, response: httpx.Response, assembly: Assembly
    ) -> AsyncIterator[ProviderItem]:
        """Events for one successful response, ending with its ``AssistantResult``."""
        content_type = response.headers.get("content-type", "")
        if "text/event-stream" not in content_type:
            # A server that ignored ``stream: true`` (or reports an error with a 200).
            payload = _parse_json_body(await response.aread())
            if not _is_error_payload(payload) and first_choice(payload.get("choices")) is None:
                payload = {"error": f"a reply without choices: {_shorten(str(payload), 200)}"}
            async for item in self._apply_payload(payload, assembly, whole_reply=True):
                yield item
            if assembly.failed:
                return
        else:
            decoder = SSEDecoder()
            saw_done = False
            async for line in response.aiter_lines():
                sse = decoder.feed(line)
                if sse is None:
                    continue
                if sse.data.strip() == "[DONE]":
                    saw_done = True
                    break
                async for item in self._apply_sse(sse, assembly):
                    yield item
                if assembly.failed:
                    return
            if not saw_done and (sse := decoder.flush()) is not None:
                # Data after the last blank line: lenient servers end the stream that way.
                async for item in self._apply_sse(sse, assembly):
                    yield item
                if assembly.failed:
                    return
            if not saw_done and assembly.finish_reason is None:
                failure = "the stream ended before the model finished (no finish_reason)"
                log.warning("%s: %s", self.name, failure)
                for event in assembly.close_after_failure():
                    yield event
                yield AssistantResult(assembly.message("error", failure))
                return
        for event in assembly.close_open_block():
            yield event
        yield AssistantResult(assembly.message(assembly.stop_reason()))

    async def _apply_sse(self, sse: SSEEvent, assembly: Assembly) -> AsyncIterator[ProviderItem]:
        try:
            payload: Any = json.loads(sse.data)
        except ValueError:
            payload = None
        if sse.event == "error" and not _is_error_payload(payload):
            payload = {"error": payload if payload is not None else sse.data}
        if not isinstance(payload, dict):
            payload = {"error": f"unreadable stream data: {_shorten(sse.data, 200)}"}
        async for item in self._apply_payload(payload, assembly, whole_reply=False):
            yield item

    async def _apply_payload(
        self, payload: Any, assembly: Assembly, *, whole_reply: bool
    ) -> AsyncIterator[ProviderItem]:
        """Feed one decoded chunk (or a whole non-streamed reply); an error chunk ends the turn."""
        if _is_error_payload(payload):
            failure = _error_text(payload) or "the server reported an error"
            log.warning("%s: error in the stream: %s", self.name, failure)
            assembly.failed = True
            for event in assembly.close_after_failure():
                yield event
            yield AssistantResult(assembly.message("error", failure))
            return
        if not isinstance(payload, dict):
            return
        for event in assembly.apply(payload, whole_reply=whole_reply):
            yield event

    def _retry_wait(self, backoff: Backoff, headers: httpx.Headers | None) -> float:
        return retry_wait(backoff, retry_after(headers), max_wait=self._max_retry_wait)

    def _describe_transport_error(self, exc: httpx.TransportError, *, mid_stream: bool) -> str:
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.ConnectError):
            return f"cannot connect to {self._base_url}: {reason}"
        if isinstance(exc, httpx.TimeoutException):
            return (
                f"timed out waiting for {self._base_url} ({type(exc).__name__}: "
                f"silent for {self._idle_timeout:g} s, the idle timeout)"
            )
        if mid_stream:
            return f"the connection was lost mid-stream: {reason}"
        return f"the connection to {self._base_url} failed: {reason}"


# --- errors and retries ---------------------------------------------------------------------


def _is_retryable(status: int) -> bool:
    return status == 429 or 500 <= status <= 599


def _is_outage(status: int) -> bool:
    """Whether a failed call's status says the server is not answering (a 5xx, a rate
    limit, a refused key), rather than refusing this request."""
    return _is_retryable(status) or status in (401, 403)


def _is_error_payload(payload: Any) -> bool:
    return isinstance(payload, dict) and bool(payload.get("error"))


def _error_text(payload: Any) -> str | None:
    """The server's own description of an error, from the shapes compatible servers use."""
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str) and message:
            return message
        return json.dumps(error, ensure_ascii=False)
    if isinstance(error, str) and error:
        return error  # Ollama: {"error": "..."}
    for key in ("message", "detail"):
        value = payload.get(key)
        if isinstance(value, str) and value:
            return value
        if value:  # FastAPI-style validation errors (vLLM): a list of objects
            return json.dumps(value, ensure_ascii=False)
    return None


_IMAGE_CODES = frozenset(
    {
        "invalid_image",
        "invalid_image_format",
        "invalid_base64_image",
        "invalid_image_url",
        "invalid_image_mode",
        "image_too_large",
        "image_too_small",
        "image_parse_error",
        "image_file_too_large",
        "image_content_policy_violation",
        "unsupported_image_media_type",
        "empty_image_file",
    }
)
"""OpenAI's error codes for an image it cannot take."""
_NAMES_AN_IMAGE = re.compile(r"\bimages?\b|image_url", re.IGNORECASE)


def refused_images(payload: dict[str, Any], body: dict[str, Any]) -> frozenset[str]:
    """The images a 400 ``payload`` blames (``AssistantResult.refused_images``) in the
    request ``body``: the one at the ``messages[N].content[M]`` it names, else every image of
    the request; empty when the error is not about an image."""
    error = payload.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    param = error.get("param") if isinstance(error, dict) else None
    words = [text for text in (param, _error_text(payload)) if isinstance(text, str)]
    if code not in _IMAGE_CODES and not any(_NAMES_AN_IMAGE.search(text) for text in words):
        return frozenset()
    for text in words:
        located = image_data_at(body, text)
        if located is not None:
            return frozenset({located})
    return frozenset(image_data(body))


def _error_detail(body: bytes, reason: str) -> str:
    text = body.decode("utf-8", "replace").strip()
    try:
        message = _error_text(json.loads(text))
    except ValueError:
        message = None
    return message or _shorten(text, _DETAIL_LIMIT) or reason or "no details"


def _parse_json_body(body: bytes) -> dict[str, Any]:
    text = body.decode("utf-8", "replace").strip()
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        return payload
    return {"error": f"unreadable reply: {_shorten(text, 200) or 'empty body'}"}


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
