"""The streaming subscriber: agent events in, chat blocks out, nothing twice.

What the rest of botd uses of the subscriber is exported here. Import from here; the
modules behind it may move.
"""

from ..text.chunks import chunk_by_line, chunk_text, resolve_text_chunk_limit
from .assistant_text import extract_assistant_text, extract_thinking, format_reasoning
from .chunker import BlockChunker, BreakPreference
from .dedupe import MessagingTarget, is_messaging_duplicate, normalize_for_dedupe
from .directives import DirectiveAccumulator, ReplyDirectives, parse_reply_directives
from .final import FinalReplyInput, Origin, build_final_replies, error_text_for
from .heartbeat import (
    HEARTBEAT_INSTRUCTION,
    HEARTBEAT_TOKEN,
    HeartbeatStrip,
    heartbeat_reply,
    strip_heartbeat_token,
)
from .media import MediaSplit, split_media
from .payloads import (
    BlockBreak,
    BlockReply,
    ChunkingConfig,
    PartialReply,
    ReasoningMode,
    RunSummary,
    SubscriberConfig,
    ToolError,
)
from .subscriber import StreamSubscriber

__all__ = [
    "HEARTBEAT_INSTRUCTION",
    "HEARTBEAT_TOKEN",
    "BlockBreak",
    "BlockChunker",
    "BlockReply",
    "BreakPreference",
    "ChunkingConfig",
    "DirectiveAccumulator",
    "FinalReplyInput",
    "HeartbeatStrip",
    "MediaSplit",
    "MessagingTarget",
    "Origin",
    "PartialReply",
    "ReasoningMode",
    "ReplyDirectives",
    "RunSummary",
    "StreamSubscriber",
    "SubscriberConfig",
    "ToolError",
    "build_final_replies",
    "chunk_by_line",
    "chunk_text",
    "error_text_for",
    "extract_assistant_text",
    "extract_thinking",
    "format_reasoning",
    "heartbeat_reply",
    "is_messaging_duplicate",
    "normalize_for_dedupe",
    "parse_reply_directives",
    "resolve_text_chunk_limit",
    "split_media",
    "strip_heartbeat_token",
]
