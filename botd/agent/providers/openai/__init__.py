"""A provider for any OpenAI-compatible chat-completions endpoint, over httpx with SSE streaming.

Ollama, vLLM, OpenRouter, LM Studio and OpenAI itself all speak ``POST {base_url}/chat/completions``
with ``stream: true``. This module maps botd's messages and tools to that wire format, reads the
server-sent events itself (no SDK), and turns the chunks into the provider stream described in
``botd.agent.types``:

- ``delta.content`` becomes ``text_start`` / ``text_delta`` / ``text_end``;
- ``delta.reasoning_content`` (or ``delta.reasoning``) becomes ``thinking_*`` events;
- ``delta.tool_calls[i]`` becomes ``toolcall_start`` (``content`` = tool name),
  ``toolcall_delta`` (``delta`` = a fragment of the JSON arguments) and ``toolcall_end``
  (``content`` = the whole arguments text);
- ``*_end`` events carry the block's complete text in ``content``; ``content_index`` is the
  block's position in the final message's ``content``.

The stream always ends with one ``AssistantResult``. Failures (an HTTP error, an error chunk in the
stream, a dropped connection) end it with ``stop_reason="error"`` and the server's own words in
``error_message``, keeping whatever had already streamed (except a tool call whose arguments were
cut off, which gets no ``toolcall_end`` and is left out). Requests that fail before anything was
streamed are retried on 429, 5xx and connection errors. Only cancellation is raised.

``ModelRequest.thinking_budget`` is not sent: the compatible servers disagree on how to ask for
reasoning, and those that reason do so by default (the reasoning they stream is still read).
"""

from .provider import OpenAIProvider
from .request import build_messages, build_request_body

__all__ = ["OpenAIProvider", "build_messages", "build_request_body"]
