"""The block chunker (spec subscriber.md section 5, with botd's departures)."""

from __future__ import annotations

import pytest

from botd.subscriber import BlockChunker
from botd.text.fences import fence_at, fences_balanced, parse_fence_spans


def drain(text: str, minimum: int, maximum: int, pref: str = "paragraph", force: bool = False):
    chunker = BlockChunker(minimum, maximum, pref)  # type: ignore[arg-type]
    chunker.append(text)
    out: list[str] = []
    chunker.drain(force, out.append)
    return out, chunker.buffer


def stream(text: str, minimum: int, maximum: int, pref: str = "paragraph", step: int = 1):
    chunker = BlockChunker(minimum, maximum, pref)  # type: ignore[arg-type]
    out: list[str] = []
    for i in range(0, len(text), step):
        chunker.append(text[i : i + step])
        chunker.drain(False, out.append)
    chunker.drain(True, out.append)
    return out


# --- 5.1 fence spans ----------------------------------------------------------------------


def test_fence_spans_open_and_close_with_same_marker_and_length() -> None:
    text = "a\n````md\n```\ninner\n````\nb"
    (span,) = parse_fence_spans(text)
    assert span.closed and span.marker == "````" and text[span.start : span.end].endswith("````")


def test_tilde_fence_is_not_closed_by_backticks() -> None:
    (span,) = parse_fence_spans("~~~\ncode\n```\nmore")
    assert not span.closed and span.marker == "~~~"


def test_indent_of_four_spaces_is_not_a_fence() -> None:
    assert parse_fence_spans("    ```\ncode") == []


def test_breaks_at_span_start_and_closed_end_are_outside() -> None:
    text = "x\n```\ncode\n```\ny"
    spans = parse_fence_spans(text)
    assert fence_at(spans, spans[0].start) is None
    assert fence_at(spans, spans[0].end) is None
    assert fence_at(spans, spans[0].start + 1) is not None


def test_break_at_the_end_of_an_open_fence_is_inside() -> None:
    text = "```\ncode still streaming"
    assert fence_at(parse_fence_spans(text), len(text)) is not None


# --- 5.2 drain ----------------------------------------------------------------------------


def test_nothing_drains_below_min() -> None:
    out, buffered = drain("short", 10, 20)
    assert out == [] and buffered == "short"


def test_forced_drain_of_short_content_is_never_split() -> None:
    out, _ = drain("One.\n\nTwo.", 1, 100, force=True)
    assert out == ["One.\n\nTwo."]


def test_forced_drain_skips_whitespace_only() -> None:
    out, buffered = drain("  \n\n ", 1, 100, force=True)
    assert out == [] and buffered == ""


def test_soft_chunks_at_paragraph() -> None:
    out, buffered = drain("First block line\n\nSecond block line", 5, 25)
    assert out == ["First block line"] and buffered == "Second block line"


def test_non_forced_drain_emits_one_block_unless_the_rest_is_still_long() -> None:
    text = "aaaa aaaa.\n\nbbbb bbbb.\n\ncccc cccc.\n\ndddd"
    out, buffered = drain(text, 5, 30)
    assert out == ["aaaa aaaa.\n\nbbbb bbbb."] and buffered.startswith("cccc")


def test_forced_drain_empties_the_buffer_in_order() -> None:
    text = "\n\n".join(f"Paragraph number {i} has words." for i in range(6))
    out, buffered = drain(text, 10, 70, force=True)
    assert buffered == ""
    assert " ".join(out).split() == text.split()
    assert all(len(b) <= 70 for b in out)


def test_reset_and_has_buffered() -> None:
    chunker = BlockChunker(5, 10)
    assert not chunker.has_buffered()
    chunker.append("abc")
    assert chunker.has_buffered() and len(chunker) == 3
    chunker.reset()
    assert not chunker.has_buffered() and chunker.buffer == ""


def test_min_and_max_are_sanitised() -> None:
    chunker = BlockChunker(0, -5)
    assert (chunker.min_chars, chunker.max_chars) == (1, 1)


# --- 5.3 break preference -----------------------------------------------------------------


def test_paragraph_preference_prefers_blank_lines_over_newlines() -> None:
    out, _ = drain("Line one here\nline two here\n\nline three here and more", 5, 45)
    assert out[0] == "Line one here\nline two here"


def test_newline_preference_waits_for_a_line_end() -> None:
    out, buffered = drain("a line without an end yet", 5, 100, "newline")
    assert out == [] and buffered == "a line without an end yet"


def test_sentence_preference_breaks_after_punctuation() -> None:
    out, _ = drain("First sentence here. Second one! Third? More text to come", 5, 50, "sentence")
    assert out == ["First sentence here. Second one! Third?"]


def test_a_period_at_the_end_of_the_stream_is_not_yet_a_sentence_end() -> None:
    # "3." may become "3.14": wait for the character after it.
    out, buffered = drain("The value is 3.", 5, 100, "sentence")
    assert out == [] and buffered == "The value is 3."
    chunker = BlockChunker(5, 100, "sentence")
    chunker.append("The value is 3.")
    chunker.append("14 exactly. And more")
    blocks: list[str] = []
    chunker.drain(False, blocks.append)
    assert blocks == ["The value is 3.14 exactly."]


def test_no_mid_sentence_cut_before_max() -> None:
    # The reference cut at whitespace as soon as min_chars were buffered (issue #143641).
    blocks = stream("First paragraph here.\n\nSecond paragraph here.\n\nThird.", 10, 40)
    assert blocks == ["First paragraph here.", "Second paragraph here.", "Third."]


def test_whitespace_fallback_once_the_buffer_reaches_max() -> None:
    out, _ = drain("word " * 20, 5, 30)
    assert out and all(len(b) <= 30 for b in out)
    assert not out[0].endswith(" ")


def test_hard_cut_at_max_without_whitespace() -> None:
    out, buffered = drain("x" * 25, 5, 10)
    assert out == ["x" * 10, "x" * 10] and buffered == "x" * 5


# --- fences -------------------------------------------------------------------------------


@pytest.mark.parametrize("step", [1, 3])
def test_a_fence_cut_when_only_the_next_lines_indentation_streamed_is_reopened(step: int) -> None:
    code = "".join(f"    value_{i} = compute({i})\n" for i in range(12))
    blocks = stream(f"```python\ndef step():\n{code}```\n\nAfter the code.", 20, 60, step=step)
    # Every piece of the code is in its fence, and no line lost its indentation.
    assert all(b.startswith("```python\n") for b in blocks if "value_" in b), blocks
    lines = [line for b in blocks for line in b.split("\n") if "value_" in line]
    assert lines == code.rstrip("\n").split("\n")
    assert blocks[-1] == "After the code."


def test_fence_that_fits_is_emitted_whole() -> None:
    out, _ = drain("Intro\n\n```bash\nline1\nline2\n```\n\nOutro", 5, 25, force=True)
    assert out == ["Intro", "```bash\nline1\nline2\n```", "Outro"]


def test_tilde_and_indented_fences_stay_whole() -> None:
    for fence in ("~~~\nline1\n\nline2\n~~~", "  ```\nline1\n\nline2\n  ```"):
        out, _ = drain(f"Intro\n\n{fence}\n\nOutro", 5, 30, force=True)
        assert any(fence in block for block in out), out
        assert all(fences_balanced(block) for block in out)


def test_long_fence_is_closed_and_reopened_at_line_boundaries() -> None:
    code = "\n".join(f"line {i} = value" for i in range(10))
    out, _ = drain(f"```py\n{code}\n```", 10, 60, force=True)
    assert len(out) > 1
    for block in out:
        assert block.startswith("```py\n") and block.rstrip().endswith("```")
        assert fences_balanced(block)
    lines = [ln for b in out for ln in b.splitlines() if ln.startswith("line")]
    assert lines == code.splitlines()


def test_single_long_line_fence_is_cut_at_max() -> None:
    out, _ = drain("```json\n" + "x" * 120 + "\n```", 10, 40, force=True)
    assert len(out) >= 2
    assert all(b.startswith("```json") and b.count("```") >= 2 for b in out)
    assert (
        "".join(b.replace("```json\n", "").replace("\n```\n", "").replace("\n```", "") for b in out)
        == "x" * 120
    )


def test_no_block_ends_inside_an_open_fence_while_streaming() -> None:
    # The buffer reaches max exactly while the fence's closing line has not arrived.
    text = "```\n" + "y" * 16
    chunker = BlockChunker(5, 20)
    chunker.append(text)
    out: list[str] = []
    chunker.drain(False, out.append)
    assert all(fences_balanced(b.rstrip()) for b in out)


def test_forced_drain_closes_an_unclosed_fence() -> None:
    out, _ = drain("Look:\n```py\nprint(1)", 100, 200, force=True)
    assert out == ["Look:\n```py\nprint(1)\n```\n"]


def test_a_fence_line_still_streaming_is_never_split() -> None:
    blocks = stream("Some words here.\n```python\ncode = 1\n```\nAfter.", 16, 16)
    assert all(fences_balanced(b.rstrip()) for b in blocks)
    assert not any(
        b.rstrip().endswith(("`", "``", "```pytho")) and not b.rstrip().endswith("```")
        for b in blocks
    )


def test_paragraph_break_right_after_a_fence_close() -> None:
    out, buffered = drain(
        "Intro\n```js\nconsole.log('x')\n```\n\nAfter first line\nAfter second line", 1, 40
    )
    assert out == ["Intro\n```js\nconsole.log('x')\n```"]
    assert buffered == "After first line\nAfter second line"


def test_a_cut_never_splits_a_closing_fence_line() -> None:
    # Found by the property test: the cut at max fell inside an empty fence's closing line.
    text = "w0\n\n```python\n```\n\nw1"
    out = stream(text, 16, 16, step=100)
    assert all(fences_balanced(b.rstrip()) for b in out)
    fragments = [ln for b in out for ln in b.splitlines() if ln.strip() in ("`", "``")]
    assert fragments == []
    assert "".join("".join(out).split()) == "".join(text.split())


def test_an_opening_line_longer_than_a_block_with_nothing_after_it_waits() -> None:
    # Seen from hypothesis: cut after the opening line alone, the fence was closed, reopened
    # with that same line, and cut again, forever (a hostile or odd answer froze the loop).
    opener = "``````[[reply_to_current]]`<b.b\n"
    out, buffered = drain(opener, 3, 12)
    assert out == [] and buffered == opener
    # Once code comes, each block carries some of it (an opening line longer than a block
    # leaves room for little), and the stream ends.
    blocks = stream(opener + "code\n``````\nafter", 3, 12)
    assert blocks[-1] == "after"
    assert all(fences_balanced(block) for block in blocks)
    assert opener + "``````\n" not in blocks
    shown = [block.removeprefix(opener).removesuffix("``````\n") for block in blocks[:-1]]
    assert "".join(shown).replace("\n", "").startswith("code")
