"""The HEARTBEAT_OK token (spec section 8.5)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from botd.subscriber import BlockReply
from botd.subscriber.heartbeat import (
    HEARTBEAT_TOKEN,
    HeartbeatStrip,
    heartbeat_reply,
    strip_heartbeat_token,
)
from tests.cases import case_ids, load_cases

HEARTBEAT_CASES = load_cases("heartbeat_strip")

SKIPPED = HeartbeatStrip(should_skip=True, text="", did_strip=True)


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@pytest.mark.parametrize("case", HEARTBEAT_CASES, ids=case_ids(HEARTBEAT_CASES))
def test_heartbeat_case(case: dict[str, Any]) -> None:
    given = case["input"]
    kwargs: dict[str, Any] = {}
    if "mode" in given:
        kwargs["mode"] = given["mode"]
    if "maxAckChars" in given:
        kwargs["max_ack_chars"] = given["maxAckChars"]
    result = strip_heartbeat_token(given["text"], **kwargs)
    for key, value in case["expect"].items():
        assert getattr(result, snake(key)) == value, key


def test_cases_are_present() -> None:
    assert HEARTBEAT_CASES


def test_token_constant() -> None:
    assert HEARTBEAT_TOKEN == "HEARTBEAT_OK"


@pytest.mark.parametrize("text", [None, "", " \n\t "])
def test_empty_input_is_skipped_without_strip(text: str | None) -> None:
    assert strip_heartbeat_token(text) == HeartbeatStrip(True, "", False)


def test_text_without_token_is_returned_trimmed() -> None:
    assert strip_heartbeat_token("  Hello there \n") == HeartbeatStrip(False, "Hello there", False)


@pytest.mark.parametrize("mode", ["heartbeat", "message"])
def test_token_only_is_skipped_in_both_modes(mode: Any) -> None:
    assert strip_heartbeat_token(" HEARTBEAT_OK ", mode=mode) == SKIPPED


def test_repeated_tokens_are_all_stripped() -> None:
    assert strip_heartbeat_token("HEARTBEAT_OK HEARTBEAT_OK\nHEARTBEAT_OK") == SKIPPED


def test_default_mode_is_heartbeat() -> None:
    assert strip_heartbeat_token("All fine HEARTBEAT_OK") == SKIPPED


def test_message_mode_delivers_the_rest() -> None:
    assert strip_heartbeat_token("ALERT HEARTBEAT_OK", mode="message") == HeartbeatStrip(
        False, "ALERT", True
    )


def test_heartbeat_mode_delivers_a_long_rest() -> None:
    alert = "x" * 301
    result = strip_heartbeat_token(f"HEARTBEAT_OK {alert}", mode="heartbeat")
    assert result == HeartbeatStrip(False, alert, True)


def test_heartbeat_mode_skips_a_rest_of_exactly_max_ack_chars() -> None:
    assert strip_heartbeat_token("HEARTBEAT_OK " + "x" * 300) == SKIPPED


def test_max_ack_chars_is_configurable() -> None:
    result = strip_heartbeat_token("HEARTBEAT_OK abc", mode="heartbeat", max_ack_chars=2)
    assert result == HeartbeatStrip(False, "abc", True)
    assert strip_heartbeat_token("HEARTBEAT_OK abc", max_ack_chars=3) == SKIPPED


def test_tokens_at_both_ends_are_stripped() -> None:
    result = strip_heartbeat_token("HEARTBEAT_OK Disk is full HEARTBEAT_OK", mode="message")
    assert result == HeartbeatStrip(False, "Disk is full", True)


def test_whitespace_in_the_rest_is_collapsed() -> None:
    result = strip_heartbeat_token("HEARTBEAT_OK\n\nline one\n   line two", mode="message")
    assert result == HeartbeatStrip(False, "line one line two", True)


@pytest.mark.parametrize(
    "text",
    [
        "**HEARTBEAT_OK**",
        "`HEARTBEAT_OK`",
        "_HEARTBEAT_OK_",
        "~~HEARTBEAT_OK~~",
        "<b>HEARTBEAT_OK</b>",
        "&nbsp;HEARTBEAT_OK&NBSP;",
    ],
)
def test_markup_wrapped_token_is_stripped(text: str) -> None:
    assert strip_heartbeat_token(text, mode="message") == SKIPPED


def test_markup_in_the_rest_is_kept_when_the_raw_text_strips() -> None:
    result = strip_heartbeat_token("HEARTBEAT_OK **Check the logs**", mode="message")
    assert result == HeartbeatStrip(False, "**Check the logs**", True)


def test_markup_wrapped_token_with_rest_uses_the_normalised_copy() -> None:
    result = strip_heartbeat_token("<p>Server down</p> <b>HEARTBEAT_OK</b>", mode="message")
    assert result == HeartbeatStrip(False, "Server down", True)


@pytest.mark.parametrize("mode", ["heartbeat", "message"])
def test_token_in_the_middle_is_untouched(mode: Any) -> None:
    text = "I replied HEARTBEAT_OK to the monitor earlier"
    assert strip_heartbeat_token(text, mode=mode) == HeartbeatStrip(False, text, False)


def test_a_heartbeat_run_posts_only_its_last_reply_and_nothing_when_quiet() -> None:
    narration = BlockReply(text="Let me look at the queue.")
    assert heartbeat_reply([narration, BlockReply(text="HEARTBEAT_OK")], 300) is None
    assert heartbeat_reply([narration, BlockReply(text="**HEARTBEAT_OK**")], 300) is None
    assert heartbeat_reply([], 300) is None
    alert = heartbeat_reply([narration, BlockReply(text="HEARTBEAT_OK\n\nQueue stuck.")], 5)
    assert alert == BlockReply(text="Queue stuck.")
    plain = BlockReply(text="Queue stuck.", reply_to_id="9")
    assert heartbeat_reply([plain, BlockReply(text="  ")], 300) is plain


def test_a_quiet_heartbeat_still_sends_the_files_it_names() -> None:
    reply = BlockReply(text="HEARTBEAT_OK", media_urls=["https://example.com/graph.png"])
    assert heartbeat_reply([reply], 300) == BlockReply(
        text="", media_urls=["https://example.com/graph.png"]
    )
