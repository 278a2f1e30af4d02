"""Transcript compaction: fold the older part of a long conversation into one summary message.

A transcript that outgrows ``budget_tokens`` is cut in two. The older part is summarized (by
a model, through ``summarizer_for``) and replaced by one user-role message starting with
``SUMMARY_HEADER``; the recent part, about ``keep_recent_tokens`` of it, is kept verbatim.

The cut never separates a tool call from its result: providers reject a ``tool_result``
whose ``tool_use`` is not in the conversation and an assistant ``tool_use`` left without its
result. So the kept part never starts with a tool result, and an assistant message that calls
tools stays on the same side as every one of its results.

Token counts are estimates: characters / 4 (a common rule of thumb for English text and JSON
with BPE tokenizers), a fixed cost per image (providers price images by pixels, which the
base64 length does not tell), and a small overhead per message. Compaction needs to know
"roughly too big", not an exact count, and a tokenizer per provider is not worth carrying.

When summarizing fails (no summarizer, an exception, an empty answer), compaction still
happens by truncation: the older part is dropped and the summary message only says how many
messages were dropped, so a conversation can always continue.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from ..events import ImageContent, Message, TextContent, ThinkingContent, ToolCallContent
from .types import AssistantResult, ModelRequest, Provider

log = logging.getLogger(__name__)

SUMMARY_HEADER = "[Summary of earlier conversation]"
CHARS_PER_TOKEN = 4
IMAGE_TOKENS = 1_600
"""Estimated cost of one image (about what a ~1.2 megapixel image costs on Anthropic)."""
MESSAGE_OVERHEAD_TOKENS = 4
"""Role markers and framing the provider adds around each message."""

Summarize = Callable[[list[Message]], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """A compacted transcript and what it replaced.

    ``messages`` is the new transcript: the summary message, then the kept messages (the last
    ``len(messages) - 1`` messages of the input, unchanged). ``compacted_count`` is how many of
    the input's first messages the summary replaces; ``Store.compact`` uses it to persist.
    """

    messages: list[Message]
    summary: str
    """The summary message's text (with the header)."""
    compacted_count: int
    summarized: bool
    """False when the older part was dropped without a summary (the truncation fallback)."""
    tokens_before: int
    tokens_after: int

    @property
    def kept(self) -> list[Message]:
        """The messages kept verbatim from the input."""
        return self.messages[1:]


# --- token estimate ---------------------------------------------------------------------------


def estimate_message_tokens(message: Message) -> int:
    """Estimated tokens of one message (see the module docstring for the rule)."""
    chars = 0
    images = 0
    for block in message.blocks():
        if isinstance(block, TextContent):
            chars += len(block.text)
        elif isinstance(block, ThinkingContent):
            chars += len(block.thinking)
        elif isinstance(block, ToolCallContent):
            chars += len(block.name) + len(json.dumps(block.arguments, ensure_ascii=False))
        elif isinstance(block, ImageContent):
            images += 1
    return MESSAGE_OVERHEAD_TOKENS + IMAGE_TOKENS * images + -(-chars // CHARS_PER_TOKEN)


def estimate_tokens(messages: Sequence[Message]) -> int:
    """Estimated tokens of a transcript."""
    return sum(estimate_message_tokens(message) for message in messages)


# --- where to cut -----------------------------------------------------------------------------


def _tool_call_ids(message: Message) -> list[str]:
    if message.role != "assistant":
        return []
    return [call.id for call in message.tool_calls()]


def valid_cut_points(messages: Sequence[Message]) -> list[int]:
    """Indices ``i`` (0 < i < len) where ``messages[i:]`` can be kept without breaking a pair.

    These are turn boundaries: the start of a user message or of an assistant response (one
    model turn: an assistant message and the results of its tool calls).
    A cut is invalid at a tool result, and anywhere between an assistant message with tool
    calls and the last of its results. Results are matched to calls by ``tool_call_id``.
    """
    count = len(messages)
    blocked = [False] * (count + 1)
    call_index: dict[str, int] = {}
    for index, message in enumerate(messages):
        if message.role == "tool_result":
            blocked[index] = True
            call_at = call_index.get(message.tool_call_id or "")
            if call_at is not None:
                # Cutting anywhere after the call and up to this result would split the pair.
                for between in range(call_at + 1, index + 1):
                    blocked[between] = True
        for call_id in _tool_call_ids(message):
            call_index[call_id] = index
    # An assistant message whose calls have no results yet (an aborted run) is a unit of its
    # own: nothing after it is blocked, so it can still be kept or summarized whole.
    return [index for index in range(1, count) if not blocked[index]]


def choose_cut(messages: Sequence[Message], keep_recent_tokens: int) -> int | None:
    """Where the kept part starts: the longest valid tail within ``keep_recent_tokens``.

    When even the shortest valid tail is larger, that tail is kept anyway (the latest turn is
    what the model needs most). None when no valid cut leaves something on both sides.
    """
    cuts = valid_cut_points(messages)
    if not cuts:
        return None
    tail_tokens = [0] * (len(messages) + 1)
    for index in range(len(messages) - 1, -1, -1):
        tail_tokens[index] = tail_tokens[index + 1] + estimate_message_tokens(messages[index])
    for cut in cuts:
        if tail_tokens[cut] <= keep_recent_tokens:
            return cut
    return cuts[-1]


# --- compaction -------------------------------------------------------------------------------


def summary_message(text: str) -> Message:
    """The user-role message that stands for the compacted part."""
    return Message(role="user", content=[TextContent(text=text)])


async def compact_transcript(
    messages: list[Message],
    *,
    budget_tokens: int,
    keep_recent_tokens: int,
    summarize: Summarize | None,
) -> CompactionResult | None:
    """Compact ``messages`` when their estimate exceeds ``budget_tokens``; None otherwise.

    None also when the transcript cannot be cut (a single message or a single tool exchange).
    Cancellation propagates; any other failure of ``summarize`` falls back to truncation.
    """
    tokens_before = estimate_tokens(messages)
    if tokens_before <= budget_tokens:
        return None
    cut = choose_cut(messages, keep_recent_tokens)
    if cut is None:
        log.warning(
            "transcript of %d messages (~%d tokens) is over budget but has no safe cut point",
            len(messages),
            tokens_before,
        )
        return None
    older, kept = messages[:cut], messages[cut:]

    summary_body: str | None = None
    if summarize is not None:
        try:
            summary_body = (await summarize(older)).strip() or None
            if summary_body is None:
                log.warning("summarizer returned an empty summary; truncating instead")
        except Exception as exc:  # CancelledError is a BaseException and passes through.
            log.warning("summarizing %d messages failed (%s); truncating instead", cut, exc)
    if summary_body is None:
        summary_body = (
            f"{cut} earlier {'message was' if cut == 1 else 'messages were'} dropped to fit "
            "the context window; no summary is available."
        )
        summarized = False
    else:
        summarized = True

    text = f"{SUMMARY_HEADER}\n{summary_body}"
    new_messages = [summary_message(text), *kept]
    return CompactionResult(
        messages=new_messages,
        summary=text,
        compacted_count=cut,
        summarized=summarized,
        tokens_before=tokens_before,
        tokens_after=estimate_tokens(new_messages),
    )


# --- model summarizer -------------------------------------------------------------------------

SUMMARY_SYSTEM_PROMPT = (
    "You write concise summaries of conversations between a user and an AI assistant, so the "
    "assistant can continue the conversation without the full history. Keep facts, names, "
    "numbers, identifiers, decisions, the user's preferences and any unfinished tasks or open "
    "questions. Leave out pleasantries. Write plain prose or short bullet points, no preamble."
)
MAX_BLOCK_CHARS = 2_000
"""Longest text kept from one block when rendering the transcript for the summarizer."""
MAX_TRANSCRIPT_CHARS = 200_000
"""Cap on the rendered transcript (oldest lines go first) so the request itself fits."""


class SummaryError(RuntimeError):
    """The provider did not produce a summary (an error result or no text)."""


def _clip(text: str, limit: int = MAX_BLOCK_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]} […{len(text) - limit} chars cut]"


def render_for_summary(messages: Sequence[Message]) -> str:
    """The transcript as plain text: the summarizer reads it, it does not continue it.

    Sending the raw messages would ask the model to answer the last one (and would need the
    tools declared); a rendered transcript inside one user message avoids both.
    """
    lines: list[str] = []
    for message in messages:
        for block in message.blocks():
            if isinstance(block, TextContent):
                speaker = {"user": "User", "assistant": "Assistant"}.get(message.role)
                if speaker is None:
                    speaker = f"Tool result ({message.tool_name or message.tool_call_id})"
                lines.append(f"{speaker}: {_clip(block.text)}")
            elif isinstance(block, ToolCallContent):
                arguments = json.dumps(block.arguments, ensure_ascii=False)
                lines.append(f"Assistant called tool {block.name}: {_clip(arguments)}")
            elif isinstance(block, ImageContent):
                lines.append(f"{message.role.capitalize()}: [image]")
            # Thinking is left out: it is the model's scratch work, not conversation content.
        if message.role == "tool_result" and message.is_error:
            lines.append("(that tool call failed)")
    total = 0
    start = len(lines)
    while start > 0 and total + len(lines[start - 1]) + 1 <= MAX_TRANSCRIPT_CHARS:
        start -= 1
        total += len(lines[start]) + 1
    if start > 0:
        lines = [f"[{start} earlier lines omitted]", *lines[start:]]
    return "\n".join(lines)


def summarizer_for(provider: Provider, model: str, *, max_tokens: int = 1_024) -> Summarize:
    """A ``summarize`` callable that asks ``provider`` for a summary with ``model``.

    Raises ``SummaryError`` when the provider ends with an error result, ends without a
    result, or answers with no text; ``compact_transcript`` then truncates instead.
    """

    async def summarize(messages: list[Message]) -> str:
        prompt = (
            "Summarize this conversation so far:\n\n<conversation>\n"
            f"{render_for_summary(messages)}\n</conversation>"
        )
        request = ModelRequest(
            model=model,
            messages=[Message(role="user", content=[TextContent(text=prompt)])],
            system=SUMMARY_SYSTEM_PROMPT,
            max_tokens=max_tokens,
        )
        result: AssistantResult | None = None
        async for item in provider.stream(request):
            if isinstance(item, AssistantResult):
                result = item
        if result is None:
            raise SummaryError(f"provider {provider.name!r} ended without a result")
        reply = result.message
        if reply.stop_reason == "error":
            raise SummaryError(
                f"provider {provider.name!r} failed: {reply.error_message or 'unknown error'}"
            )
        text = "".join(b.text for b in reply.blocks() if isinstance(b, TextContent)).strip()
        if not text:
            raise SummaryError(f"provider {provider.name!r} returned no summary text")
        return text

    return summarize
