"""``POST /v1/chat/completions`` (``web.openai_api``): botd's agent behind OpenAI's chat API.

The request is OpenAI's. botd keeps each conversation's history itself, so only the **last**
message is read, and it must be the user's: its text (a string, or the ``text`` parts of a
list) is the turn's message; earlier messages (a client's own copy of the history, its
system prompt) are ignored. ``model`` is echoed back and otherwise ignored: the
conversation's configured model answers. The conversation is named by the header
``X-Botd-Conversation`` or else the ``user`` field (an id as the page's: 8 to 64 letters,
digits, ``_`` or ``-``), and is the web channel's chat ``api-<id>`` (``web:api-<id>``).

The message goes through the router and the inbox like the page's; the answer is what the
run posts to that chat after it (every bot message up to the next user message, joined by
a blank line), once the run that takes the message is over: the run under way when it
arrived first, if there was one (a message arriving meanwhile waits for the next run). With
``stream: true`` the answer comes as ``chat.completion.chunk`` events as it grows (a
delta whenever the answer so far extends what was sent), then ``data: [DONE]``.

A text starting with ``/`` and a letter is a chat command (``/new``, ``/stop``): no run
answers it, so it is refused here. Errors are OpenAI's shape: ``{"error": {"message",
"type"}}``. One request at a time per conversation: two at once are answered as one run.

It is for programs, never for a page: a request a browser makes (one with an ``Origin`` or
``Sec-Fetch-Site`` header) is refused, and so is a body not sent as ``application/json``
(which a cross-site form can send without asking), so no web site can make the agent run
through a browser on the operator's machine. The page's own guard (token, host) still
applies; its write check (the page's ``X-Botd-Console`` header) does not, since SDKs cannot
send it.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass

from aiohttp import web

from .adapter import Conversation, NotTaken
from .routes import (
    HEARTBEAT,
    NOT_RUNNING,
    BadRequest,
    ChatRoute,
    WebChannel,
    conversation_id,
    dumps,
    json_body,
)
from .routes import message_text as checked_text

__all__ = ["API_CHAT_PREFIX", "CONVERSATION_HEADER", "openai_routes"]

CONVERSATION_HEADER = "X-Botd-Conversation"
API_CHAT_PREFIX = "api-"
"""The chat id of an API conversation is this and the id the client named."""
_COMMAND = re.compile(r"/[A-Za-z]")


def _error(message: str, status: int = 400, kind: str = "invalid_request_error") -> web.Response:
    return web.Response(
        text=dumps({"error": {"message": message, "type": kind, "param": None, "code": None}}),
        status=status,
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def _last_user_text(messages: object) -> str:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        raise BadRequest("the last message must be the user's (botd keeps the history itself)")
    content = last.get("content")
    if isinstance(content, list):
        parts = [
            part.get("text")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        ]
        if not all(isinstance(part, str) for part in parts):
            raise BadRequest("a text part's text must be a string")
        content = "\n".join(str(part) for part in parts)
    text = checked_text(content)
    if _COMMAND.match(text.lstrip()):
        raise BadRequest("chat commands (a text starting with '/') are not taken here")
    return text


def _answer(conversation: Conversation, message_id: str) -> str:
    """What the bot posted after the user's message ``message_id``, up to the next one."""
    texts: list[str] = []
    after = False
    for message in conversation.messages.values():
        if message.id == message_id:
            after = True
        elif after and message.role == "user":
            break
        elif after and not message.status:
            texts.append(message.text.strip())
    return "\n\n".join(text for text in texts if text)


class _Turn:
    """One request's message in its conversation, and whether its run is over."""

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation
        # The run under way now, if any, ends first; then the one that takes the message.
        self._until = conversation.runs_over + (2 if conversation.running else 1)

    @property
    def over(self) -> bool:
        return self.conversation.runs_over >= self._until

    async def changed(self, event: asyncio.Event, wait: float) -> None:
        """Until ``event`` (the conversation's next change) or ``wait`` seconds."""
        try:
            async with asyncio.timeout(wait):
                await event.wait()
        except TimeoutError:
            return


@dataclass(frozen=True, slots=True)
class _Answering:
    """One completion's id, model and time, and its answer in OpenAI's shapes."""

    ident: str
    model: str
    created: int

    def completion(self, content: str) -> web.Response:
        completion = {
            "id": self.ident,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
        }
        return web.Response(
            text=dumps(completion),
            content_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    def chunk(self, delta: dict[str, str], finish: str | None = None) -> bytes:
        chunk = {
            "id": self.ident,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {dumps(chunk)}\n\n".encode()


def openai_routes(channel: WebChannel, *, heartbeat: float = HEARTBEAT) -> list[ChatRoute]:
    """``POST /v1/chat/completions`` answered in the conversations of the web channel
    ``channel()`` returns when asked (503 when none runs)."""

    async def completions(request: web.Request) -> web.StreamResponse:
        if request.content_type != "application/json":
            return _error("the body must be JSON, sent as application/json", 415)
        if "Origin" in request.headers or "Sec-Fetch-Site" in request.headers:
            return _error("this endpoint is for programs, not for pages in a browser", 403)
        try:
            body = await json_body(request)
            text = _last_user_text(body.get("messages"))
            named = request.headers.get(CONVERSATION_HEADER) or body.get("user")
            if named is None:
                raise BadRequest(
                    f"name the conversation: the {CONVERSATION_HEADER} header or the user field"
                )
            chat = API_CHAT_PREFIX + conversation_id(named, "the conversation")
            model = body.get("model")
            if not isinstance(model, str):
                raise BadRequest("model must be a string")
            stream = body.get("stream", False) is True
        except BadRequest as exc:
            return _error(str(exc))
        adapter = channel()
        if adapter is None:
            return _error(NOT_RUNNING, 503, "server_error")
        async with adapter.held(chat) as conversation:
            turn = _Turn(conversation)
            try:
                message_id = await adapter.submit(chat, text)
            except NotTaken as exc:
                return _error(str(exc), 503, "server_error")
            answering = _Answering(f"chatcmpl-{message_id}", model, int(time.time()))
            if not stream:
                while not turn.over:
                    await turn.changed(conversation.changed(), heartbeat)
                return answering.completion(_answer(conversation, message_id))
            response = web.StreamResponse(
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
            )
            await response.prepare(request)
            try:
                await response.write(answering.chunk({"role": "assistant", "content": ""}))
                sent = ""
                while True:
                    changed = conversation.changed()
                    over = turn.over
                    answer = _answer(conversation, message_id)
                    if answer.startswith(sent) and len(answer) > len(sent):
                        await response.write(answering.chunk({"content": answer[len(sent) :]}))
                        sent = answer
                    if over:
                        break
                    await turn.changed(changed, heartbeat)
                    if not changed.is_set():
                        await response.write(b": waiting\n\n")
                await response.write(answering.chunk({}, "stop"))
                await response.write(b"data: [DONE]\n\n")
            except ConnectionError:  # the client went away; the run goes on
                pass
            return response

    # Not a page's write (no X-Botd-Console header from an SDK): it refuses browsers itself.
    return [("POST", "/v1/chat/completions", completions, False)]
