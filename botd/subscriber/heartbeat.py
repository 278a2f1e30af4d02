"""The ``HEARTBEAT_OK`` acknowledgement token of heartbeat checks.

A heartbeat check is a scheduled job (``heartbeat:`` on a job in ``scheduler.jobs``) whose
prompt ends with ``HEARTBEAT_INSTRUCTION``: when nothing needs attention the agent answers
``HEARTBEAT_OK``, and such a reply is not delivered. ``strip_heartbeat_token`` removes the
token from the start or end of a reply (also when wrapped in light Markdown or HTML) and says
whether what is left should be skipped; a token in the middle of a reply is never touched.
``heartbeat_reply`` applies it to a heartbeat run's answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from .payloads import BlockReply

HEARTBEAT_TOKEN = "HEARTBEAT_OK"
DEFAULT_MAX_ACK_CHARS = 300
HEARTBEAT_INSTRUCTION = (
    f"(This is a scheduled heartbeat check. If nothing needs attention, answer with exactly "
    f"{HEARTBEAT_TOKEN} and nothing else. If something does, answer with the alert alone, "
    f"without {HEARTBEAT_TOKEN}.)"
)
"""What a heartbeat job's prompt ends with, so the agent knows how to say "all is well"."""

_HTML_TAG = re.compile(r"<[^>]*>")
_NBSP_ENTITY = re.compile(r"&nbsp;", re.IGNORECASE)
_LEADING_MARKUP = re.compile(r"^[*`~_]+")
_TRAILING_MARKUP = re.compile(r"[*`~_]+$")
_WHITESPACE_RUN = re.compile(r"\s+")


@dataclass(frozen=True)
class HeartbeatStrip:
    """What to do with a reply once the heartbeat token is taken off its edges."""

    should_skip: bool
    """True when the reply should not be delivered."""
    text: str
    """The text to deliver ("" when skipped)."""
    did_strip: bool
    """True when a token was removed."""


def _strip_markup(text: str) -> str:
    """A copy with HTML tags and ``&nbsp;`` turned into spaces and Markdown wrappers removed at
    the edges, so that ``**HEARTBEAT_OK**`` and ``<b>HEARTBEAT_OK</b>`` are recognised."""
    text = _NBSP_ENTITY.sub(" ", _HTML_TAG.sub(" ", text))
    return _TRAILING_MARKUP.sub("", _LEADING_MARKUP.sub("", text))


def _strip_token_at_edges(text: str) -> tuple[str, bool]:
    """Remove the token from the start and end until neither holds it; collapse whitespace.

    Returns the rest and whether anything was removed.
    """
    rest = text.strip()
    if HEARTBEAT_TOKEN not in rest:
        return rest, False
    did_strip = False
    while True:
        if rest.startswith(HEARTBEAT_TOKEN):
            rest = rest[len(HEARTBEAT_TOKEN) :].strip()
        elif rest.endswith(HEARTBEAT_TOKEN):
            rest = rest[: -len(HEARTBEAT_TOKEN)].strip()
        else:
            break
        did_strip = True
    return _WHITESPACE_RUN.sub(" ", rest).strip(), did_strip


def strip_heartbeat_token(
    text: str | None,
    *,
    mode: Literal["heartbeat", "message"] = "heartbeat",
    max_ack_chars: int = DEFAULT_MAX_ACK_CHARS,
) -> HeartbeatStrip:
    """Take ``HEARTBEAT_OK`` off the edges of ``text`` and decide whether to skip the reply.

    An empty reply, or one that was only the token, is skipped. In ``"heartbeat"`` mode a short
    rest (at most ``max_ack_chars`` characters) counts as an acknowledgement and is skipped too;
    in ``"message"`` mode the rest is delivered.
    """
    trimmed = (text or "").strip()
    if not trimmed:
        return HeartbeatStrip(should_skip=True, text="", did_strip=False)

    normalized = _strip_markup(trimmed)
    if HEARTBEAT_TOKEN not in trimmed and HEARTBEAT_TOKEN not in normalized:
        return HeartbeatStrip(should_skip=False, text=trimmed, did_strip=False)

    rest, did_strip = _strip_token_at_edges(trimmed)
    if not (did_strip and rest):
        # The raw text either held no edge token or was nothing but tokens; the markup-free
        # copy decides.
        rest, did_strip = _strip_token_at_edges(normalized)
    if not did_strip:
        return HeartbeatStrip(should_skip=False, text=trimmed, did_strip=False)
    if not rest:
        return HeartbeatStrip(should_skip=True, text="", did_strip=True)
    if mode == "heartbeat" and len(rest) <= max(0, max_ack_chars):
        return HeartbeatStrip(should_skip=True, text="", did_strip=True)
    return HeartbeatStrip(should_skip=False, text=rest, did_strip=True)


def heartbeat_reply(finals: Sequence[BlockReply], max_ack_chars: int) -> BlockReply | None:
    """What a heartbeat run posts of its final replies: None when nothing.

    The run's answer is its last reply with text or files (what the agent said once done;
    narration before its tool calls is not an alert). A reply that is only the token, or the
    token and a remark of at most ``max_ack_chars`` characters, is an acknowledgement and
    is not posted, unless it carries files (then they go, without the text). Anything else is
    the alert, posted without the token.
    """
    answer = next((r for r in reversed(finals) if r.text.strip() or r.media_urls), None)
    if answer is None:
        return None
    stripped = strip_heartbeat_token(answer.text, max_ack_chars=max_ack_chars)
    if stripped.should_skip:
        return replace(answer, text="") if answer.media_urls else None
    return replace(answer, text=stripped.text) if stripped.did_strip else answer
