"""Properties of the subscriber over random replies split into random deltas."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from botd.events import (
    AgentEnd,
    AgentEvent,
    AssistantStreamEvent,
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
from botd.subscriber import (
    BlockChunker,
    BlockReply,
    ChunkingConfig,
    StreamSubscriber,
    SubscriberConfig,
)
from botd.text.fences import fences_balanced, match_fence_line

from .harness import Recorder, delta, message_end, message_start, text_end

# Unique words (a counter in each) keep two blocks from ever being equal, so the per-message
# duplicate guard never drops real content and "nothing lost" can be checked exactly.
FENCES = ["```", "~~~", "````", "```python"]
_UNIQUE_WORD = re.compile(r"\b(?:w|s|x|item|n|code)\d+\b")


@st.composite
def markdown_texts(draw: st.DrawFn) -> str:
    counter = iter(range(10_000))
    parts: list[str] = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["paragraph", "list", "fence", "long", "sentences"]))
        if kind == "paragraph":
            words = [f"w{next(counter)}" for _ in range(draw(st.integers(1, 30)))]
            parts.append(" ".join(words))
        elif kind == "sentences":
            sentences = [
                " ".join(f"s{next(counter)}" for _ in range(draw(st.integers(1, 8))))
                + draw(st.sampled_from([".", "!", "?"]))
                for _ in range(draw(st.integers(1, 5)))
            ]
            parts.append(" ".join(sentences))
        elif kind == "list":
            items = [
                f"- item{next(counter)} (n{next(counter)})" for _ in range(draw(st.integers(1, 6)))
            ]
            parts.append("\n".join(items))
        elif kind == "fence":
            opener = draw(st.sampled_from(FENCES))
            lines = [
                f"  code{next(counter)} = {next(counter)}" for _ in range(draw(st.integers(0, 12)))
            ]
            # Most fences close; some are left open (the model forgot, or the text ended).
            closer = opener.removesuffix("python") if draw(st.integers(0, 4)) else ""
            parts.append("\n".join([opener, *lines, closer]))
        else:
            parts.append(f"x{next(counter)}" + "y" * draw(st.integers(50, 400)))
    joiner = draw(st.sampled_from(["\n\n", "\n", "\n\n\n"]))
    return joiner.join(parts)


@st.composite
def splits(draw: st.DrawFn, text: str) -> list[str]:
    pieces: list[str] = []
    position = 0
    while position < len(text):
        size = draw(st.integers(1, 40))
        pieces.append(text[position : position + size])
        position += size
    return pieces


def _content(text: str) -> str:
    """Non-whitespace content outside fence lines (fences may be closed and reopened)."""
    kept = [line for line in text.split("\n") if match_fence_line(line) is None]
    return "".join("".join(kept).split())


def _stream(text: str, pieces: list[str], config: SubscriberConfig) -> Recorder:
    rec = Recorder(config)
    rec.feed(message_start(), *[delta(p) for p in pieces], text_end(), message_end(text))
    rec.feed(AgentEnd())
    return rec


# Blocks at least as long as the longest fence line the texts use: below that, a fence
# cannot be kept whole in any block.
SIZES = st.tuples(st.integers(16, 300), st.integers(0, 600)).map(lambda t: (t[0], t[0] + t[1]))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), sizes=SIZES, pref=st.sampled_from(["paragraph", "newline", "sentence"]))
def test_blocks_give_back_the_text_within_limits(
    data: Any, sizes: tuple[int, int], pref: Any
) -> None:
    text = data.draw(markdown_texts())
    pieces = data.draw(splits(text))
    minimum, maximum = sizes
    block_break = data.draw(st.sampled_from(["text_end", "message_end"]))
    config = SubscriberConfig(
        block_break=block_break, chunking=ChunkingConfig(minimum, maximum, pref)
    )
    rec = _stream(text, pieces, config)
    texts = rec.texts
    # Nothing lost, nothing repeated (up to whitespace at cut points and fence lines).
    assert _content("\n".join(texts)) == _content(text)
    # No block twice in one message (a block holding a unique word cannot repeat; the
    # content check above already rules out any repeated text). A limit too small for a
    # word cuts it, so a block may hold a piece of one ("code1" of "code10", "code12"):
    # only a whole word of the text that is no other word's beginning marks a block.
    words = set(_UNIQUE_WORD.findall(text))
    unique = {w for w in words if not any(o != w and o.startswith(w) for o in words)}
    marked = [t for t in texts if unique.intersection(_UNIQUE_WORD.findall(t))]
    assert len(set(marked)) == len(marked)
    for block in texts:
        # Balanced fences, within max_chars plus a closing fence line.
        assert fences_balanced(block), block
        assert len(block) <= maximum + len("\n````"), (len(block), maximum)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_no_chunking_gives_the_text_back_whole(data: Any) -> None:
    text = data.draw(markdown_texts())
    pieces = data.draw(splits(text))
    rec = _stream(text, pieces, SubscriberConfig(chunking=None))
    assert len(rec.texts) == 1
    assert rec.texts[0] == text.rstrip()


@settings(max_examples=150, deadline=None)
@given(data=st.data(), sizes=SIZES)
def test_chunker_forced_drain_keeps_everything(data: Any, sizes: tuple[int, int]) -> None:
    text = data.draw(markdown_texts())
    chunker = BlockChunker(*sizes)
    out: list[str] = []
    for piece in data.draw(splits(text)):
        chunker.append(piece)
        chunker.drain(False, out.append)
    chunker.drain(True, out.append)
    assert not chunker.has_buffered()
    assert _content("\n".join(out)) == _content(text)
    assert all(fences_balanced(block.rstrip()) for block in out)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_partial_replies_add_up_to_the_visible_text(data: Any) -> None:
    text = data.draw(markdown_texts())
    rec = Recorder(SubscriberConfig(chunking=None))
    rec.feed(message_start(), *[delta(p) for p in data.draw(splits(text))], text_end())
    assert "".join(p.delta for p in rec.partials) == text.strip()
    assert rec.partials[-1].text == text.strip()


# --- any event order ----------------------------------------------------------------------

TOKENS = [
    *"ab .\n`<>/[]:~",
    "<think>",
    "</think>",
    "[[reply_to_current]]",
    "MEDIA: https://x.y/z.png",
    "NO_REPLY",
    "```",
    "<final>",
]
TEXTS = st.lists(st.sampled_from(TOKENS), max_size=12).map("".join)


def _assistant(text: str) -> Message:
    return Message(role="assistant", content=[TextContent(text=text)])


EVENTS: st.SearchStrategy[AgentEvent] = st.one_of(
    st.builds(lambda: MessageStart(message=Message(role="assistant"))),
    st.builds(
        lambda kind, d, c: MessageUpdate(
            message=Message(role="assistant"),
            assistant_event=AssistantStreamEvent(type=kind, delta=d, content=c),
        ),
        st.sampled_from(["text_delta", "text_start", "text_end", "thinking_delta", "done"]),
        st.one_of(st.none(), TEXTS),
        st.one_of(st.none(), TEXTS),
    ),
    st.builds(lambda t: MessageEnd(message=_assistant(t)), TEXTS),
    st.builds(
        lambda i, name, text, to: ToolExecutionStart(
            tool_call_id=i, tool_name=name, args={"action": "send", "message": text, "to": to}
        ),
        st.sampled_from(["t1", "t2"]),
        st.sampled_from(["message", "exec", "telegram"]),
        TEXTS,
        st.one_of(st.none(), st.just("chat:1")),
    ),
    st.builds(
        lambda i, err, result: ToolExecutionEnd(
            tool_call_id=i, tool_name="message", result=result, is_error=err
        ),
        st.sampled_from(["t1", "t2", "t3"]),
        st.booleans(),
        st.one_of(st.none(), TEXTS, st.just({"details": {"status": "error"}})),
    ),
    st.just(AutoCompactionStart()),
    st.builds(lambda r: AutoCompactionEnd(will_retry=r), st.booleans()),
    st.just(AgentEnd()),
)


@settings(max_examples=400, deadline=None)
@given(
    events=st.lists(EVENTS, max_size=40),
    block_break=st.sampled_from(["text_end", "message_end"]),
    chunked=st.booleans(),
    reasoning=st.sampled_from(["off", "on", "stream"]),
    enforce=st.booleans(),
)
def test_never_raises_on_any_event_order(
    events: list[AgentEvent], block_break: Any, chunked: bool, reasoning: Any, enforce: bool
) -> None:
    config = SubscriberConfig(
        block_break=block_break,
        chunking=ChunkingConfig(3, 12) if chunked else None,
        reasoning=reasoning,
        enforce_final_tag=enforce,
    )
    blocks: list[BlockReply] = []
    sub = StreamSubscriber(
        config,
        on_block_reply=blocks.append,
        on_block_flush=lambda: None,
        on_partial_reply=lambda p: p.text,
        on_reasoning=lambda t: None,
    )
    for event in events:
        sub._dispatch(event)  # not handle(): its safety net would hide an exception
    for block in blocks:
        # Nothing empty is ever delivered.
        assert block.text.strip() or block.media_urls or block.audio_as_voice


class _AlwaysSearching(BlockChunker):
    """The chunker without its "nothing new to break at" shortcut."""

    def _nothing_new_to_break_at(self, buffer: str) -> bool:
        return False


@settings(max_examples=300, deadline=None)
@given(data=st.data(), sizes=SIZES, pref=st.sampled_from(["paragraph", "newline", "sentence"]))
def test_skipping_fruitless_searches_changes_nothing(
    data: Any, sizes: tuple[int, int], pref: Any
) -> None:
    text = data.draw(markdown_texts())
    pieces = data.draw(splits(text))
    results = []
    for chunker in (BlockChunker(*sizes, pref), _AlwaysSearching(*sizes, pref)):
        out: list[str] = []
        for piece in pieces:
            chunker.append(piece)
            chunker.drain(False, out.append)
        chunker.drain(True, out.append)
        results.append(out)
    assert results[0] == results[1]
