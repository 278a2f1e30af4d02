"""MEDIA lines and the audio tag (spec section 8.4)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from botd.subscriber.media import AudioTag, MediaSplit, parse_audio_tag, split_media
from tests.cases import case_ids, load_cases

MEDIA_CASES = load_cases("media_split")


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def expected_value(key: str, value: Any) -> Any:
    if key == "mediaUrls" and value is None:
        return []
    return value


@pytest.mark.parametrize("case", MEDIA_CASES, ids=case_ids(MEDIA_CASES))
def test_media_split_case(case: dict[str, Any]) -> None:
    result = split_media(case["input"])
    for key, value in case["expect"].items():
        assert getattr(result, snake(key)) == expected_value(key, value), key


def test_cases_are_present() -> None:
    assert MEDIA_CASES


# --- no media -------------------------------------------------------------------------------------


def test_plain_text_is_only_end_trimmed() -> None:
    assert split_media("  - item\n\n\n  more  \n\n") == MediaSplit(
        "  - item\n\n\n  more", [], False
    )


def test_whitespace_only_gives_empty_text() -> None:
    assert split_media(" \n\t \n") == MediaSplit("", [], False)


def test_media_urls_is_an_empty_list_without_media() -> None:
    assert split_media("hello").media_urls == []


def test_media_mid_prose_is_kept() -> None:
    text = "Send it with MEDIA: /tmp/a.png please"
    assert split_media(text) == MediaSplit(text, [], False)


def test_media_prefix_is_case_sensitive() -> None:
    assert split_media("media: /tmp/a.png").media_urls == []


def test_bare_media_prefix_is_kept() -> None:
    assert split_media("MEDIA:") == MediaSplit("MEDIA:", [], False)


def test_invalid_media_line_leaves_text_untouched() -> None:
    text = "Intro  text\nMEDIA: not-a-path"
    assert split_media(text) == MediaSplit(text, [], False)


# --- finding media ------------------------------------------------------------------------------


def test_media_line_is_removed_and_text_kept() -> None:
    result = split_media("Here it is\nMEDIA: https://example.com/a.png\nEnjoy")
    assert result == MediaSplit("Here it is\nEnjoy", ["https://example.com/a.png"], False)


def test_media_only_gives_empty_text() -> None:
    assert split_media("MEDIA: https://example.com/a.png") == MediaSplit(
        "", ["https://example.com/a.png"], False
    )


def test_indented_media_line() -> None:
    assert split_media("   MEDIA: /tmp/a.png").media_urls == ["/tmp/a.png"]


def test_multiple_media_lines() -> None:
    result = split_media("MEDIA: /tmp/a.png\ntext\nMEDIA: https://example.com/b.jpg")
    assert result.media_urls == ["/tmp/a.png", "https://example.com/b.jpg"]
    assert result.text == "text"


def test_multiple_media_on_one_line() -> None:
    result = split_media("MEDIA: https://example.com/a.png https://example.com/b.png")
    assert result.media_urls == ["https://example.com/a.png", "https://example.com/b.png"]
    assert result.text == ""


def test_invalid_parts_stay_in_text_when_media_found() -> None:
    result = split_media("MEDIA: https://example.com/a.png please")
    assert result.media_urls == ["https://example.com/a.png"]
    assert result.text == "please"


@pytest.mark.parametrize(
    "candidate",
    [
        "https://example.com/a.png",
        "HTTP://example.com/a.png",
        "/abs/a.png",
        "./rel/a.png",
        "../up/a.png",
        "~/home/a.png",
    ],
)
def test_valid_candidates(candidate: str) -> None:
    assert split_media(f"MEDIA: {candidate}").media_urls == [candidate]


@pytest.mark.parametrize(
    "candidate", ["ftp://example.com/a.png", "rel/a.png", "a.png", "C:file", "data:xyz"]
)
def test_invalid_candidates_are_not_media(candidate: str) -> None:
    text = f"MEDIA: {candidate}"
    assert split_media(text) == MediaSplit(text, [], False)


def test_file_scheme_is_removed() -> None:
    assert split_media("MEDIA: file:///tmp/a.png").media_urls == ["/tmp/a.png"]


def test_quote_and_bracket_characters_are_cleaned() -> None:
    assert split_media("MEDIA: (/tmp/a.png),").media_urls == ["/tmp/a.png"]
    assert split_media('MEDIA: ["/tmp/b.png"]').media_urls == ["/tmp/b.png"]


def test_backticked_payload() -> None:
    assert split_media("MEDIA: `/tmp/a.png`").media_urls == ["/tmp/a.png"]


@pytest.mark.parametrize("quote", ['"', "'", "`"])
def test_quoted_payload_allows_spaces(quote: str) -> None:
    result = split_media(f"MEDIA: {quote}/tmp/My Photo.png{quote}")
    assert result == MediaSplit("", ["/tmp/My Photo.png"], False)


def test_unquoted_path_with_spaces_is_one_path() -> None:
    result = split_media("MEDIA: /tmp/My Holiday Photo.png")
    assert result.media_urls == ["/tmp/My Holiday Photo.png"]


def test_unquoted_url_with_trailing_words_is_not_merged() -> None:
    # A URL does not look like a local path, so the words after it stay text.
    result = split_media("MEDIA: https://example.com/a.png and b")
    assert result.media_urls == ["https://example.com/a.png"]
    assert result.text == "and b"


def test_length_limit_is_4096() -> None:
    longest = "/" + "a" * 4095
    assert split_media(f"MEDIA: {longest}").media_urls == [longest]
    too_long = "/" + "a" * 4096
    assert split_media(f"MEDIA: {too_long}").media_urls == []


# --- fences ---------------------------------------------------------------------------------------


def test_media_line_inside_fence_is_kept() -> None:
    text = "Example:\n```\nMEDIA: /tmp/a.png\n```"
    assert split_media(text) == MediaSplit(text, [], False)


def test_media_line_inside_tilde_fence_is_kept() -> None:
    text = "~~~~\nMEDIA: https://example.com/a.png\n~~~~"
    assert split_media(text).media_urls == []


def test_media_after_fence_is_taken() -> None:
    result = split_media("```\nMEDIA: /in/code.png\n```\nMEDIA: /out/side.png")
    assert result.media_urls == ["/out/side.png"]
    assert result.text == "```\nMEDIA: /in/code.png\n```"


def test_cleanup_keeps_fenced_lines_as_they_are() -> None:
    text = "Code:\n```py\ndef f():\n    return  1\n\n\n```\n\nMEDIA: /tmp/a.png"
    result = split_media(text)
    assert result.media_urls == ["/tmp/a.png"]
    assert result.text == "Code:\n```py\ndef f():\n    return  1\n\n\n```"


# --- cleanup --------------------------------------------------------------------------------------


def test_cleanup_after_media() -> None:
    # Trailing spaces go, runs of spaces become one (an indent too), blank lines go.
    text = "First   line   \n\n\nSecond\n\nMEDIA: /tmp/a.png\n\n  Third"
    assert split_media(text).text == "First line\nSecond\n Third"


def test_leading_whitespace_is_trimmed_only_with_cleanup() -> None:
    assert split_media("  indented").text == "  indented"
    assert split_media("  indented\nMEDIA: /tmp/a.png").text == "indented"


# --- audio tag ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tag",
    ["[[audio_as_voice]]", "[[ audio_as_voice ]]", "[[AUDIO_AS_VOICE]]", "[[\taudio_as_voice]]"],
)
def test_audio_tag_is_detected_and_removed(tag: str) -> None:
    assert split_media(f"Listen {tag} now") == MediaSplit("Listen now", [], True)


def test_audio_tag_with_media() -> None:
    result = split_media("[[audio_as_voice]]\nMEDIA: /tmp/voice.ogg")
    assert result == MediaSplit("", ["/tmp/voice.ogg"], True)


def test_audio_tag_cleanup_collapses_blank_lines() -> None:
    assert split_media("One\n\n[[audio_as_voice]]\n\nTwo").text == "One\nTwo"


def test_double_bracket_without_audio_tag_is_untouched() -> None:
    text = "See [[wiki  link]]\n\n  next"
    assert split_media(text) == MediaSplit(text, [], False)


def test_parse_audio_tag() -> None:
    assert parse_audio_tag("a [[audio_as_voice]]  b") == AudioTag("a b", True, True)
    assert parse_audio_tag(None) == AudioTag("", False, False)
    assert parse_audio_tag("") == AudioTag("", False, False)
    assert parse_audio_tag("no tag") == AudioTag("no tag", False, False)
