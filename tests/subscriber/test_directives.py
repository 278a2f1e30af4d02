"""Reply directives, the silent token, and the streaming accumulator (8.1-8.3, contract 4.1)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from botd.subscriber.directives import (
    SILENT_TOKEN,
    DirectiveAccumulator,
    ReplyDirectives,
    is_silent_reply,
    parse_inline_directives,
    parse_reply_directives,
    strip_trailing_silent_token,
)
from botd.subscriber.media import parse_audio_tag
from tests.cases import case_ids, load_cases

DIRECTIVE_CASES = load_cases("directives")


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def assert_matches(result: Any, expect: dict[str, Any]) -> None:
    """Assert only the keys the case gives (camelCase in the JSON)."""
    for key, value in expect.items():
        if key == "mediaUrls" and value is None:
            value = []
        assert getattr(result, snake(key)) == value, key


def run_case(case: dict[str, Any]) -> None:
    given_input = case["input"]
    if "accumulator" in given_input:
        accumulator = DirectiveAccumulator()
        steps = given_input["accumulator"]
        assert len(steps) == len(case["expect"])
        for step, expect in zip(steps, case["expect"], strict=True):
            result = accumulator.consume(step["consume"], final=step.get("final", False))
            if expect is None:
                assert result is None
            else:
                assert result is not None
                assert_matches(result, expect)
    elif given_input.get("fn") == "parseAudioTag":
        assert_matches(parse_audio_tag(given_input["text"]), case["expect"])
    elif given_input.get("fn") == "parseReplyDirectives":
        result = parse_reply_directives(
            given_input["text"], current_message_id=given_input.get("currentMessageId")
        )
        assert_matches(result, case["expect"])
    else:
        pytest.fail(f"unknown directives case shape: {given_input!r}")


@pytest.mark.parametrize("case", DIRECTIVE_CASES, ids=case_ids(DIRECTIVE_CASES))
def test_directives_case(case: dict[str, Any]) -> None:
    run_case(case)


def test_cases_are_present() -> None:
    assert DIRECTIVE_CASES


# --- reply tags (8.2) -----------------------------------------------------------------------------


def test_reply_to_with_id_and_whitespace() -> None:
    result = parse_reply_directives("[[ reply_to :  abc-123  ]] Hi there")
    assert result.text == "Hi there"
    assert result.reply_to_id == "abc-123"
    assert result.reply_to_tag is True
    assert result.reply_to_current is False


def test_last_explicit_id_wins() -> None:
    result = parse_reply_directives("[[reply_to:1]] one [[reply_to: 2]] two")
    assert result.reply_to_id == "2"
    assert result.text == "one two"


def test_explicit_id_wins_over_current() -> None:
    result = parse_reply_directives("[[reply_to:9]] [[reply_to_current]] x", current_message_id="m")
    assert result.reply_to_id == "9"
    assert result.reply_to_current is True


def test_reply_to_current_with_current_message_id() -> None:
    result = parse_reply_directives("[[reply_to_current]] Yo", current_message_id="  m-42 ")
    assert result.reply_to_id == "m-42"
    assert result.reply_to_current is True
    assert result.reply_to_tag is True
    assert result.text == "Yo"


def test_reply_to_current_without_current_message_id() -> None:
    result = parse_reply_directives("[[reply_to_current]] Yo")
    assert result.reply_to_id is None
    assert result.reply_to_current is True
    assert result.reply_to_tag is True


def test_blank_current_message_id_gives_no_id() -> None:
    assert (
        parse_reply_directives("[[reply_to_current]] Yo", current_message_id="  ").reply_to_id
        is None
    )


def test_reply_tags_are_case_insensitive() -> None:
    result = parse_reply_directives("[[REPLY_TO_CURRENT]] a [[Reply_To: X]]")
    assert (result.text, result.reply_to_current, result.reply_to_id) == ("a", True, "X")


def test_each_tag_becomes_a_space() -> None:
    assert parse_reply_directives("a[[reply_to_current]]b").text == "a b"


def test_id_may_not_span_a_newline() -> None:
    text = "[[reply_to: a\nb]] hi"
    result = parse_reply_directives(text)
    assert result.reply_to_tag is False
    assert result.text == text


def test_whitespace_is_normalised_only_when_a_reply_tag_was_found() -> None:
    assert parse_reply_directives("  a   b \n\n  c").text == "  a   b \n\n  c"
    assert parse_reply_directives("[[reply_to_current]]  a \t b \n\n  c").text == "a b\n\nc"


def test_normalisation_keeps_fenced_code() -> None:
    text = "[[reply_to_current]] Here:\n```py\nif x:\n    y  =  1\n```\n  done"
    assert parse_reply_directives(text).text == "Here:\n```py\nif x:\n    y  =  1\n```\ndone"


def test_no_reply_tag_means_no_reply_state() -> None:
    result = parse_reply_directives("Hello", current_message_id="m")
    assert (result.reply_to_id, result.reply_to_current, result.reply_to_tag) == (
        None,
        False,
        False,
    )


def test_parse_inline_directives_reports_tags_it_keeps() -> None:
    kept = parse_inline_directives("[[reply_to:7]] [[audio_as_voice]] hi", strip_reply_tags=False)
    assert kept.text == "[[reply_to:7]] [[audio_as_voice]] hi"
    assert kept.has_reply_tag and kept.has_audio_tag and kept.audio_as_voice
    assert kept.reply_to_id == "7"

    stripped = parse_inline_directives("[[reply_to:7]] [[audio_as_voice]] hi", strip_audio_tag=True)
    assert stripped.text == "hi"
    assert stripped.reply_to_explicit_id == "7"


def test_parse_inline_directives_empty() -> None:
    result = parse_inline_directives(None)
    assert result.text == ""
    assert not (result.has_reply_tag or result.has_audio_tag or result.reply_to_current)


# --- media and audio through parse_reply_directives (8.1) -----------------------------------------


def test_media_and_audio_are_split_out() -> None:
    result = parse_reply_directives(
        "[[reply_to_current]] Listen [[audio_as_voice]]\nMEDIA: /tmp/v.ogg", current_message_id="5"
    )
    assert result == ReplyDirectives(
        text="Listen",
        media_urls=["/tmp/v.ogg"],
        reply_to_id="5",
        reply_to_current=True,
        reply_to_tag=True,
        audio_as_voice=True,
        is_silent=False,
    )


def test_media_urls_empty_list_without_media() -> None:
    assert parse_reply_directives("hello").media_urls == []


def test_renderable() -> None:
    assert parse_reply_directives("hi").renderable
    assert parse_reply_directives("MEDIA: /tmp/a.png").renderable
    assert parse_reply_directives("[[audio_as_voice]]").renderable
    assert not parse_reply_directives("[[reply_to_current]]").renderable
    assert not parse_reply_directives("NO_REPLY").renderable


# --- the silent token (8.5 with contract 4.1) -----------------------------------------------------


@pytest.mark.parametrize(
    "text", ["NO_REPLY", "  NO_REPLY\n", "NO_REPLY NO_REPLY", "NO_REPLY\n\nNO_REPLY  NO_REPLY "]
)
def test_token_only_reply_is_silent(text: str) -> None:
    assert is_silent_reply(text)
    result = parse_reply_directives(text)
    assert result.is_silent is True
    assert result.text == ""


@pytest.mark.parametrize(
    "text", ["", "   ", "All done. NO_REPLY", "NO_REPLY but here is more", "NO_REPLYX", "no_reply"]
)
def test_not_silent(text: str) -> None:
    assert not is_silent_reply(text)


def test_substantive_reply_ending_with_token_is_delivered_without_it() -> None:
    result = parse_reply_directives("All done. NO_REPLY")
    assert result.is_silent is False
    assert result.text == "All done."


def test_reply_starting_with_token_is_delivered_unchanged() -> None:
    result = parse_reply_directives("NO_REPLY is what I would say, but here is the answer.")
    assert result.is_silent is False
    assert result.text == "NO_REPLY is what I would say, but here is the answer."


def test_silent_after_reply_tag() -> None:
    result = parse_reply_directives("[[reply_to_current]] NO_REPLY", current_message_id="1")
    assert result.is_silent is True
    assert result.text == ""
    assert result.reply_to_tag is True


def test_silent_reply_keeps_media() -> None:
    result = parse_reply_directives("NO_REPLY\nMEDIA: /tmp/a.png")
    assert result.is_silent is True
    assert result.text == ""
    assert result.media_urls == ["/tmp/a.png"]


def test_decorated_token_only_reply_is_silent() -> None:
    for text in ("**NO_REPLY**", "NO_REPLY."):
        result = parse_reply_directives(text)
        assert (result.is_silent, result.text) == (True, ""), text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("All done. NO_REPLY", "All done."),
        ("All done.\nNO_REPLY\n", "All done."),
        ("Done **NO_REPLY**", "Done"),
        ("Done NO_REPLY NO_REPLY", "Done"),
        ("Done `NO_REPLY`.", "Done"),
        ("Nothing to strip", "Nothing to strip"),
        ("ends withNO_REPLY", "ends withNO_REPLY"),
        ("NO_REPLY in the middle, then text", "NO_REPLY in the middle, then text"),
    ],
)
def test_strip_trailing_silent_token(text: str, expected: str) -> None:
    assert strip_trailing_silent_token(text) == expected


def test_silent_token_constant() -> None:
    assert SILENT_TOKEN == "NO_REPLY"


# --- the streaming accumulator (8.3) --------------------------------------------------------------


def texts(results: list[ReplyDirectives | None]) -> list[str | None]:
    return [None if r is None else r.text for r in results]


def test_tag_split_across_chunks() -> None:
    acc = DirectiveAccumulator()
    assert acc.consume("[[reply_to_") is None
    result = acc.consume("current]] Yo")
    assert result is not None
    assert (result.text, result.reply_to_current, result.reply_to_tag) == ("Yo", True, True)


def test_tag_with_id_split_across_chunks() -> None:
    acc = DirectiveAccumulator()
    first = acc.consume("Sure. [[reply_to: 12")
    assert first is not None and first.text == "Sure." and not first.reply_to_tag
    result = acc.consume("3]] Done")
    assert result is not None
    assert (result.text, result.reply_to_id) == ("Done", "123")


def test_closing_brackets_split_across_chunks() -> None:
    acc = DirectiveAccumulator()
    assert acc.consume("[[reply_to_current]") is None
    result = acc.consume("] Hi")
    assert result is not None and (result.text, result.reply_to_current) == ("Hi", True)


def test_held_tail_grows_until_closed() -> None:
    acc = DirectiveAccumulator()
    assert acc.consume("[[reply") is None
    assert acc.consume("_to") is None
    assert acc.consume(": 77") is None
    result = acc.consume("]] ok")
    assert result is not None and (result.text, result.reply_to_id) == ("ok", "77")


def test_final_flushes_a_dangling_open_as_literal_text() -> None:
    acc = DirectiveAccumulator()
    first = acc.consume("Hi [[")
    assert first is not None and first.text == "Hi"
    last = acc.consume("", final=True)
    assert last is not None and last.text == "[["


def test_final_flushes_held_text_with_new_text() -> None:
    acc = DirectiveAccumulator()
    assert acc.consume("[[not a tag") is None
    last = acc.consume(" after", final=True)
    assert last is not None and last.text == "[[not a tag after"


def test_final_does_not_hold_back() -> None:
    result = DirectiveAccumulator().consume("x [[", final=True)
    assert result is not None and result.text == "x [["


def test_unclosed_open_is_held_back_from_the_last_occurrence() -> None:
    acc = DirectiveAccumulator()
    first = acc.consume("a [[b]] c [[d")
    assert first is not None and first.text == "a [[b]] c"
    assert texts([acc.consume("", final=True)]) == ["[[d"]


def test_new_open_in_later_chunk_releases_the_earlier_tail() -> None:
    acc = DirectiveAccumulator()
    assert acc.consume("[[x") is None
    released = acc.consume(" y [[z")
    assert released is not None and released.text == "[[x y"
    assert texts([acc.consume("", final=True)]) == ["[[z"]


def test_open_across_the_seam() -> None:
    acc = DirectiveAccumulator()
    assert acc.consume("[[a[") is None
    released = acc.consume("[reply_to_current")
    assert released is not None and released.text == "[[a"
    result = acc.consume("]] b")
    assert result is not None and (result.text, result.reply_to_current) == ("b", True)


def test_tag_only_chunk_is_stashed_until_content() -> None:
    acc = DirectiveAccumulator()
    assert acc.consume("[[reply_to: 42]]") is None
    result = acc.consume("Hello")
    assert result is not None
    assert (result.text, result.reply_to_id, result.reply_to_tag) == ("Hello", "42", True)
    # The stash is used once.
    after = acc.consume("More")
    assert after is not None
    assert (after.reply_to_id, after.reply_to_tag, after.reply_to_current) == (None, False, False)


def test_this_chunks_explicit_id_wins_over_pending() -> None:
    acc = DirectiveAccumulator()
    assert acc.consume("[[reply_to: 1]]") is None
    result = acc.consume("[[reply_to: 2]] Hi")
    assert result is not None and result.reply_to_id == "2"


def test_pending_state_merges_with_chunk_state() -> None:
    acc = DirectiveAccumulator()
    assert acc.consume("[[reply_to_current]]") is None
    assert acc.consume("[[reply_to: 8]]") is None
    result = acc.consume("Text")
    assert result is not None
    assert (result.reply_to_current, result.reply_to_id, result.reply_to_tag) == (True, "8", True)


def test_audio_tag_in_accumulator() -> None:
    acc = DirectiveAccumulator()
    result = acc.consume("Hello [[audio_as_voice]]")
    assert result is not None and (result.text, result.audio_as_voice) == ("Hello", True)
    alone = DirectiveAccumulator().consume("[[audio_as_voice]]")
    assert alone is not None and (alone.text, alone.audio_as_voice) == ("", True)


def test_audio_tag_split_across_chunks() -> None:
    acc = DirectiveAccumulator()
    assert acc.consume("Hi [[audio_") is not None
    result = acc.consume("as_voice]]")
    assert result is not None and (result.text, result.audio_as_voice) == ("", True)


def test_media_in_accumulator() -> None:
    result = DirectiveAccumulator().consume("Look\nMEDIA: https://example.com/a.png")
    assert result is not None
    assert (result.text, result.media_urls) == ("Look", ["https://example.com/a.png"])


def test_silent_chunk_gives_nothing() -> None:
    acc = DirectiveAccumulator()
    assert acc.consume("NO_REPLY") is None
    result = acc.consume("Actually, here you go. NO_REPLY")
    assert result is not None and result.text == "Actually, here you go."


def test_empty_chunks_give_nothing() -> None:
    acc = DirectiveAccumulator()
    assert acc.consume("") is None
    assert acc.consume("", final=True) is None


def test_reset_forgets_tail_and_pending_state() -> None:
    acc = DirectiveAccumulator()
    assert acc.consume("[[reply_to_current]]") is None
    assert acc.consume("[[reply_to:") is None
    acc.reset()
    result = acc.consume("Fresh")
    assert result is not None
    assert (result.text, result.reply_to_tag, result.reply_to_current) == ("Fresh", False, False)


def test_accumulator_has_no_current_message_id() -> None:
    result = DirectiveAccumulator().consume("[[reply_to_current]] Hi")
    assert result is not None and result.reply_to_id is None and result.reply_to_current


def test_long_unclosed_tail_is_released_whole() -> None:
    # A "[[" that never closes makes every later piece part of the held tail: nothing comes
    # out until the final flush, which releases all of it, in order, as literal text.
    acc = DirectiveAccumulator()
    assert acc.consume("[[") is None
    pieces = [f"piece {i} " for i in range(5_000)]
    for piece in pieces:
        assert acc.consume(piece) is None
    result = acc.consume("", final=True)
    assert result is not None
    assert result.text == ("[[" + "".join(pieces)).strip()


# --- properties -----------------------------------------------------------------------------------

WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCXYZ0123456789.,!?-'", min_size=1, max_size=8)
TAGS = st.sampled_from(
    [
        "[[reply_to_current]]",
        "[[ reply_to: msg-7 ]]",
        "[[reply_to:42]]",
        "[[audio_as_voice]]",
        "[[ AUDIO_AS_VOICE ]]",
    ]
)
SEPARATORS = st.sampled_from([" ", "  ", "\n", "\n\n", "\t", " \n "])


@st.composite
def reply_and_chunks(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """A reply made of words and directive tags, and the reply cut at random points."""
    pieces = draw(st.lists(st.one_of(WORDS, WORDS, TAGS), min_size=1, max_size=30))
    words = [piece for piece in pieces if not piece.startswith("[[")]
    text = ""
    for piece in pieces:
        text += piece + draw(SEPARATORS)
    cuts = sorted(draw(st.sets(st.integers(0, len(text)), max_size=12)))
    chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    return words, chunks


@given(reply_and_chunks())
@settings(max_examples=300)
def test_accumulator_loses_no_words(data: tuple[list[str], list[str]]) -> None:
    words, chunks = data
    acc = DirectiveAccumulator()
    results = [acc.consume(chunk) for chunk in chunks]
    results.append(acc.consume("", final=True))
    joined = "".join(r.text for r in results if r is not None)
    position = 0
    for word in words:
        found = joined.find(word, position)
        assert found >= 0, (word, joined)
        position = found + len(word)


class NaiveAccumulator:
    """Spec 8.3 written the obvious way (concatenate, then search): the model for the real one."""

    def __init__(self) -> None:
        self.tail = ""
        self.pending: tuple[str | None, bool, bool] = (None, False, False)

    def consume(self, raw: str, final: bool = False) -> ReplyDirectives | None:
        combined = self.tail + raw
        self.tail = ""
        if not final:
            open_at = combined.rfind("[[")
            if open_at >= 0 and combined.find("]]", open_at + 2) < 0:
                self.tail = combined[open_at:]
                combined = combined[:open_at]
        if not combined:
            return None
        parsed = parse_reply_directives(combined)
        pending_id, pending_current, pending_tag = self.pending
        explicit_id = parsed.reply_to_id or pending_id
        saw_current = parsed.reply_to_current or pending_current
        has_tag = parsed.reply_to_tag or pending_tag
        merged = ReplyDirectives(
            text=parsed.text,
            media_urls=parsed.media_urls,
            reply_to_id=explicit_id,
            reply_to_current=saw_current,
            reply_to_tag=has_tag,
            audio_as_voice=parsed.audio_as_voice,
            is_silent=parsed.is_silent,
        )
        if not merged.renderable:
            if has_tag:
                self.pending = (explicit_id, saw_current, has_tag)
            return None
        self.pending = (None, False, False)
        return merged


BRACKETY = st.text(alphabet="[]ab :_\n", max_size=12) | st.sampled_from(
    ["[[reply_to_current]]", "[[reply_to: 5]]", "[[audio_as_voice]]", "[[", "]]", "[", "]"]
)


@given(st.lists(st.tuples(BRACKETY, st.booleans()), max_size=15))
@settings(max_examples=400)
def test_accumulator_matches_the_naive_model(steps: list[tuple[str, bool]]) -> None:
    real = DirectiveAccumulator()
    model = NaiveAccumulator()
    for chunk, final in [*steps, ("", True)]:
        assert real.consume(chunk, final=final) == model.consume(chunk, final=final), chunk


def test_streamed_reply_to_current_resolves_to_the_current_message() -> None:
    """Blocks parsed piece by piece resolve ``[[reply_to_current]]`` like final replies do;
    an explicit id still wins, and a tag-only piece carries over to the next one."""
    acc = DirectiveAccumulator(current_message_id="42")
    parsed = acc.consume("[[reply_to_current]] yes")
    assert parsed is not None and parsed.reply_to_id == "42" and parsed.reply_to_current
    assert acc.consume("[[reply_to_current]]") is None
    carried = acc.consume("then this")
    assert carried is not None and carried.reply_to_id == "42"
    explicit = acc.consume("[[reply_to_current]] [[reply_to: 7]] that")
    assert explicit is not None and explicit.reply_to_id == "7"
    plain = acc.consume("no tag")
    assert plain is not None and plain.reply_to_id is None
    unknown = DirectiveAccumulator().consume("[[reply_to_current]] x")
    assert unknown is not None and unknown.reply_to_id is None
