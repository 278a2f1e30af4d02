"""The user-facing text and the reasoning of a finished assistant message.

Models leak several kinds of markup into their text: reasoning wrapped in ``<think>``-style
tags, ``<final>`` wrappers, MiniMax's tool-call XML, and the ``[Tool Call: …]`` /
``[Tool Result for ID …]`` markers a runtime writes when it turns tool history into plain text
for a model without tool support. ``extract_assistant_text`` removes all of that and tidies
the result for a chat user. The reasoning is found either in thinking blocks or in those
tags, and ``format_reasoning`` formats it for chat.

Tag patterns here are case-insensitive, allow whitespace inside the angle brackets and allow
attributes (``<think reason="x">``). Unlike the streaming strip (``botd.subscriber.tags``)
they are NOT code-span aware: they work on a whole finished message.
"""

from __future__ import annotations

import json
import re
from typing import Any

from botd.events import ImageContent, Message, TextContent, ThinkingContent, ToolCallContent

_THINK_NAMES = r"(?:think(?:ing)?|thought|antthinking)"
# A thinking tag, opening or closing (group 1 is "/" for a closing tag).
THINKING_TAG = re.compile(rf"<\s*(/?)\s*{_THINK_NAMES}(?=[\s/>])[^<>]*>", re.IGNORECASE)
THINKING_OPEN_TAG = re.compile(rf"<\s*{_THINK_NAMES}(?=[\s/>])[^<>]*>", re.IGNORECASE)
THINKING_CLOSE_TAG = re.compile(rf"<\s*/\s*{_THINK_NAMES}(?=[\s/>])[^<>]*>", re.IGNORECASE)
FINAL_TAG = re.compile(r"<\s*/?\s*final(?=[\s/>])[^<>]*>", re.IGNORECASE)
# Cheap test for "is there anything for the strict strip to do".
_ANY_REASONING_TAG = re.compile(rf"<\s*/?\s*(?:{_THINK_NAMES}|final)(?=[\s/>])", re.IGNORECASE)

_MINIMAX_INVOKE = re.compile(r"<invoke\b[^>]*>.*?</invoke\s*>", re.IGNORECASE | re.DOTALL)
_MINIMAX_WRAPPER = re.compile(r"</?\s*minimax:tool_call\s*>", re.IGNORECASE)

_TOOL_CALL_MARKER = re.compile(r"\[Tool Call:[^\]\n]*\]", re.IGNORECASE)
_TOOL_RESULT_MARKER = re.compile(r"\[Tool Result for ID[^\]\n]*\]", re.IGNORECASE)
_ARGUMENTS_LABEL = re.compile(r"\s*Arguments:[ \t]*", re.IGNORECASE)
_NEXT_TOOL_MARKER = re.compile(r"\[Tool (?:Call|Result)", re.IGNORECASE)


# --- extract_assistant_text ---------------------------------------------------------------


def extract_assistant_text(message: Message) -> str:
    """The text of ``message`` as a chat user should see it; "" when nothing is left.

    Each text block is cleaned (MiniMax tool XML, downgraded tool markers, reasoning tags) and
    trimmed; the non-empty ones are joined with newlines and then sanitised: leftover final
    tags removed, a raw provider error rewritten as a short sentence, and a paragraph that
    repeats the one before it dropped.
    """
    parts: list[str] = []
    for block in message.blocks():
        if not isinstance(block, TextContent):
            continue
        text = block.text
        if "minimax:tool_call" in text.lower():
            text = _strip_minimax_tool_xml(text)
        if "[tool call" in text.lower() or "[tool result" in text.lower():
            text = strip_downgraded_tool_text(text)
        text = strip_reasoning_tags_strict(text).strip()
        if text:
            parts.append(text)
    return sanitize_user_facing_text("\n".join(parts).strip())


def _strip_minimax_tool_xml(text: str) -> str:
    return _MINIMAX_WRAPPER.sub("", _MINIMAX_INVOKE.sub("", text))


def strip_downgraded_tool_text(text: str) -> str:
    """``text`` without ``[Tool Call: …]`` markers and ``[Tool Result for ID …]`` sections.

    A tool-call marker takes with it the line break right after it, an ``Arguments:`` label
    after that and the value that follows: a JSON object or array (brackets balanced,
    strings respected; to the end of the text when never closed) or else the rest of that
    line. When the text before the marker ends a line, the line break after what was taken
    goes too, so the lines around a removed call are not split by a blank line. A tool
    result has no end marker, so its section runs to the next tool marker or to the end of
    the text.
    """
    out: list[str] = []
    pos = 0
    at_line_start = True  # what is kept so far is empty or ends a line
    while True:
        call = _TOOL_CALL_MARKER.search(text, pos)
        result = _TOOL_RESULT_MARKER.search(text, pos)
        marker = min((m for m in (call, result) if m), key=lambda m: m.start(), default=None)
        if marker is None:
            out.append(text[pos:])
            break
        before = text[pos : marker.start()]
        out.append(before)
        if before:
            at_line_start = before[-1] in "\r\n"
        if marker is call:
            after = marker.end()
            while text[after : after + 1] in (" ", "\t"):
                after += 1
            pos = _skip_arguments(text, _skip_line_break(text, after))
            if at_line_start:
                pos = _skip_line_break(text, pos)
        else:
            following = _NEXT_TOOL_MARKER.search(text, marker.end())
            pos = following.start() if following else len(text)
    return "".join(out)


def _skip_line_break(text: str, pos: int) -> int:
    """Past the line break (LF, CRLF or CR) at ``pos``, if there is one."""
    if text.startswith("\r\n", pos):
        return pos + 2
    return pos + 1 if text[pos : pos + 1] in ("\n", "\r") else pos


def _skip_arguments(text: str, pos: int) -> int:
    """Where the text resumes after a tool call's ``Arguments:`` at ``pos`` (if any)."""
    label = _ARGUMENTS_LABEL.match(text, pos)
    if label is None:
        return pos
    start = label.end()
    if start < len(text) and text[start] in "{[":
        return _skip_json_value(text, start)
    line_end = text.find("\n", start)
    return len(text) if line_end == -1 else line_end


def _skip_json_value(text: str, start: int) -> int:
    """The index just past the bracketed value opening at ``start`` (or the text's end)."""
    depth = 0
    in_string = False
    escaped = False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return index + 1
    return len(text)


def strip_reasoning_tags_strict(text: str) -> str:
    """``text`` without final tags and without thinking sections, trimmed.

    All final tags go (their content stays). Text between a thinking opening tag and the next
    closing tag goes with the tags; an opening tag never closed drops everything after it; a
    stray closing tag is just removed. There is no nesting. Text without any of these tags is
    returned unchanged (not even trimmed).
    """
    if not _ANY_REASONING_TAG.search(text):
        return text
    text = FINAL_TAG.sub("", text)
    kept: list[str] = []
    pos = 0
    in_thinking = False
    for tag in THINKING_TAG.finditer(text):
        if not in_thinking:
            kept.append(text[pos : tag.start()])
        in_thinking = tag.group(1) != "/"
        pos = tag.end()
    if not in_thinking:
        kept.append(text[pos:])
    return "".join(kept).strip()


# --- sanitising for the user --------------------------------------------------------------

_PARAGRAPH_BREAK = re.compile(r"\n{2,}")

# A text that is only a raw error: "Error: …", "API error …", "HTTP 429 …", "429 {…}", or a
# JSON error object. Only such texts are rewritten, so a normal answer that talks about an
# error is never touched.
_RAW_ERROR_SHAPE = re.compile(
    r"""^(?:
        (?:api\s+)?error\b\s*[:(\[]      # Error: …  /  API error: …  /  error (429) …
      | http\s*\d{3}\b                 # HTTP 500 …
      | \d{3}\s*[:{]                   # 400 {"type": "error", …}
      | \{\s*"(?:type|error)"\s*:      # {"type": "error", …}  /  {"error": {…}}
    )""",
    re.IGNORECASE | re.VERBOSE,
)

MESSAGE_ORDERING_REPLY = (
    "The conversation history got out of order. Please try again; "
    "if it keeps happening, start a new session."
)
CONTEXT_OVERFLOW_REPLY = (
    "This conversation is too long for the model. Start a new session or send a shorter message."
)
RATE_LIMIT_REPLY = "The model provider is rate-limiting requests. Please try again in a moment."
OVERLOADED_REPLY = "The model provider is overloaded right now. Please try again in a moment."
TIMEOUT_REPLY = "The request to the model provider timed out. Please try again."

# (words that identify the error, friendly sentence), tried in order on the lowercased text.
_KNOWN_ERRORS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("roles must alternate", "incorrect role information"), MESSAGE_ORDERING_REPLY),
    (
        (
            "context length",
            "context window",
            "context_length_exceeded",
            "prompt is too long",
            "maximum context",
            "request_too_large",
        ),
        CONTEXT_OVERFLOW_REPLY,
    ),
    (("rate limit", "rate_limit", "too many requests", "429"), RATE_LIMIT_REPLY),
    (("overloaded", "529", "503", "service unavailable"), OVERLOADED_REPLY),
    (("timed out", "timeout", "etimedout"), TIMEOUT_REPLY),
)


def sanitize_user_facing_text(text: str) -> str:
    """Final tags removed, a raw provider error rewritten, repeated paragraphs collapsed."""
    text = FINAL_TAG.sub("", text)
    rewritten = rewrite_provider_error(text)
    if rewritten is not None:
        return rewritten
    return collapse_repeated_paragraphs(text)


def rewrite_provider_error(text: str) -> str | None:
    """A short sentence for a text that is just a raw provider error, else None.

    Recognised: message-ordering ("roles must alternate"), context overflow, rate limits,
    overload and timeouts; a JSON error payload of another kind becomes "The model provider
    returned an error: <its message>". Anything else, including ordinary text that merely
    mentions an error, is left alone (None).
    """
    stripped = text.strip()
    # A raw error is one paragraph; a longer answer that starts with "Error:" is left alone.
    if not _RAW_ERROR_SHAPE.match(stripped) or "\n\n" in stripped:
        return None
    lowered = stripped.lower()
    for needles, reply in _KNOWN_ERRORS:
        if any(needle in lowered for needle in needles):
            return reply
    detail = _json_error_message(stripped)
    if detail:
        return f"The model provider returned an error: {detail}"
    return None


def _json_error_message(text: str) -> str | None:
    """``error.message`` (or ``message``) of a JSON payload, optionally after a status code."""
    brace = text.find("{")
    if brace == -1:
        return None
    try:
        payload: Any = json.loads(text[brace:])
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    source = error if isinstance(error, dict) else payload
    message = source.get("message")
    return message.strip() if isinstance(message, str) and message.strip() else None


def collapse_repeated_paragraphs(text: str) -> str:
    """``text`` without a paragraph that repeats the previous one (whitespace ignored).

    Paragraphs are separated by two or more newlines; when one is dropped the rest are joined
    with a blank line. Text without repeats is returned unchanged.
    """
    paragraphs = _PARAGRAPH_BREAK.split(text)
    kept: list[str] = []
    previous: str | None = None
    for paragraph in paragraphs:
        key = " ".join(paragraph.split())
        if key == previous:
            continue
        kept.append(paragraph)
        previous = key
    if len(kept) == len(paragraphs):
        return text
    return "\n\n".join(kept)


# --- thinking -----------------------------------------------------------------------------


def promote_thinking_tags(message: Message) -> None:
    """Move tag-wrapped reasoning out of text blocks into thinking blocks, in place.

    Only for a message without a thinking block. A text block qualifies when it starts
    (after leading whitespace) with ``<`` and has a thinking opening and closing tag. It is
    split into text and thinking parts in order: thinking parts trimmed, text parts
    left-trimmed, empty parts dropped. A block with an unclosed opening tag, or with no
    non-empty thinking part, is left as it was.
    """
    blocks = message.blocks()
    if any(isinstance(block, ThinkingContent) for block in blocks):
        return
    rewritten: list[TextContent | ThinkingContent | ToolCallContent | ImageContent] = []
    changed = False
    for block in blocks:
        parts = _split_thinking_block(block.text) if isinstance(block, TextContent) else None
        if parts is None:
            rewritten.append(block)
        else:
            rewritten.extend(parts)
            changed = True
    if changed:
        message.content = rewritten


def _split_thinking_block(text: str) -> list[TextContent | ThinkingContent] | None:
    """The parts of a qualifying text block, or None to leave it unchanged."""
    if not text.lstrip().startswith("<"):
        return None
    if not THINKING_OPEN_TAG.search(text) or not THINKING_CLOSE_TAG.search(text):
        return None
    parts: list[TextContent | ThinkingContent] = []
    current: list[str] = []  # pieces of the part being read
    in_thinking = False

    def finish_part() -> None:
        chunk = "".join(current)
        current.clear()
        if in_thinking and chunk.strip():
            parts.append(ThinkingContent(thinking=chunk.strip()))
        elif not in_thinking and chunk.lstrip():
            parts.append(TextContent(text=chunk.lstrip()))

    pos = 0
    for tag in THINKING_TAG.finditer(text):
        current.append(text[pos : tag.start()])
        pos = tag.end()
        closing = tag.group(1) == "/"
        # An opening tag inside thinking or a closing tag outside it is dropped; no nesting.
        if closing == in_thinking:
            finish_part()
            in_thinking = not closing
    if in_thinking:
        return None
    current.append(text[pos:])
    finish_part()
    if not any(isinstance(part, ThinkingContent) for part in parts):
        return None
    return parts


def extract_thinking_from_tags(text: str, *, streaming: bool = False) -> str:
    """The reasoning written inside thinking tags in ``text``.

    Closed form: the contents of every closed thinking section, each trimmed, non-empty ones
    joined with a newline. With ``streaming`` (text still arriving): the closed form if there
    is any, else, while a thinking section is open (the last opening tag comes after the last
    closing tag), the text after that opening tag, trimmed; otherwise "".
    """
    sections: list[str] = []
    open_end: int | None = None
    for tag in THINKING_TAG.finditer(text):
        if tag.group(1) != "/":
            if open_end is None:
                open_end = tag.end()
        elif open_end is not None:
            section = text[open_end : tag.start()].strip()
            if section:
                sections.append(section)
            open_end = None
    closed = "\n".join(sections)
    if closed or not streaming:
        return closed
    last_open = _last_match(THINKING_OPEN_TAG, text)
    if last_open is None:
        return ""
    last_close = _last_match(THINKING_CLOSE_TAG, text)
    if last_close is not None and last_close.start() > last_open.start():
        return ""
    return text[last_open.end() :].strip()


def _last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    matches = list(pattern.finditer(text))
    return matches[-1] if matches else None


def extract_thinking(message: Message) -> str:
    """The message's reasoning: its thinking blocks, else thinking tags in its text blocks."""
    blocks = message.blocks()
    thinking = "\n".join(b.thinking for b in blocks if isinstance(b, ThinkingContent)).strip()
    if thinking:
        return thinking
    from_tags = (extract_thinking_from_tags(b.text) for b in blocks if isinstance(b, TextContent))
    return "\n".join(part for part in from_tags if part)


# --- reasoning output ---------------------------------------------------------------------


def format_reasoning(text: str) -> str:
    """``"Reasoning:"`` and then each line of ``text`` in italics; "" for blank text.

    Each line is wrapped in underscores separately, because Telegram does not carry italics
    across line breaks. Lines are trimmed first (``_ x _`` would not render as italics) and
    blank lines stay empty.
    """
    text = text.strip()
    if not text:
        return ""
    lines = (line.strip() for line in text.split("\n"))
    return "Reasoning:\n" + "\n".join(f"_{line}_" if line else "" for line in lines)
