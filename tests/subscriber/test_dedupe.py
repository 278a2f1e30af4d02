"""Messaging-tool sends, targets and the duplicate test (botd.subscriber.dedupe)."""

from __future__ import annotations

import string
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from botd.channels.registry import target_forms
from botd.subscriber.dedupe import (
    MAX_MESSAGING_SENT,
    MIN_DUPLICATE_TEXT_LENGTH,
    MessagingSend,
    MessagingTarget,
    is_duplicate_normalized,
    is_failed_tool_result,
    is_messaging_duplicate,
    messaging_send,
    normalize_for_dedupe,
    normalize_messaging_target,
    normalize_tool_name,
    same_route,
)
from tests.cases import case_ids, load_cases

FORMS = target_forms()
"""The registered channels' target forms, as the daemon gives them to the subscriber."""

# --- golden cases -------------------------------------------------------------------------

NORMALIZE_CASES = load_cases("normalize")
DEDUPE_CASES = load_cases("dedupe")
TARGET_CASES = load_cases("messaging_target")
# final_reply cases that are decided by the route alone (the sent texts are not duplicates).
ROUTE_CASES = [
    case
    for case in load_cases("final_reply")
    if case["input"].get("messagingToolSentTargets") and case["input"].get("originatingTo")
]


@pytest.mark.parametrize("case", NORMALIZE_CASES, ids=case_ids(NORMALIZE_CASES))
def test_normalize_case(case: dict[str, Any]) -> None:
    assert normalize_for_dedupe(case["input"]) == case["expect"]


@pytest.mark.parametrize("case", DEDUPE_CASES, ids=case_ids(DEDUPE_CASES))
def test_dedupe_case(case: dict[str, Any]) -> None:
    given_input = case["input"]
    assert is_messaging_duplicate(given_input["text"], given_input["sentTexts"]) is case["expect"]


@pytest.mark.parametrize("case", TARGET_CASES, ids=case_ids(TARGET_CASES))
def test_messaging_target_case(case: dict[str, Any]) -> None:
    send = messaging_send(FORMS, case["input"]["toolName"], case["input"]["args"])
    assert send is not None
    assert send.target is not None
    expect = case["expect"]
    assert send.target.to_dict() == {
        "tool": expect["tool"],
        "provider": expect["provider"],
        "account_id": expect.get("accountId"),
        "to": expect["to"],
    }


@pytest.mark.parametrize("case", ROUTE_CASES, ids=case_ids(ROUTE_CASES))
def test_route_case(case: dict[str, Any]) -> None:
    given_input = case["input"]
    assert not any(
        is_messaging_duplicate(p["text"], given_input["messagingToolSentTexts"])
        for p in given_input["payloads"]
    )
    targets = [
        MessagingTarget(
            tool=t["tool"], provider=t["provider"], to=t["to"], account_id=t.get("accountId")
        )
        for t in given_input["messagingToolSentTargets"]
    ]
    suppressed = any(
        same_route(
            FORMS,
            target,
            provider=given_input["messageProvider"],
            to=given_input["originatingTo"],
            account_id=given_input.get("accountId"),
        )
        for target in targets
    )
    assert suppressed is (case["expect"]["replyPayloads"] == [])


# --- normalisation ------------------------------------------------------------------------


def test_normalize_removes_emoji_and_pictographs() -> None:
    assert normalize_for_dedupe("Done ✅ 🎉 ❤") == "done"
    assert normalize_for_dedupe("a🚀b") == "ab"
    # Extended_Pictographic includes the legal signs.
    assert normalize_for_dedupe("Acme© Widget™") == "acme widget"


def test_normalize_collapses_all_whitespace_kinds() -> None:
    assert normalize_for_dedupe("\tOne\n\n two\u00a0 three\r\n") == "one two three"


def test_normalize_empty_and_emoji_only() -> None:
    assert normalize_for_dedupe("") == ""
    assert normalize_for_dedupe("  👋 🌍  ") == ""


# --- duplicate test -----------------------------------------------------------------------


def test_constants() -> None:
    assert MIN_DUPLICATE_TEXT_LENGTH == 10
    assert MAX_MESSAGING_SENT == 200


def test_candidate_below_minimum_is_never_duplicate() -> None:
    assert is_duplicate_normalized("123456789", ["123456789"]) is False
    assert is_duplicate_normalized("1234567890", ["1234567890"]) is True


def test_short_sent_text_is_ignored() -> None:
    # "thanks" is inside the candidate, but sent texts under 10 chars never match.
    assert is_messaging_duplicate("thanks for waiting, here it is", ["thanks"]) is False


def test_minimum_counts_normalized_length() -> None:
    # 12 raw characters, 8 after removing the emoji and collapsing spaces.
    assert is_messaging_duplicate("ok 👍 done!!", ["ok 👍 done!!"]) is False


def test_empty_inputs() -> None:
    assert is_messaging_duplicate("a perfectly long reply", []) is False
    assert is_duplicate_normalized("", ["anything at all here"]) is False


def test_sent_text_inside_candidate_is_duplicate_at_any_ratio() -> None:
    sent = "the report is ready"
    candidate = "ok. " + "I sent it to the channel with all details. " * 5 + sent
    assert is_messaging_duplicate(candidate, [sent]) is True


def test_candidate_inside_sent_text_needs_half_its_length() -> None:
    sent = "Here is the weekly summary: sales up, costs down, hiring paused."  # 64 chars
    half = "Here is the weekly summary: sales up, costs down"  # 48 chars, >= 32
    assert is_messaging_duplicate(half, [sent]) is True


def test_short_commentary_inside_long_sent_text_is_not_duplicate() -> None:
    sent = (
        "Deployment finished. All 14 services are healthy, the migration ran in 3 minutes, "
        "and the cache was warmed. Let me know if you see anything odd."
    )
    assert is_messaging_duplicate("All 14 services are healthy", [sent]) is False


def test_half_length_boundary() -> None:
    sent = "abcdefghijklmnopqrst"  # 20 chars
    assert is_duplicate_normalized("abcdefghij", [sent]) is True  # exactly half
    assert is_duplicate_normalized("bcdefghij", [sent]) is False  # under 10 anyway
    sent_long = "abcdefghijklmnopqrstu"  # 21 chars
    assert is_duplicate_normalized("abcdefghij", [sent_long]) is False  # 10 < 10.5


def test_any_sent_text_may_match() -> None:
    assert is_messaging_duplicate(
        "second message text", ["first message text", "SECOND message text"]
    )


@given(st.text())
def test_normalize_is_idempotent(text: str) -> None:
    once = normalize_for_dedupe(text)
    assert normalize_for_dedupe(once) == once


@given(st.text())
def test_text_is_duplicate_of_itself(text: str) -> None:
    if len(normalize_for_dedupe(text)) >= MIN_DUPLICATE_TEXT_LENGTH:
        assert is_messaging_duplicate(text, [text]) is True


@given(st.text(alphabet=string.ascii_letters + " \n", min_size=10))
def test_case_spacing_and_emoji_do_not_hide_duplicate(text: str) -> None:
    assume(len(normalize_for_dedupe(text)) >= MIN_DUPLICATE_TEXT_LENGTH)
    decorated = "🎉 " + text.upper().replace(" ", "  \t") + " ✅"
    assert is_messaging_duplicate(decorated, [text]) is True


# --- tool names and results ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  Message ", "message"),
        ("bash", "exec"),
        ("BASH", "exec"),
        ("apply-patch", "apply_patch"),
        ("read", "read"),
    ],
)
def test_normalize_tool_name(raw: str, expected: str) -> None:
    assert normalize_tool_name(raw) == expected


def test_is_error_flag_fails() -> None:
    assert is_failed_tool_result(True, "ok") is True
    assert is_failed_tool_result(False, "ok") is False


@pytest.mark.parametrize("status", ["error", "Error ", " TIMEOUT", "timeout"])
def test_details_status_fails(status: str) -> None:
    assert is_failed_tool_result(False, {"details": {"status": status}}) is True


@pytest.mark.parametrize(
    "result",
    [
        {"details": {"status": "ok"}},
        {"details": {"status": "sent"}},
        {"details": {"status": None}},
        {"details": "error"},
        {"status": "error"},
        {"content": [{"type": "text", "text": "error"}]},
        None,
        ["error"],
    ],
)
def test_other_results_succeed(result: object) -> None:
    assert is_failed_tool_result(False, result) is False


def test_failed_result_from_case_file() -> None:
    (case,) = [
        c for c in load_cases("subscriber") if c["id"] == "message-tool-error-does-not-suppress"
    ]
    end = next(e for e in case["events"] if e["type"] == "tool_execution_end")
    assert is_failed_tool_result(end["isError"], end["result"]) is True


# --- which tool calls are sends -----------------------------------------------------------


@pytest.mark.parametrize("action", ["send", "reply", "thread-reply", " send ", "Send"])
def test_message_send_actions(action: str) -> None:
    send = messaging_send(
        FORMS, "message", {"action": action, "to": "+1555", "message": "Hello there"}
    )
    assert send is not None
    assert send.text == "Hello there"


@pytest.mark.parametrize("action", ["react", "delete", "edit", "read", "", None])
def test_message_non_send_actions(action: str | None) -> None:
    assert (
        messaging_send(FORMS, "message", {"action": action, "to": "+1555", "message": "Hi"}) is None
    )


def test_message_without_action_is_not_a_send() -> None:
    assert messaging_send(FORMS, "message", {"to": "+1555", "message": "Hi"}) is None


def test_text_prefers_content_over_message() -> None:
    send = messaging_send(FORMS, "message", {"action": "send", "content": "A", "message": "B"})
    assert send == MessagingSend(text="A", target=None)


def test_text_falls_back_to_message_when_content_blank() -> None:
    send = messaging_send(FORMS, "message", {"action": "send", "content": "  ", "message": "B"})
    assert send is not None and send.text == "B"


def test_send_without_text() -> None:
    send = messaging_send(FORMS, "message", {"action": "send", "to": "123", "channel": "telegram"})
    assert send is not None
    assert send.text is None
    assert send.target is not None and send.target.to == "telegram:123"


def test_message_without_to_has_no_target() -> None:
    assert messaging_send(
        FORMS, "message", {"action": "send", "message": "Hi there"}
    ) == MessagingSend(text="Hi there", target=None)
    send = messaging_send(FORMS, "message", {"action": "send", "to": "   ", "message": "Hi"})
    assert send == MessagingSend(text="Hi", target=None)


def test_message_provider_defaults_to_message() -> None:
    send = messaging_send(FORMS, "message", {"action": "send", "to": " Room-42 ", "message": "Hi"})
    assert send is not None
    assert send.target == MessagingTarget(tool="message", provider="message", to="Room-42")


def test_message_channel_is_lowercased() -> None:
    send = messaging_send(FORMS, "message", {"action": "send", "channel": "Slack", "to": "C1"})
    assert send is not None and send.target is not None
    assert (send.target.provider, send.target.to) == ("slack", "channel:c1")


@pytest.mark.parametrize("key", ["accountId", "account_id"])
def test_account_id(key: str) -> None:
    args = {"action": "send", "provider": "slack", "to": "channel:C1", key: " alt "}
    send = messaging_send(FORMS, "message", args)
    assert send is not None and send.target is not None
    assert send.target.account_id == "alt"
    assert send.target.to_dict() == {
        "tool": "message",
        "provider": "slack",
        "account_id": "alt",
        "to": "channel:c1",
    }


def test_tool_name_is_normalized() -> None:
    send = messaging_send(FORMS, " Message ", {"action": "send", "to": "x", "message": "Hi"})
    assert send is not None and send.target is not None
    assert send.target.tool == "message"


def test_sessions_send_always_sends_without_target() -> None:
    assert messaging_send(FORMS, "sessions_send", {"sessionKey": "s1", "message": "Ping"}) == (
        MessagingSend(text="Ping", target=None)
    )
    assert messaging_send(FORMS, "sessions_send", {}) == MessagingSend(text=None, target=None)


@pytest.mark.parametrize(
    ("tool", "to", "expected"),
    [
        ("telegram", "123", "telegram:123"),
        ("telegram", "telegram:-100555", "telegram:-100555"),
        ("telegram", "tg:42", "telegram:42"),
        ("telegram", "@MyChannel", "telegram:@mychannel"),
        ("telegram", "https://t.me/MyChannel", "telegram:@mychannel"),
        ("slack", "channel:C1", "channel:c1"),
        ("slack", "C1", "channel:c1"),
        ("slack", "<#C1|general>", "channel:c1"),
        ("slack", "<@U7>", "user:u7"),
        ("slack", "@U7", "user:u7"),
        ("discord", "123", "channel:123"),
        ("discord", "User:456", "user:456"),
        ("discord", "<@!456>", "user:456"),
        ("discord", "<#789>", "channel:789"),
    ],
)
def test_channel_tool_send_message(tool: str, to: str, expected: str) -> None:
    send = messaging_send(FORMS, tool, {"action": "sendMessage", "to": to, "content": "Hello"})
    assert send is not None
    assert send.text == "Hello"
    assert send.target == MessagingTarget(tool=tool, provider=tool, to=expected)


@pytest.mark.parametrize("tool", ["telegram", "slack", "discord"])
def test_channel_tool_other_actions_are_not_sends(tool: str) -> None:
    assert messaging_send(FORMS, tool, {"action": "react", "to": "123", "emoji": "x"}) is None
    assert messaging_send(FORMS, tool, {"action": "sendMessage", "content": "no target"}) is None


def test_discord_thread_reply_targets_the_thread_channel() -> None:
    send = messaging_send(
        FORMS, "discord", {"action": "threadReply", "channelId": "999", "content": "In the thread"}
    )
    assert send == MessagingSend(
        text="In the thread",
        target=MessagingTarget(tool="discord", provider="discord", to="channel:999"),
    )
    assert messaging_send(FORMS, "discord", {"action": "threadReply", "content": "x"}) is None
    assert messaging_send(FORMS, "slack", {"action": "threadReply", "channelId": "1"}) is None


def test_other_tools_are_not_sends() -> None:
    assert messaging_send(FORMS, "exec", {"command": "echo send"}) is None
    assert messaging_send(FORMS, "whatsapp", {"action": "sendMessage", "to": "1"}) is None


# --- threads and routes -------------------------------------------------------------------


def test_thread_argument_becomes_part_of_target() -> None:
    send = messaging_send(
        FORMS, "slack", {"action": "sendMessage", "to": "C1", "threadTs": "1700.01", "content": "x"}
    )
    assert send is not None and send.target is not None
    assert send.target.to == "channel:c1:thread:1700.01"
    send = messaging_send(
        FORMS,
        "message",
        {"action": "thread-reply", "channel": "telegram", "to": "-1001", "threadId": 7},
    )
    assert send is not None and send.target is not None
    assert send.target.to == "telegram:-1001:thread:7"


def test_discord_thread_argument_is_the_thread_channel() -> None:
    send = messaging_send(
        FORMS,
        "message",
        {"action": "send", "channel": "discord", "to": "channel:1", "threadId": "55"},
    )
    assert send is not None and send.target is not None
    assert send.target.to == "channel:55"


def test_normalize_messaging_target() -> None:
    assert (
        normalize_messaging_target(FORMS, "Slack", " channel:C1:Thread:ABC ")
        == "channel:c1:thread:abc"
    )
    assert normalize_messaging_target(FORMS, "slack", "C1", thread_id="9") == "channel:c1:thread:9"
    # A thread already in the target wins over the argument.
    assert normalize_messaging_target(FORMS, "slack", "C1:thread:1", thread_id="2") == (
        "channel:c1:thread:1"
    )
    assert normalize_messaging_target(FORMS, "telegram", "telegram:") == ""
    assert normalize_messaging_target(FORMS, "irc", " #Room ") == "#Room"


def _target(provider: str, to: str, account_id: str | None = None) -> MessagingTarget:
    return MessagingTarget(tool=provider, provider=provider, to=to, account_id=account_id)


def test_same_route_matches_normalized_target() -> None:
    target = _target("slack", "channel:c1")
    assert same_route(FORMS, target, provider="SLACK", to="channel:C1", account_id=None)
    assert same_route(FORMS, target, provider="slack", to="C1", account_id="primary")


def test_same_route_provider_mismatch() -> None:
    target = _target("discord", "channel:c1")
    assert not same_route(FORMS, target, provider="slack", to="channel:C1", account_id=None)


def test_same_route_target_mismatch() -> None:
    target = _target("telegram", "telegram:123")
    assert not same_route(FORMS, target, provider="telegram", to="124", account_id=None)
    assert same_route(FORMS, target, provider="telegram", to="123", account_id=None)


def test_same_route_account() -> None:
    target = _target("slack", "channel:c1", account_id="alt")
    assert not same_route(FORMS, target, provider="slack", to="channel:c1", account_id="primary")
    assert same_route(FORMS, target, provider="slack", to="channel:c1", account_id="ALT")
    # Unknown on either side: the account does not decide.
    assert same_route(FORMS, target, provider="slack", to="channel:c1", account_id=None)
    assert same_route(
        FORMS, _target("slack", "channel:c1"), provider="slack", to="c1", account_id="x"
    )


def test_same_route_thread_is_part_of_target() -> None:
    in_thread = _target("slack", "channel:c1:thread:123")
    top_level = _target("slack", "channel:c1")
    assert not same_route(
        FORMS, top_level, provider="slack", to="channel:c1:thread:123", account_id=None
    )
    assert not same_route(FORMS, in_thread, provider="slack", to="channel:c1", account_id=None)
    assert same_route(
        FORMS, in_thread, provider="slack", to="channel:C1:thread:123", account_id=None
    )
    assert not same_route(
        FORMS, in_thread, provider="slack", to="channel:c1:thread:124", account_id=None
    )


def test_same_route_empty_origin_never_matches() -> None:
    assert not same_route(FORMS, _target("irc", ""), provider="irc", to="  ", account_id=None)


@given(
    st.sampled_from(["telegram", "slack", "discord", "irc"]),
    st.text(alphabet="aB1:@#<>|!/ .-_", min_size=1, max_size=24),
    st.none() | st.text(alphabet="aB1. ", max_size=6),
)
def test_send_to_raw_origin_is_same_route(provider: str, to: str, thread: str | None) -> None:
    normalized = normalize_messaging_target(FORMS, provider, to, thread_id=thread)
    assume(normalized)
    # Normalising is stable, so a recorded target matches the origin it was written for.
    assert normalize_messaging_target(FORMS, provider, normalized) == normalized
    target = MessagingTarget(tool="message", provider=provider, to=normalized)
    assert same_route(FORMS, target, provider=provider.upper(), to=normalized, account_id=None)
