"""The streaming subscriber: agent events in, chat blocks out, nothing twice.

``StreamSubscriber.handle`` takes the events of one agent run in order (``botd.events``) and
calls back with block replies, flush signals, partial replies and reasoning. It keeps what the
final-reply step needs: the assistant texts and what messaging tools delivered. It is pure and
synchronous (no I/O, clocks or asyncio); callbacks are plain calls the caller may make tasks.

Streamed text has reasoning and ``<final>`` tags stripped, is cut into blocks by the block
chunker and flushed at ``text_end`` or ``message_end`` (``block_break``); reply directives are
read from it, and text a messaging tool (or an interrupted attempt of the run,
``skip_already_posted``) already sent is not sent again. ``message_start`` alone resets
per-message state; text after ``message_end`` is checked against the ended message, so a late or
repeated ``text_end`` or ``message_end`` never produces a second block.

Reasoning: with ``reasoning="on"`` each message's formatted reasoning is a block of its own
(or leads the final replies when there are no blocks). With ``reasoning="stream"`` it goes to
``on_reasoning`` instead, as the formatted reasoning so far: while reasoning tags stream in the
text, and, taking a later change of the reference, at the end of each thinking block of a
model that thinks natively (``thinking_end``: once per block, so the cost stays linear), so
a consumer has a message's reasoning before its answer starts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ..events import (
    AgentEnd,
    AgentEvent,
    AutoCompactionEnd,
    AutoCompactionStart,
    Message,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    TextContent,
    ToolExecutionEnd,
    ToolExecutionStart,
)
from .assistant_text import (
    extract_assistant_text,
    extract_thinking,
    format_reasoning,
    promote_thinking_tags,
)
from .chunker import BlockChunker
from .dedupe import (
    MAX_MESSAGING_SENT,
    MessagingTarget,
    is_duplicate_normalized,
    is_failed_tool_result,
    messaging_send,
    normalize_for_dedupe,
    normalize_tool_name,
)
from .directives import DirectiveAccumulator, ReplyDirectives
from .final import FinalReplyInput, Origin, build_final_replies, error_text_for
from .partial import PartialStream
from .payloads import BlockReply, PartialReply, RunSummary, SubscriberConfig, ToolError
from .tags import StreamingTagStripper, TagStripper, strip_tags

log = logging.getLogger(__name__)

_TOOL_ERROR_MAX_CHARS = 400

BlockReplyCallback = Callable[[BlockReply], None]
FlushCallback = Callable[[], None]
PartialReplyCallback = Callable[[PartialReply], None]
ReasoningCallback = Callable[[str], None]


def _raw_text(message: Message) -> str:
    return "\n".join(b.text for b in message.blocks() if isinstance(b, TextContent))


def _tool_error_text(result: object) -> str:
    """A readable error out of a tool result of any shape."""
    if isinstance(result, str):
        text = result
    elif isinstance(result, dict):
        details = result.get("details")
        error = result.get("error")
        if isinstance(details, dict) and isinstance(details.get("error"), str):
            text = details["error"]
        elif isinstance(error, str):
            text = error
        elif isinstance(result.get("content"), list):
            text = "\n".join(
                str(part.get("text", ""))
                for part in result["content"]
                if isinstance(part, dict) and part.get("type") == "text"
            )
        else:
            text = ""
    else:
        text = "" if result is None else str(result)
    first_line = text.strip().split("\n", 1)[0].strip()
    return first_line[:_TOOL_ERROR_MAX_CHARS] or "failed"


class StreamSubscriber:
    """Consumes one agent run's events; see the module docstring.

    Callbacks (all optional): ``on_block_reply`` (a block is ready; without it no blocks are
    cut), ``on_block_flush`` (a tool starts: deliver what is queued), ``on_partial_reply``
    (the answer so far, for previews), ``on_reasoning`` (the reasoning stream, with
    ``reasoning="stream"``), ``on_assistant_message_start`` (a typing signal).
    ``current_message_id``: the message a block's ``[[reply_to_current]]`` replies to.
    """

    def __init__(
        self,
        config: SubscriberConfig | None = None,
        *,
        on_block_reply: BlockReplyCallback | None = None,
        on_block_flush: FlushCallback | None = None,
        on_partial_reply: PartialReplyCallback | None = None,
        on_reasoning: ReasoningCallback | None = None,
        on_assistant_message_start: FlushCallback | None = None,
        current_message_id: str | None = None,
    ) -> None:
        self.config = config or SubscriberConfig()
        self._on_block_reply = on_block_reply
        self._on_block_flush = on_block_flush
        self._on_partial_reply = on_partial_reply
        self._on_reasoning = on_reasoning
        self._on_assistant_start = on_assistant_message_start

        reasoning = self.config.reasoning
        self._include_reasoning = reasoning == "on"
        self._stream_reasoning = reasoning == "stream" and on_reasoning is not None
        self._emit_partials = on_partial_reply is not None and not (
            self._include_reasoning and on_block_reply is None
        )
        c = self.config.chunking
        self._chunker = BlockChunker(c.min_chars, c.max_chars, c.break_preference) if c else None
        enforce = self.config.enforce_final_tag
        self._block_stripper = TagStripper(enforce_final=enforce)
        self._partial = PartialStream(
            StreamingTagStripper(
                TagStripper(enforce_final=enforce, collect_thinking=self._stream_reasoning)
            )
        )
        self._directives = DirectiveAccumulator(current_message_id)

        # Run state: lasts until a compaction retry.
        self.assistant_texts: list[str] = []
        self.tool_metas: list[tuple[str, str]] = []
        self.last_tool_error: ToolError | None = None
        self.last_assistant_message: Message | None = None
        self.block_replies: list[BlockReply] = []
        self._sent_texts: list[str] = []
        self._sent_normalized: list[str] = []
        self._sent_targets: list[MessagingTarget] = []
        self._posted_normalized: list[str] = []
        self._sent_to_current = False
        self._pending_texts: dict[str, str] = {}
        self._pending_targets: dict[str, MessagingTarget | None] = {}
        self._compaction_in_flight = False
        self._pending_compaction_retries = 0

        self._message_index = 0
        self._reset_message_state()

    # -- public view of the run ------------------------------------------------------------

    @property
    def messaging_tool_sent_texts(self) -> list[str]:
        return list(self._sent_texts)

    @property
    def messaging_tool_sent_targets(self) -> list[MessagingTarget]:
        return list(self._sent_targets)

    @property
    def did_send_via_messaging_tool(self) -> bool:
        return bool(self._sent_texts)

    @property
    def sent_to_current_conversation(self) -> bool:
        """A committed messaging send named no target, so it went to this conversation."""
        return self._sent_to_current

    @property
    def is_compacting(self) -> bool:
        return self._compaction_in_flight or self._pending_compaction_retries > 0

    @property
    def compaction_settled(self) -> bool:
        """True when no compaction is running or waiting to be retried (the run is settled)."""
        return not self.is_compacting

    @property
    def reasoning_text(self) -> str:
        """The last message's formatted reasoning (for the final reply with reasoning on)."""
        return self._last_reasoning_formatted

    def final_replies(
        self,
        *,
        block_streaming: bool,
        current_message_id: str | None = None,
        origin: Origin | None = None,
    ) -> list[BlockReply]:
        """What the run must still deliver now that it is over (see ``final.py``).

        ``block_streaming``: blocks were delivered as the run went; only then may they make
        a final redundant, and only without them does reasoning lead the final replies.
        """
        last = self.last_assistant_message
        return build_final_replies(
            FinalReplyInput(
                assistant_texts=self.assistant_texts,
                fallback_text=extract_assistant_text(last) if last is not None else "",
                error_text=error_text_for(last),
                # With reasoning="stream" the reasoning went to on_reasoning, not here.
                reasoning_text=""
                if block_streaming or not self._include_reasoning
                else self._last_reasoning_formatted,
                current_message_id=current_message_id,
                delivered_blocks=self.block_replies if block_streaming else (),
                block_streaming=block_streaming,
                sent_texts=self._sent_texts,
                sent_targets=self._sent_targets,
                sent_to_current=self._sent_to_current,
                origin=origin,
                target_forms=self.config.target_forms,
                last_tool_error=self.last_tool_error,
            )
        )

    def summary(self) -> RunSummary:
        return RunSummary(
            assistant_texts=list(self.assistant_texts),
            messaging_tool_sent_texts=self.messaging_tool_sent_texts,
            messaging_tool_sent_targets=[t.to_dict() for t in self._sent_targets],
            did_send_via_messaging_tool=self.did_send_via_messaging_tool,
        )

    # -- dispatch ---------------------------------------------------------------------------

    def handle(self, event: AgentEvent) -> None:
        """Consume one event. Never raises on odd input: it is logged and skipped."""
        try:
            self._dispatch(event)
        except Exception:  # a bug here must not take the run down with it
            log.exception("subscriber failed on a %s event; skipped", event.type)

    def _dispatch(self, event: AgentEvent) -> None:
        if isinstance(event, MessageUpdate):
            if event.message.role == "assistant":
                self._on_message_update(event)
        elif isinstance(event, MessageStart):
            if event.message.role == "assistant":
                self._on_message_start()
        elif isinstance(event, MessageEnd):
            if event.message.role == "assistant":
                self._on_message_end(event.message)
        elif isinstance(event, ToolExecutionStart):
            self._on_tool_start(event)
        elif isinstance(event, ToolExecutionEnd):
            self._on_tool_end(event)
        elif isinstance(event, AutoCompactionStart):
            self._compaction_in_flight = True
        elif isinstance(event, AutoCompactionEnd):
            self._on_compaction_end(event.will_retry)
        elif isinstance(event, AgentEnd):
            self._on_agent_end(event)

    # -- per-message state ------------------------------------------------------------------

    def _reset_message_state(self) -> None:
        self._delta_pieces: list[str] = []
        self._delta_joined = ""
        self._block_pieces: list[str] = []
        if self._chunker is not None:
            self._chunker.reset()
        self._directives.reset()
        self._block_stripper.reset()
        self._partial.reset()
        self._last_block_text: str | None = None
        self._last_streamed_reasoning: str | None = None
        self._last_reasoning_sent: str | None = None
        self._last_reasoning_formatted = ""
        self._suppress_block_chunks = False
        self._message_index += 1
        self._remembered_index = -1
        self._remembered_trimmed = ""
        self._remembered_normalized = ""
        self._baseline = len(self.assistant_texts)
        self._blocks_this_message = 0
        self._thinking_blocks: dict[int, list[str]] = {}
        # Raw text of this message once its message_end was handled (see _after_end).
        self._ended_text: str | None = None

    def _on_message_start(self) -> None:
        self._reset_message_state()
        if self._on_assistant_start is not None:
            self._on_assistant_start()

    # -- text updates -----------------------------------------------------------------------

    def _delta_buffer(self) -> str:
        if len(self._delta_pieces) > 1 or (self._delta_pieces and not self._delta_joined):
            self._delta_joined = "".join(self._delta_pieces)
            self._delta_pieces = [self._delta_joined]
        return self._delta_joined

    def _chunk_for(self, kind: str, delta: str | None, content: str | None) -> str:
        """What a text event adds to the message (4.2 step 1)."""
        if kind == "text_delta" or delta:
            return delta or ""
        if not content:
            return ""
        buffer = self._delta_buffer()
        if content.startswith(buffer):
            return content[len(buffer) :]
        if content in buffer:
            return ""  # a stale prefix, or text the buffer already has
        return content  # text that never streamed as deltas

    def _on_message_update(self, event: MessageUpdate) -> None:
        update = event.assistant_event
        kind = update.type
        if kind.startswith("thinking_"):
            if self._stream_reasoning:
                self._on_thinking(kind, update.content_index, update.delta, update.content)
            return
        if kind not in ("text_delta", "text_start", "text_end"):
            return
        if self._ended_text is not None and not self._after_end(kind, update.delta, update.content):
            return
        chunk = self._chunk_for(kind, update.delta, update.content)
        if chunk:
            self._delta_pieces.append(chunk)
            self._delta_joined = ""
            if self._chunker is not None:
                self._chunker.append(chunk)
            else:
                self._block_pieces.append(chunk)
            self._stream_partial(self._partial.feed(chunk))
        if kind == "text_end":
            self._stream_partial(self._partial.flush())

        text_end_mode = self.config.block_break == "text_end"
        if self._on_block_reply is not None and self._chunker is not None and text_end_mode:
            self._chunker.drain(False, self._emit_block_chunk)
        if kind == "text_end" and text_end_mode:
            self._flush_block_buffer()

    def _after_end(self, kind: str, delta: str | None, content: str | None) -> bool:
        """Text after this message's ``message_end``: True when it starts a new message.

        A late ``text_end`` (or ``text_start``) resending text the ended message already had
        is dropped. New text means the runtime skipped ``message_start``: start afresh so
        the text is still delivered, except after a message whose answer was settled at its
        end (reasoning on without blocks: ``_suppress_block_chunks``). There, as in the
        reference, only ``message_start`` opens a new message; anything else is a stale
        draft of the settled answer.
        """
        if self._suppress_block_chunks:
            log.debug("%s after a settled message_end ignored", kind)
            return False
        ended = self._ended_text or ""
        new_text = delta or ("" if kind == "text_delta" else content) or ""
        if kind != "text_delta" and (not new_text or new_text in ended):
            log.debug("late %s after message_end ignored", kind)
            return False
        if not new_text:
            return False
        log.info("text after message_end without message_start: treated as a new message")
        self._on_message_start()
        return True

    def _on_thinking(
        self, kind: str, index: int | None, delta: str | None, content: str | None
    ) -> None:
        """A native thinking block's events: its reasoning is streamed when it ends."""
        key = -1 if index is None else index
        pieces = self._thinking_blocks.setdefault(key, [])
        if kind == "thinking_delta":
            if delta:
                pieces.append(delta)
        elif content:
            pieces[:] = [content]  # start/end may carry the whole block
        if kind == "thinking_end":
            # Joined as extract_thinking joins a message's blocks, so the reasoning streamed
            # again at message_end is the same text and is not repeated.
            self._stream_reasoning_text(
                "\n".join("".join(block) for block in self._thinking_blocks.values()).strip()
            )

    def _stream_partial(self, partial: PartialReply | None) -> None:
        if self._stream_reasoning:
            self._stream_reasoning_text(self._partial.thinking_so_far())
        if partial is not None and self._on_partial_reply is not None and self._emit_partials:
            self._on_partial_reply(partial)

    def _stream_reasoning_text(self, thinking: str) -> None:
        formatted = format_reasoning(thinking)
        if formatted and formatted != self._last_streamed_reasoning and self._on_reasoning:
            self._last_streamed_reasoning = formatted
            self._on_reasoning(formatted)

    # -- blocks -----------------------------------------------------------------------------

    def _take_block_buffer(self) -> str:
        text = "".join(self._block_pieces)
        self._block_pieces = []
        return text

    def _flush_block_buffer(self) -> None:
        """Force out whatever is buffered for blocks (chunker or plain buffer)."""
        if self._chunker is not None and self._chunker.has_buffered():
            self._chunker.drain(True, self._emit_block_chunk)
            self._chunker.reset()
        elif self._block_pieces:
            self._emit_block_chunk(self._take_block_buffer())

    def _should_skip_assistant_text(self, text: str) -> bool:
        if self._remembered_index != self._message_index:
            return False
        trimmed = text.rstrip()
        if trimmed and trimmed == self._remembered_trimmed:
            return True
        normalized = normalize_for_dedupe(text)
        return bool(normalized) and normalized == self._remembered_normalized

    def _remember_assistant_text(self, text: str) -> None:
        self._remembered_index = self._message_index
        self._remembered_trimmed = text.rstrip()
        self._remembered_normalized = normalize_for_dedupe(text)

    def _push_assistant_text(self, text: str) -> None:
        if not text or self._should_skip_assistant_text(text):
            return
        self.assistant_texts.append(text)
        self._remember_assistant_text(text)

    def skip_already_posted(self, texts: Sequence[str]) -> None:
        """Texts an interrupted attempt of this run posted: blocks repeating one are dropped."""
        self._posted_normalized.extend(normalize_for_dedupe(t) for t in texts)

    def _is_sent_duplicate(self, text: str) -> bool:
        sent = self._sent_normalized + self._posted_normalized
        return is_duplicate_normalized(normalize_for_dedupe(text), sent) if sent else False

    def _emit_block_chunk(self, text: str) -> None:
        """The single gate every block passes.

        A block equal to the previous one is not dropped here: the chunker only ever holds
        new text (repeated and late text events are caught where they come in), so two equal
        blocks in a row are the reply's own content.
        """
        if self._suppress_block_chunks:
            return
        # Blank lines before a block mean nothing in chat; indentation is kept.
        chunk = self._block_stripper.feed(text).rstrip().lstrip("\n")
        if not chunk:
            return
        if self._is_sent_duplicate(chunk):
            return  # the agent already sent this with a messaging tool
        self._last_block_text = chunk
        self.assistant_texts.append(chunk)
        self._remember_assistant_text(chunk)
        if self._on_block_reply is None:
            return
        self._deliver(self._directives.consume(chunk))

    def _deliver(self, parsed: ReplyDirectives | None) -> None:
        if parsed is None or not parsed.renderable or self._on_block_reply is None:
            return
        reply = BlockReply(
            text=parsed.text,
            media_urls=list(parsed.media_urls),
            audio_as_voice=parsed.audio_as_voice,
            reply_to_id=parsed.reply_to_id,
            reply_to_current=parsed.reply_to_current,
            reply_to_tag=parsed.reply_to_tag,
            buttons=parsed.buttons,
            tts=parsed.tts,
        )
        self._blocks_this_message += 1
        self.block_replies.append(reply)
        self._on_block_reply(reply)

    # -- message end ------------------------------------------------------------------------

    def _on_message_end(self, message: Message) -> None:
        raw = _raw_text(message)
        if self._ended_text is not None:
            if normalize_for_dedupe(raw) == normalize_for_dedupe(self._ended_text):
                log.debug("repeated message_end ignored")
                return
            self._on_message_start()  # a second message without its message_start
        self.last_assistant_message = message
        promote_thinking_tags(message)
        if self.config.enforce_final_tag:
            # Enforce <final> on the raw text: extraction would remove the tags first.
            text = strip_tags(_raw_text(message), enforce_final=True).strip()
        else:
            text = strip_tags(extract_assistant_text(message)).strip()
        raw_thinking = ""
        if self._include_reasoning or self._stream_reasoning:
            raw_thinking = extract_thinking(message)
        formatted_reasoning = format_reasoning(raw_thinking)
        self._last_reasoning_formatted = formatted_reasoning

        added_during = len(self.assistant_texts) > self._baseline
        chunker_has_text = self._chunker is not None and self._chunker.has_buffered()
        has_block_text = chunker_has_text or bool(self._block_pieces)

        if self._include_reasoning and text and self._on_block_reply is None:
            # Reasoning is delivered with the final reply: keep only the clean answer.
            if added_during:
                del self.assistant_texts[self._baseline :]
                self.assistant_texts.append(text)
                self._remember_assistant_text(text)
            else:
                self._push_assistant_text(text)
            self._suppress_block_chunks = True
        elif not added_during and not chunker_has_text and text:
            self._push_assistant_text(text)  # a model that did not stream
        self._baseline = len(self.assistant_texts)

        message_end_mode = self.config.block_break == "message_end"
        reasoning_first = message_end_mode and not added_during
        if reasoning_first:
            self._emit_reasoning_block(formatted_reasoning)

        if (message_end_mode or has_block_text) and text and self._on_block_reply is not None:
            if chunker_has_text and self._chunker is not None:
                self._chunker.drain(True, self._emit_block_chunk)
                self._chunker.reset()
            elif (
                text != self._last_block_text
                and self._blocks_this_message == 0
                and not self._is_sent_duplicate(text)
            ):
                self._last_block_text = text
                self._deliver(self._directives.consume(text, final=True))

        if not reasoning_first:
            self._emit_reasoning_block(formatted_reasoning)
        if self._stream_reasoning and raw_thinking:
            self._stream_reasoning_text(raw_thinking)
        if not message_end_mode and self._on_block_reply is not None:
            self._deliver(self._directives.consume("", final=True))

        self._delta_pieces = []
        self._delta_joined = ""
        self._block_pieces = []
        if self._chunker is not None:
            self._chunker.reset()
        self._block_stripper.reset()
        self._partial.reset()
        self._ended_text = raw

    def _emit_reasoning_block(self, formatted: str) -> None:
        if (
            self._include_reasoning
            and formatted
            and self._on_block_reply is not None
            and formatted != self._last_reasoning_sent
        ):
            self._last_reasoning_sent = formatted
            reply = BlockReply(text=formatted)
            self.block_replies.append(reply)
            self._on_block_reply(reply)

    # -- tools ------------------------------------------------------------------------------

    def _on_tool_start(self, event: ToolExecutionStart) -> None:
        if self._on_block_reply is not None:
            self._flush_block_buffer()
        if self._on_block_flush is not None:
            self._on_block_flush()
        tool_name = normalize_tool_name(event.tool_name)
        send = messaging_send(self.config.target_forms, tool_name, event.args)
        if send is None:
            return
        call_id = event.tool_call_id
        if send.text:
            self._pending_texts[call_id] = send.text
        self._pending_targets[call_id] = send.target

    def _on_tool_end(self, event: ToolExecutionEnd) -> None:
        tool_name = normalize_tool_name(event.tool_name)
        failed = is_failed_tool_result(event.is_error, event.result)
        self.tool_metas.append((tool_name, event.tool_call_id))
        if failed:
            self.last_tool_error = ToolError(tool_name, _tool_error_text(event.result))
        call_id = event.tool_call_id
        was_send = call_id in self._pending_targets or call_id in self._pending_texts
        text = self._pending_texts.pop(call_id, None)
        target = self._pending_targets.pop(call_id, None)
        if failed or not was_send:
            return
        if text is not None:
            self._sent_texts.append(text)
            self._sent_normalized.append(normalize_for_dedupe(text))
            del self._sent_texts[:-MAX_MESSAGING_SENT]
            del self._sent_normalized[:-MAX_MESSAGING_SENT]
        if target is not None:
            self._sent_targets.append(target)
            del self._sent_targets[:-MAX_MESSAGING_SENT]
        else:
            self._sent_to_current = True

    # -- compaction and end -----------------------------------------------------------------

    def _on_compaction_end(self, will_retry: bool) -> None:
        self._compaction_in_flight = False
        if not will_retry:
            return
        self._pending_compaction_retries += 1
        # The run is retried from the start: forget what it produced so far.
        self.assistant_texts.clear()
        self.tool_metas.clear()
        self.last_tool_error = None
        self._sent_texts.clear()
        self._sent_normalized.clear()
        self._sent_targets.clear()
        self._sent_to_current = False
        self._pending_texts.clear()
        self._pending_targets.clear()
        self._reset_message_state()
        self._baseline = 0

    def _on_agent_end(self, event: AgentEnd) -> None:
        if self.last_assistant_message is None and event.messages:
            # A run recorded without its message events still names its answer here.
            answers = [m for m in event.messages if m.role == "assistant"]
            self.last_assistant_message = answers[-1] if answers else None
        if self._on_block_reply is not None:
            self._flush_block_buffer()
        self._block_stripper.reset()
        if self._pending_compaction_retries > 0:
            self._pending_compaction_retries -= 1
