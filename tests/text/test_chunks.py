"""Outbound splitting under a platform text limit (botd.text.chunks)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from botd.text.chunks import (
    DEFAULT_TEXT_CHUNK_LIMIT,
    chunk_by_line,
    chunk_text,
    resolve_text_chunk_limit,
)
from botd.text.fences import fences_balanced, parse_fence_spans
from tests.cases import case_ids, load_cases

# --- golden cases -------------------------------------------------------------------------

CHUNK_CASES = load_cases("chunk_text")
LIMIT_CASES = load_cases("chunk_limit")

# The reference's function names in the cases, as calls of this module.
REFERENCE_FUNCTIONS: dict[str, Callable[[str, int], list[str]]] = {
    "chunkText": lambda text, limit: chunk_text(text, limit, markdown=False),
    "chunkMarkdownText": lambda text, limit: chunk_text(text, limit, markdown=True),
    "chunkTextWithMode:length": lambda text, limit: chunk_text(
        text, limit, markdown=False, mode="length"
    ),
    "chunkMarkdownTextWithMode:newline": lambda text, limit: chunk_text(
        text, limit, markdown=True, mode="newline"
    ),
    "chunkByNewline": chunk_by_line,
}


def _hard_paren(text: str, chunks: list[str]) -> None:
    assert len(chunks[0]) == 20
    assert "".join(chunks) == text


def _fence_kept_whole(text: str, chunks: list[str]) -> None:
    assert any(chunk.rstrip() == "```bash\nline1\nline2\n```" for chunk in chunks)
    assert all(fences_balanced(chunk) for chunk in chunks)


def _long_marker(text: str, chunks: list[str]) -> None:
    assert len(chunks) > 1
    for chunk in chunks:
        assert len(chunk) <= 140
        assert chunk.startswith("````md\n")
        assert chunk.rstrip().endswith("````")


# Each prose property of a case, asserted literally.
PROPERTIES: dict[str, Callable[[str, list[str]], None]] = {
    "chunks[0] has length 20; ''.join(chunks) == input": _hard_paren,
    "some chunk.rstrip() == '```bash\\nline1\\nline2\\n```'; fences balanced in every chunk": (
        _fence_kept_whole
    ),
    ">1 chunks; each len <= 140, starts with '````md\\n', rstrip ends with '````'": _long_marker,
}


@pytest.mark.parametrize("case", CHUNK_CASES, ids=case_ids(CHUNK_CASES))
def test_chunk_case(case: dict[str, Any]) -> None:
    given_input = case["input"]
    chunks = REFERENCE_FUNCTIONS[given_input["fn"]](given_input["text"], given_input["limit"])
    expect = case["expect"]
    if isinstance(expect, list):
        assert chunks == expect
    else:
        PROPERTIES[expect["property"]](given_input["text"], chunks)


@pytest.mark.parametrize("case", LIMIT_CASES, ids=case_ids(LIMIT_CASES))
def test_chunk_limit_case(case: dict[str, Any]) -> None:
    # args are (provider, accountId, {fallbackLimit}): the fallback is the channel dock's limit.
    # With no config there is no configured value.
    assert case["input"]["config"] is None
    channel_limit = case["input"]["args"][2]["fallbackLimit"]
    assert resolve_text_chunk_limit(channel_limit) == case["expect"]


# --- resolve_text_chunk_limit -------------------------------------------------------------


def test_limit_prefers_positive_configured_value() -> None:
    assert resolve_text_chunk_limit(2000, 1500) == 1500
    assert resolve_text_chunk_limit(None, 1500) == 1500


def test_limit_falls_back_to_channel_then_default() -> None:
    assert resolve_text_chunk_limit(2000, 0) == 2000
    assert resolve_text_chunk_limit(2000, -5) == 2000
    assert resolve_text_chunk_limit(2000, None) == 2000
    assert resolve_text_chunk_limit(None) == DEFAULT_TEXT_CHUNK_LIMIT == 4000
    assert resolve_text_chunk_limit(0, None) == 4000


# --- common edges -------------------------------------------------------------------------


@pytest.mark.parametrize("markdown", [True, False])
@pytest.mark.parametrize("mode", ["length", "newline"])
def test_empty_and_unlimited(markdown: bool, mode: Any) -> None:
    assert chunk_text("", 10, markdown=markdown, mode=mode) == []
    long_text = "word " * 50
    assert chunk_text(long_text, 0, markdown=markdown, mode=mode) == [long_text]
    assert chunk_text(long_text, -1, markdown=markdown, mode=mode) == [long_text]


@pytest.mark.parametrize("markdown", [True, False])
@pytest.mark.parametrize("mode", ["length", "newline"])
def test_whitespace_only_text_gives_no_chunks(markdown: bool, mode: Any) -> None:
    assert chunk_text(" \n\t\n  ", 3, markdown=markdown, mode=mode) == []
    assert chunk_text("  \n ", 100, markdown=markdown, mode=mode) == []


def test_text_within_limit_is_returned_verbatim() -> None:
    text = "  indented\nline two\n"
    assert chunk_text(text, 100, markdown=False) == [text]
    assert chunk_text(text, 100) == [text]


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="chunk mode"):
        chunk_text("text", 10, mode="words")  # type: ignore[arg-type]


# --- plain chunking (chunkText) -----------------------------------------------------------


def plain(text: str, limit: int) -> list[str]:
    return chunk_text(text, limit, markdown=False)


def test_plain_breaks_at_last_whitespace() -> None:
    assert plain("alpha beta gamma delta", 12) == ["alpha beta", "gamma delta"]


def test_plain_prefers_last_newline_over_later_whitespace() -> None:
    assert plain("one two\nthree four five", 16) == ["one two", "three four five"]


def test_plain_ignores_newline_at_window_start() -> None:
    # A newline at index 0 of the window is not a break; the last space is.
    assert plain("\nab cd ef", 7) == ["\nab cd", "ef"]


def test_plain_keeps_parenthetical_together() -> None:
    assert plain("Heads up now (Though now I'm curious)ok", 35) == [
        "Heads up now",
        "(Though now I'm curious)ok",
    ]


def test_plain_nested_parentheses() -> None:
    assert plain("Hello (outer (inner) end) world", 26) == ["Hello (outer (inner) end)", "world"]


def test_plain_newline_inside_parentheses_is_not_a_break() -> None:
    assert plain("aa bb (cc\ndd) ee", 12) == ["aa bb", "(cc\ndd) ee"]


def test_plain_unmatched_closing_paren_is_ignored() -> None:
    assert plain("a) b c d e", 8) == ["a) b c", "d e"]


def test_plain_hard_cut_without_whitespace() -> None:
    assert plain("Supercalifragilisticexpialidocious", 10) == [
        "Supercalif",
        "ragilistic",
        "expialidoc",
        "ious",
    ]


def test_plain_hard_cut_inside_long_parenthetical() -> None:
    text = "(" + "a b " * 20 + ")"
    chunks = plain(text, 20)
    assert chunks[0] == text[:20].rstrip()
    assert all(len(chunk) <= 20 for chunk in chunks)


def test_plain_trims_chunk_ends_and_remainder_starts() -> None:
    assert plain("alpha   \n\n   beta gamma", 10) == ["alpha", "beta gamma"]


def test_plain_skips_only_whitespace_when_breaking() -> None:
    # The window is text[:limit]: a space just past it is not a candidate.
    assert plain("aaaa bbbb cccc dddd", 9) == ["aaaa", "bbbb", "cccc dddd"]
    assert plain("aaaa bbbb cccc dddd", 10) == ["aaaa bbbb", "cccc dddd"]


# --- markdown chunking (chunkMarkdownText) ------------------------------------------------


def has_empty_fence(chunk: str) -> bool:
    """An opening line followed directly by its closing line."""
    return any(
        span.closed and chunk.count("\n", span.start, span.end) == 1
        for span in parse_fence_spans(chunk)
    )


def check_markdown_chunks(chunks: list[str], limit: int) -> None:
    for chunk in chunks:
        assert len(chunk) <= limit, chunk
        assert fences_balanced(chunk), chunk
        assert not has_empty_fence(chunk), chunk
        assert chunk.strip(), chunks


def test_markdown_parens_outside_fences_only() -> None:
    # Parentheses inside a fence do not hold back a break after it.
    text = "```\n(((\n```\nalpha beta gamma"
    assert chunk_text(text, 20) == ["```\n(((\n```", "alpha beta gamma"]


def test_markdown_breaks_before_a_fence_that_does_not_fit() -> None:
    text = "intro line\n```py\n" + "x = 1\n" * 10 + "```"
    chunks = chunk_text(text, 30)
    assert chunks[0] == "intro line"
    check_markdown_chunks(chunks, 30)


@pytest.mark.parametrize(
    ("opening", "closing"),
    [("```py", "```"), ("````md", "````"), ("~~~", "~~~"), ("~~~~text", "~~~~")],
)
def test_markdown_fence_split_closes_and_reopens(opening: str, closing: str) -> None:
    body = "\n".join(f"line {n:02d}" for n in range(12))
    text = f"{opening}\n{body}\n{closing}"
    chunks = chunk_text(text, 40)
    assert len(chunks) > 1
    check_markdown_chunks(chunks, 40)
    for chunk in chunks:
        assert chunk.startswith(opening + "\n")
        assert chunk.endswith("\n" + closing)
    # Cuts fall at line ends: every content line arrives whole, once, in order.
    lines = [line for chunk in chunks for line in chunk.split("\n")[1:-1]]
    assert lines == body.split("\n")


def test_markdown_fence_split_prefers_newline_leaving_room_for_close() -> None:
    text = "```\naaaa\nbbbb\ncccc\n```"
    # "```\naaaa\nbbbb\n" is 14 characters; with "```" it makes 17.
    assert chunk_text(text, 17) == ["```\naaaa\nbbbb\n```", "```\ncccc\n```"]


def test_markdown_fence_cut_mid_line_when_no_newline_fits() -> None:
    text = "```\n" + "x" * 50 + "\n```"
    chunks = chunk_text(text, 20)
    check_markdown_chunks(chunks, 20)
    assert chunks[0] == "```\n" + "x" * 12 + "\n```"
    assert "".join(chunk[4:-4] for chunk in chunks) == "x" * 50


def test_markdown_indented_fence_reopens_with_its_indent() -> None:
    text = "  ```js\n" + "\n".join(f"  stmt{n};" for n in range(10)) + "\n  ```"
    chunks = chunk_text(text, 45)
    assert len(chunks) > 1
    check_markdown_chunks(chunks, 45)
    for chunk in chunks:
        assert chunk.startswith("  ```js\n")
        assert chunk.endswith("\n  ```")


def test_markdown_code_indentation_survives_a_split() -> None:
    body = "\n".join(f"    value_{n} = {n}" for n in range(8))
    text = f"```py\n{body}\n```"
    chunks = chunk_text(text, 60)
    lines = [line for chunk in chunks for line in chunk.split("\n")[1:-1]]
    assert lines == body.split("\n")


def test_markdown_never_makes_an_empty_fence() -> None:
    # The reference could close the fence right after reopening it; here both sides keep code.
    text = "```\n" + "\n".join(["a" * 10] * 6) + "\n```\nafter"
    for limit in range(19, 60):
        check_markdown_chunks(chunk_text(text, limit), limit)


@pytest.mark.parametrize(
    "text",
    [
        "```\n" + "x" * 10 + " " * 5 + "\n```",  # trailing spaces must not be all that is left
        "```\n\n\n\n" + "y" * 30 + "\n```",  # leading blank lines must not make a chunk alone
    ],
)
def test_markdown_split_fence_keeps_code_on_both_sides(text: str) -> None:
    chunks = chunk_text(text, 20)
    assert len(chunks) > 1
    check_markdown_chunks(chunks, 20)
    for chunk in chunks:
        body = chunk.split("\n")[1:-1]
        assert "".join(body).strip(), chunks


def test_markdown_text_before_and_after_a_split_fence() -> None:
    text = "Here is the code:\n\n```python\n" + "print(1)\n" * 12 + "```\n\nThat is all."
    chunks = chunk_text(text, 60)
    check_markdown_chunks(chunks, 60)
    assert chunks[0] == "Here is the code:"
    assert chunks[-1].endswith("That is all.")


def test_markdown_unclosed_fence_gets_a_closing_line() -> None:
    text = "Look:\n```sh\necho hi"
    assert chunk_text(text, 100) == ["Look:\n```sh\necho hi\n```"]


def test_markdown_unclosed_fence_splits_to_make_room_for_closing_line() -> None:
    # The text fits, but not with the closing line added.
    text = "```\n" + "abcdefgh\n" * 3 + "xyz"
    assert len(text) == 34
    chunks = chunk_text(text, 35)
    assert chunks == ["```\nabcdefgh\nabcdefgh\nabcdefgh\n```", "```\nxyz\n```"]


def test_markdown_too_long_opening_line_becomes_bare_marker_and_code() -> None:
    # "```" + 30 letters cannot share a 30-character chunk with "```": the chunks open with the
    # bare marker, and the info text is kept as the first code line.
    text = "```" + "i" * 30 + "\n" + "code line\n" * 2 + "```"
    chunks = chunk_text(text, 30)
    assert chunks == [
        "```\n" + "i" * 22 + "\n```",
        "```\n" + "i" * 8 + "\ncode line\n```",
        "```\ncode line\n```",
    ]


def test_markdown_long_opening_line_is_not_repeated() -> None:
    # An opening line over half the limit is shown once; later chunks reopen with the marker.
    text = "```" + "p" * 20 + "\n" + "code line\n" * 4 + "```"
    assert chunk_text(text, 40) == [
        "```" + "p" * 20 + "\ncode line\n```",
        "```\ncode line\ncode line\ncode line\n```",
    ]


def test_markdown_retries_with_bare_marker_when_every_cut_would_close_the_fence() -> None:
    # After the 33-character opening line only two code characters fit, and "(`" would leave
    # "```x" to start the next chunk, closing it. The bare marker leaves room.
    text = "```" + "q" * 30 + "\n(````x\n```"
    assert chunk_text(text, 40) == ["```\n" + "q" * 30 + "\n```", "```\n(````x\n```"]


def test_markdown_fence_inside_parentheses_without_a_clean_cut() -> None:
    # The newline before the fence is inside parentheses, so the window holds no safe break;
    # no cut inside the fence avoids "`````b" (a closing line), so the chunk ends before it.
    text = "see (this\n```\nx``````b\n```\n)"
    assert chunk_text(text, 16) == ["see", "(this", "```\nx``````b\n```", ")"]
    # With a little more room the fence is split after the text before it.
    chunks = chunk_text(text, 19)
    assert chunks == ["see", "(this\n```\nx````\n```", "```\n``b\n```\n)"]


def test_markdown_back_off_inside_code_keeps_spaces() -> None:
    # Cutting in front of "````x" would close the reopened "```" fence. Inside code the spaces
    # stay, so four of them ahead of the run are enough...
    text = "```\nabcdef     ````x\n```"
    assert chunk_text(text, 17) == ["```\nabcdef \n```", "```\n    ````x\n```"]
    # ...while with two, the cut moves before the word ahead of them.
    text = "```\nabcdef  ````x\n```"
    assert chunk_text(text, 16) == ["```\nabcde\n```", "```\nf  ````x\n```"]


def test_markdown_blank_info_of_too_long_opening_line_is_dropped() -> None:
    text = "```" + " " * 30 + "\n" + "code line\n" * 3 + "```"
    assert chunk_text(text, 30) == ["```\ncode line\ncode line\n```", "```\ncode line\n```"]


def test_markdown_marker_too_long_for_the_limit_is_cut_as_text() -> None:
    # Two 10-backtick lines and one character do not fit in 20: no balanced split exists.
    text = "`" * 10 + "\n" + "code line\n" * 3 + "`" * 10
    assert chunk_text(text, 20) == ["``````````\ncode line", "code line\ncode line", "``````````"]


def test_markdown_unsplittable_fence_is_cut_as_text() -> None:
    # The opening line's text cannot move into the code ("~~~~" would close it): nothing is
    # lost, at the price of balance.
    text = "~~~~ " * 20
    chunks = chunk_text(text, 30)
    assert all(len(chunk) <= 30 for chunk in chunks)
    assert " ".join(chunks).split() == text.split()


def test_markdown_long_closing_line_is_replaced_by_marker() -> None:
    text = "```\ncode\n" + "`" * 40
    assert chunk_text(text, 20) == ["```\ncode\n```"]


def test_markdown_closing_line_text_is_kept_when_the_marker_replaces_it() -> None:
    # A closing line may carry text after its run; it stays on the line when it fits...
    assert chunk_text("```\ncode\n" + "`" * 10 + " ok", 20) == ["```\ncode\n``` ok"]
    # ...and follows as text when it does not.
    assert chunk_text("```\ncode\n``````` trailing words here", 20) == [
        "```\ncode\n```",
        "trailing words here",
    ]


def test_markdown_mid_line_backticks_never_start_a_chunk() -> None:
    # Breaking at the space before "```" would make the next chunk open a fence.
    text = "aaaa bbbb ```cc dd"
    chunks = chunk_text(text, 12)
    assert chunks == ["aaaa", "bbbb ```cc", "dd"]
    check_markdown_chunks(chunks, 12)


def test_markdown_hard_cut_backs_off_from_backticks() -> None:
    text = "(" + "x" * 15 + "```yy)"
    # A hard cut at 16 would start the next chunk with "```yy)".
    assert chunk_text(text, 16) == ["(" + "x" * 14, "x```yy)"]
    # At 18 it leaves "`yy)", which is no fence line.
    assert chunk_text(text, 18) == ["(" + "x" * 15 + "``", "`yy)"]


def test_markdown_cut_inside_fence_does_not_make_a_closing_line() -> None:
    code = "s = '" + "y" * 8 + "```'"
    text = f"```\n{code}\n```"
    # At 21 the plain cut would land just before the inner backticks.
    for limit in range(18, 26):
        chunks = chunk_text(text, limit)
        check_markdown_chunks(chunks, limit)
        assert "".join(chunk[4:-4] for chunk in chunks).replace("\n", "") == code


def test_markdown_keeps_indent_after_break_but_drops_blank_lines() -> None:
    text = "para one is here\n\n\n    indented code"
    assert chunk_text(text, 20) == ["para one is here", "    indented code"]


def test_markdown_mid_line_break_trims_spaces() -> None:
    assert chunk_text("alpha    beta", 8) == ["alpha", "beta"]


# --- newline mode -------------------------------------------------------------------------


def test_newline_mode_one_chunk_per_paragraph() -> None:
    text = "Para one\n\nPara two\n \t\n\nPara three"
    expected = ["Para one", "Para two", "Para three"]
    assert chunk_text(text, 1000, mode="newline") == expected
    assert chunk_text(text, 1000, markdown=False, mode="newline") == expected


def test_newline_mode_single_newline_is_not_a_break() -> None:
    assert chunk_text("line one\nline two", 100, mode="newline") == ["line one\nline two"]


def test_newline_mode_blank_line_inside_fence_is_not_a_break() -> None:
    text = "```\na\n\nb\n```\n\nafter"
    assert chunk_text(text, 100, mode="newline") == ["```\na\n\nb\n```", "after"]
    assert chunk_text(text, 100, markdown=False, mode="newline") == ["```\na\n\nb\n```", "after"]


def test_newline_mode_long_paragraph_falls_back_to_markdown_chunking() -> None:
    fence = "```\n" + "row\n" * 10 + "```"
    chunks = chunk_text("intro\n\n" + fence, 20, mode="newline")
    assert chunks[0] == "intro"
    check_markdown_chunks(chunks, 20)
    assert all(chunk.startswith("```\n") for chunk in chunks[1:])


def test_newline_mode_long_paragraph_falls_back_to_plain_chunking() -> None:
    chunks = chunk_text("short\n\nalpha beta gamma delta", 12, markdown=False, mode="newline")
    assert chunks == ["short", "alpha beta", "gamma delta"]


def test_newline_mode_unclosed_fence_is_closed() -> None:
    assert chunk_text("a\n\n```\ncode", 100, mode="newline") == ["a", "```\ncode\n```"]


# --- chunk_by_line (chunkByNewline) -------------------------------------------------------


def test_by_line_one_chunk_per_trimmed_line() -> None:
    assert chunk_by_line("  one  \ntwo\n\tthree", 100) == ["one", "two", "three"]


def test_by_line_folds_blank_lines_into_next_chunk() -> None:
    assert chunk_by_line("one\n\n  \ntwo", 100) == ["one", "\n\ntwo"]


def test_by_line_caps_folded_blank_lines() -> None:
    assert chunk_by_line("one" + "\n" * 10 + "two", 4) == ["one", "\n\n\nt", "wo"]


def test_by_line_trailing_blank_lines_join_last_chunk() -> None:
    assert chunk_by_line("one\ntwo\n\n\n", 100) == ["one", "two\n\n\n"]
    # Not past the limit.
    assert chunk_by_line("one\ntwo\n\n\n", 4) == ["one", "two\n"]


def test_by_line_only_blank_lines() -> None:
    assert chunk_by_line("\n \n\n", 100) == []


def test_by_line_splits_long_lines_by_plain_chunking() -> None:
    assert chunk_by_line("short\nalpha beta (gamma delta)\nend", 12) == [
        "short",
        "alpha beta",
        "(gamma delta",
        ")",
        "end",
    ]


def test_by_line_long_line_after_blank_lines_keeps_the_prefix_in_budget() -> None:
    chunks = chunk_by_line("a\n\n\n" + "b" * 20, 10)
    assert chunks == ["a", "\n\nbbbbbbbb", "bbbbbbbbbb", "bb"]


def test_by_line_split_long_lines_false_keeps_lines_whole() -> None:
    long_line = "x" * 30
    assert chunk_by_line(f"a\n{long_line}", 10, split_long_lines=False) == ["a", long_line]


def test_by_line_trim_lines_false_keeps_indentation() -> None:
    assert chunk_by_line("  one\n\ttwo  \n", 100, trim_lines=False) == ["  one", "\ttwo  \n"]


def test_by_line_without_limit() -> None:
    long_line = "y" * 50
    assert chunk_by_line(f"{long_line}\n\n\nz", 0) == [long_line, "\n\nz"]


# --- properties ---------------------------------------------------------------------------

WORDS = st.one_of(
    st.text(alphabet="abcdefghij", min_size=1, max_size=8),
    # Long words, cheap to draw.
    st.builds(lambda char, size: char * size, st.sampled_from("klmnop"), st.integers(15, 90)),
    st.sampled_from(["(", ")", "(aside)", "(x (y) z)", "a)b", "(open", "close)"]),
)
MID_LINE_TICKS = st.sampled_from(["```", "~~~", "x```y", "````", "~~~~q", "``", "`"])

PLAIN_LINE = st.lists(WORDS, min_size=1, max_size=12).map(" ".join)


@st.composite
def ticked_line(draw: st.DrawFn) -> str:
    """A line with backtick and tilde runs anywhere but at its start: never a fence line."""
    first = draw(st.text(alphabet="abcdefghij", min_size=1, max_size=8))
    rest = draw(st.lists(st.one_of(WORDS, MID_LINE_TICKS), max_size=12))
    return " ".join([first, *rest])


def paragraph(line: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(line, min_size=1, max_size=4).map("\n".join)


@st.composite
def fence_block(
    draw: st.DrawFn, line: st.SearchStrategy[str] = PLAIN_LINE, closed: bool = True
) -> str:
    indent = draw(st.sampled_from(["", " ", "  ", "   "]))
    marker = draw(st.sampled_from(["```", "````", "~~~", "~~~~~"]))
    info = draw(st.sampled_from(["", "PY", "BASH", "LONGINFOX"]))
    body_line = st.one_of(line, st.just(""), line.map(lambda text: "    " + text))
    body = draw(st.lists(body_line, min_size=1, max_size=8))
    # At least one line with text, anywhere in the body.
    body.insert(draw(st.integers(0, len(body))), draw(line))
    block = f"{indent}{marker}{info}\n" + "\n".join(body)
    return block + f"\n{indent}{marker}" if closed else block


SEPARATORS = st.sampled_from(["\n", "\n\n", "\n\n\n", "\n  \n", "\n \t\n\n"])


@st.composite
def document(draw: st.DrawFn, *, fences: bool, ticks: bool = False) -> str:
    line = ticked_line() if ticks else PLAIN_LINE
    blocks = [paragraph(line)] + ([fence_block(line)] if fences else [])
    parts = draw(st.lists(st.one_of(*blocks), min_size=1, max_size=6))
    if fences and draw(st.booleans()):
        parts.append(draw(fence_block(line, closed=False)))
    text = parts[0]
    for part in parts[1:]:
        text += draw(SEPARATORS) + part
    return text


LIMITS = st.integers(min_value=20, max_value=300)
MODES = st.sampled_from(["length", "newline"])
CONTENT_CHARS = set("abcdefghijklmnop()")


def without_whitespace(text: str) -> str:
    return "".join(text.split())


def content_of(text: str) -> str:
    return "".join(char for char in text if char in CONTENT_CHARS)


def check_common(chunks: list[str], limit: int) -> None:
    for chunk in chunks:
        assert len(chunk) <= limit, (limit, chunk)
        assert chunk.strip(), chunks


@settings(max_examples=200, deadline=None)
@given(text=document(fences=True), limit=LIMITS, mode=MODES)
def test_property_markdown_with_fences(text: str, limit: int, mode: Any) -> None:
    chunks = chunk_text(text, limit, mode=mode)
    check_common(chunks, limit)
    for chunk in chunks:
        assert fences_balanced(chunk), (limit, chunk)
        assert not has_empty_fence(chunk), (limit, chunk)
    # Only fence lines (uppercase info strings, markers, whitespace) are added or dropped.
    assert content_of("".join(chunks)) == content_of(text)


@settings(max_examples=100, deadline=None)
@given(text=document(fences=True, ticks=True), limit=st.integers(30, 300), mode=MODES)
def test_property_markdown_fences_with_marker_runs_in_code(
    text: str, limit: int, mode: Any
) -> None:
    # Runs of backticks and tildes inside code must not close a reopened fence early. (Below
    # about 30 characters a chunk may not have room to step around a run.)
    chunks = chunk_text(text, limit, mode=mode)
    check_common(chunks, limit)
    for chunk in chunks:
        assert fences_balanced(chunk), (limit, chunk)
        assert not has_empty_fence(chunk), (limit, chunk)
    assert content_of("".join(chunks)) == content_of(text)


@settings(max_examples=150, deadline=None)
@given(text=document(fences=False, ticks=True), limit=LIMITS, mode=MODES)
def test_property_markdown_without_fences(text: str, limit: int, mode: Any) -> None:
    assert parse_fence_spans(text) == []
    chunks = chunk_text(text, limit, mode=mode)
    check_common(chunks, limit)
    # A cut never turns mid-line backticks into a fence at the start of a chunk.
    assert all(fences_balanced(chunk) for chunk in chunks), chunks
    assert without_whitespace("".join(chunks)) == without_whitespace(text)


@settings(max_examples=120, deadline=None)
@given(text=document(fences=True, ticks=True), limit=LIMITS, mode=MODES)
def test_property_plain_loses_nothing(text: str, limit: int, mode: Any) -> None:
    chunks = chunk_text(text, limit, markdown=False, mode=mode)
    check_common(chunks, limit)
    assert without_whitespace("".join(chunks)) == without_whitespace(text)


@settings(max_examples=100, deadline=None)
@given(text=document(fences=False), limit=LIMITS)
def test_property_by_line(text: str, limit: int) -> None:
    chunks = chunk_by_line(text, limit)
    check_common(chunks, limit)
    assert without_whitespace("".join(chunks)) == without_whitespace(text)
    assert len(chunks) >= sum(1 for line in text.split("\n") if line.strip())


# --- cost ---------------------------------------------------------------------------------


def big_reply(size: int) -> str:
    unit = (
        "Some prose (with a parenthetical remark) and more words here.\n\n"
        "```python\n" + "def f(x):\n    return x + 1\n" * 6 + "```\n"
        "- item one\n- item two\n\n"
    )
    return unit * (size // len(unit) + 1)


@pytest.mark.parametrize("limit", [100, 2000])
def test_megabyte_reply_is_chunked_within_the_limit(limit: int) -> None:
    # Its cost is measured by bench/outbound.py; here only what comes out is checked.
    text = big_reply(1_000_000)
    chunks = chunk_text(text, limit)
    newline_chunks = chunk_text(text, limit, mode="newline")
    plain_chunks = chunk_text(text, limit, markdown=False)
    for result in (chunks, newline_chunks, plain_chunks):
        assert all(len(chunk) <= limit for chunk in result)
    assert all(fences_balanced(chunk) for chunk in chunks)
    assert re.sub(r"\s", "", "".join(plain_chunks)) == re.sub(r"\s", "", text)
