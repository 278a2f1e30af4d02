"""Tag stripping (spec subscriber.md section 6), whole and streamed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from botd.subscriber.tags import StreamingTagStripper, TagStripper, strip_tags


def streamed(text: str, sizes: list[int], *, enforce_final: bool = False) -> str:
    stripper = StreamingTagStripper(TagStripper(enforce_final=enforce_final))
    out: list[str] = []
    position = 0
    for size in sizes:
        out.append(stripper.feed(text[position : position + size]))
        position += size
    out.append(stripper.feed(text[position:]))
    out.append(stripper.flush())
    return "".join(out)


def test_thinking_block_removed_without_whitespace_repair() -> None:
    assert strip_tags("Hello <thinking>x</thinking> world") == "Hello  world"


def test_every_thinking_tag_name_and_case() -> None:
    for name in ("think", "thinking", "thought", "antthinking", "THINK", "Thinking"):
        assert strip_tags(f"a<{name}>b</{name}>c") == "ac"


def test_whitespace_inside_the_brackets() -> None:
    assert strip_tags("a< think >b</ think >c") == "ac"


def test_tags_with_attributes_are_not_streaming_tags() -> None:
    assert strip_tags('a<think type="x">b') == 'a<think type="x">b'


def test_unclosed_thinking_hides_the_rest() -> None:
    assert strip_tags("answer <think>and then reasoning") == "answer "


def test_no_nesting_count() -> None:
    assert strip_tags("<think>a<think>b</think>c</think>d") == "cd"


def test_tags_in_inline_code_are_kept() -> None:
    assert strip_tags("Use `<think>` here") == "Use `<think>` here"
    assert strip_tags("Use ``a ` <think> b`` here") == "Use ``a ` <think> b`` here"


def test_tags_in_fences_are_kept() -> None:
    text = "Example:\n  ````\n<thinking>code example</thinking>\n  ````\nDone."
    assert strip_tags(text) == text


def test_unclosed_inline_code_protects_the_rest() -> None:
    assert strip_tags("a `b <think>c") == "a `b <think>c"


def test_final_tags_removed_when_not_enforced() -> None:
    assert strip_tags("<final>Answer</final>") == "Answer"


def test_enforced_final_keeps_only_final_content() -> None:
    assert strip_tags("noise <final>A</final> more <final>B</final>", enforce_final=True) == "AB"
    assert strip_tags("no final at all", enforce_final=True) == ""


def test_state_carries_across_pieces() -> None:
    stripper = TagStripper()
    assert stripper.feed("before <think>hidden") == "before "
    assert stripper.feed(" still hidden</think> after") == " after"


def test_enforced_final_state_carries_across_pieces() -> None:
    stripper = TagStripper(enforce_final=True)
    assert stripper.feed("x <final>one ") == "one "
    assert stripper.feed("two</final> y") == "two"


def test_streaming_holds_a_split_tag() -> None:
    stripper = StreamingTagStripper(TagStripper())
    assert stripper.feed("Hi <thi") == "Hi "
    assert stripper.feed("nk>secret</think>!") == "!"


def test_streaming_releases_an_angle_that_is_not_a_tag() -> None:
    stripper = StreamingTagStripper(TagStripper())
    assert stripper.feed("a <") == "a "
    assert stripper.feed("b c") == "<b c"
    assert stripper.feed("x <thinker") == "x <thinker"


def test_streaming_holds_a_growing_fence_line() -> None:
    stripper = StreamingTagStripper(TagStripper())
    assert stripper.feed("x\n``") == "x\n"
    assert stripper.feed("`\n<think>kept</think>\n```\n") == "```\n<think>kept</think>\n```\n"


def test_thinking_collection_stream_form() -> None:
    stripper = TagStripper(collect_thinking=True)
    stripper.feed("<think>first part")
    assert stripper.thinking_so_far() == "first part"
    stripper.feed(" done</think> answer")
    assert stripper.thinking_so_far() == "first part done"


PIECES = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<final>",
        "</final>",
        "`",
        "```\n",
        "~~~\n",
        "\n",
        "a",
        " ",
        "<",
        ">",
        "< thought >",
    ]
)


@settings(max_examples=400, deadline=None)
@given(
    parts=st.lists(PIECES, max_size=40),
    sizes=st.lists(st.integers(1, 6), max_size=60),
    enforce=st.booleans(),
)
def test_streaming_equals_stripping_the_whole_text(
    parts: list[str], sizes: list[int], enforce: bool
) -> None:
    text = "".join(parts)
    assert streamed(text, sizes, enforce_final=enforce) == strip_tags(text, enforce_final=enforce)
