"""The final-reply step: what must still be delivered once a run is over.

Blocks stream during the run. Afterwards, the final replies are whatever the run produced
that did not reach the user yet. Three things can make a final reply redundant:

* **block streaming**: once blocks were delivered (and delivery did not abort), the finals are
  dropped; after an abort, a final whose content the delivered blocks already cover (compared
  without whitespace, ignoring ``reply_to_id``) is still dropped;
* **a messaging-tool send to this conversation**: the agent replied itself, so every final is
  dropped (a send without ``to`` goes to this conversation);
* **a messaging-tool send of the same text**: a final that repeats what a tool sent is dropped.

Sends to another chat never swallow the reply here: the text filter compares only against
sends to this conversation, since the user here has not seen the others. When the originating
conversation is not known (``origin=None``, as in ``botd replay``), target suppression is
off and the text filter compares against every send, so a repeat is never delivered.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..chat import TargetForm
from ..events import Message
from .dedupe import MessagingTarget, is_messaging_duplicate, same_route
from .directives import parse_reply_directives
from .payloads import BlockReply, ToolError

_RECOVERABLE_ERROR = re.compile(r"required|missing|invalid|must be|must have|needs|requires", re.I)
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Origin:
    """The conversation a run answers: channel (provider), target and account."""

    channel: str
    to: str
    account_id: str | None = None


@dataclass(frozen=True, slots=True)
class FinalReplyInput:
    assistant_texts: Sequence[str]
    """The run's assistant texts (tag-stripped, directives still in them)."""
    fallback_text: str = ""
    """The last assistant message's text, used when ``assistant_texts`` is empty."""
    error_text: str = ""
    """A user-facing error when the last assistant message failed."""
    reasoning_text: str = ""
    """Formatted reasoning to lead with (reasoning ``on`` without block replies)."""
    current_message_id: str | None = None
    delivered_blocks: Sequence[BlockReply] = ()
    block_streaming: bool = False
    block_delivery_aborted: bool = False
    sent_texts: Sequence[str] = ()
    sent_targets: Sequence[MessagingTarget] = ()
    sent_to_current: bool = False
    """A committed send named no target (it went to the originating conversation)."""
    origin: Origin | None = None
    last_tool_error: ToolError | None = None
    target_forms: Mapping[str, TargetForm] = field(default_factory=dict)
    """The platforms' target forms, to compare ``sent_targets`` with ``origin``."""


def _squash(text: str) -> str:
    return _WHITESPACE.sub("", text)


def _covered_by_blocks(reply: BlockReply, blocks: Sequence[BlockReply]) -> bool:
    body = _squash(reply.text)
    media = set(reply.media_urls)
    streamed_media = {url for block in blocks for url in block.media_urls}
    if not media <= streamed_media:
        return False
    if not body:
        return True
    streamed = _squash("".join(block.text for block in blocks))
    return body in streamed


def _went_to_origin(data: FinalReplyInput) -> bool:
    if data.sent_to_current:
        return True
    origin = data.origin
    if origin is None:
        return False
    return any(
        same_route(
            data.target_forms,
            # A send that named no channel went through the originating one.
            replace(target, provider=origin.channel) if target.provider == "message" else target,
            provider=origin.channel,
            to=origin.to,
            account_id=origin.account_id,
        )
        for target in data.sent_targets
    )


def error_text_for(message: Message | None) -> str:
    """The notice to show when the run's last assistant message failed ("" otherwise)."""
    if message is None or message.stop_reason != "error" or not message.error_message:
        return ""
    first_line = message.error_message.strip().split("\n", 1)[0][:400]
    return f"⚠️ The agent stopped with an error: {first_line}"


def build_final_replies(data: FinalReplyInput) -> list[BlockReply]:
    """The replies still to deliver after the run, in order.

    An error notice always goes out, even after streamed blocks or a messaging-tool send:
    the user must learn that the answer they saw is incomplete.
    """
    error = [BlockReply(text=data.error_text)] if data.error_text else []
    return error + _answers_still_due(data)


def _answers_still_due(data: FinalReplyInput) -> list[BlockReply]:
    texts: list[str] = []
    reasoning = ""
    if data.reasoning_text:
        texts.append(data.reasoning_text)
        reasoning = parse_reply_directives(data.reasoning_text).text.strip()
    answers = list(data.assistant_texts) or ([data.fallback_text] if data.fallback_text else [])
    texts.extend(answers)

    replies: list[BlockReply] = []
    for text in texts:
        parsed = parse_reply_directives(text, current_message_id=data.current_message_id)
        if parsed.is_silent or not parsed.renderable:
            continue
        replies.append(
            BlockReply(
                text=parsed.text.strip(),
                media_urls=list(parsed.media_urls),
                audio_as_voice=parsed.audio_as_voice,
                reply_to_id=parsed.reply_to_id,
                reply_to_current=parsed.reply_to_current,
                reply_to_tag=parsed.reply_to_tag,
                buttons=parsed.buttons,
                tts=parsed.tts,
            )
        )
    if not replies and data.last_tool_error is not None and not data.delivered_blocks:
        error = data.last_tool_error
        if not _RECOVERABLE_ERROR.search(error.error):
            replies.append(BlockReply(text=f"⚠️ {error.tool_name} failed: {error.error}"))

    if any(r.audio_as_voice for r in replies):
        replies = [
            dataclasses.replace(r, audio_as_voice=True) if r.media_urls else r for r in replies
        ]
    if any(r.tts for r in replies):
        # One answer: spoken whole, whichever of its messages held the tag (the reasoning
        # leading it is not part of the answer).
        lead = 1 if data.reasoning_text and replies and replies[0].text == reasoning else 0
        replies = replies[:lead] + [
            dataclasses.replace(r, tts=True) if r.text else r for r in replies[lead:]
        ]

    if data.block_streaming and data.delivered_blocks:
        if not data.block_delivery_aborted:
            return []
        replies = [r for r in replies if not _covered_by_blocks(r, data.delivered_blocks)]

    if _went_to_origin(data):
        return []
    if data.origin is None and data.sent_texts:
        # Where the sends went is unknown: never deliver a repeat of one.
        replies = [r for r in replies if not is_messaging_duplicate(r.text, data.sent_texts)]
    return replies
