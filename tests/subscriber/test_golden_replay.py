"""The reference's subscriber cases again, through ``botd replay``'s JSON in and out.

Each case's events are written as JSONL (exercising the event model's round trip), replayed
with the flags matching the case's configuration, and the printed block replies, flush
signals, partial replies and summary are checked against what the case expects.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from botd.cli.replay import ReplayOptions, read_events, replay
from botd.events import event_to_json
from tests.cases import case_ids, load_cases

from .harness import NOT_EXPOSED, case_callbacks, case_event, config_from_case

CASES = [c for c in load_cases("subscriber") if c["id"] not in NOT_EXPOSED]


def _replay_case(case: dict[str, Any]) -> list[dict[str, Any]]:
    lines = [event_to_json(case_event(e)) for e in case["events"] if e["type"] != "checkpoint"]
    events = read_events(lines)
    callbacks = case_callbacks(case)
    options = ReplayOptions(
        config=config_from_case(case["config"]),
        block_replies=callbacks["block_replies_on"],
        partial_replies=callbacks["partial_replies_on"],
    )
    out: list[str] = []
    replay(events, options, out.append)
    return [json.loads(line) for line in out]


def _field(key: str) -> str:
    return {"replyToCurrent": "reply_to_current", "replyToTag": "reply_to_tag"}.get(key, key)


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_case_through_replay(case: dict[str, Any]) -> None:
    out = _replay_case(case)
    assert out[-1]["kind"] == "summary"
    blocks = [o for o in out if o["kind"] == "block_reply"]
    partials = [o for o in out if o["kind"] == "partial_reply"]
    summary = out[-1]
    expect = case["expect"]
    if "blockReplies" in expect:
        assert len(blocks) == len(expect["blockReplies"])
        for block, wanted in zip(blocks, expect["blockReplies"], strict=True):
            if isinstance(wanted, str):
                assert block["text"] == wanted
            else:
                for key, value in wanted.items():
                    assert block[_field(key)] == value
    if "blockReplyCount" in expect:
        assert len(blocks) == expect["blockReplyCount"]
    if "assistantTexts" in expect:
        assert summary["assistant_texts"] == expect["assistantTexts"]
    if "messagingToolSentTexts" in expect:
        assert summary["messaging_tool_sent_texts"] == expect["messagingToolSentTexts"]
    if "didSendViaMessagingTool" in expect:
        assert summary["did_send_via_messaging_tool"] is expect["didSendViaMessagingTool"]
    if "blockReplyFlushCount" in expect:
        assert sum(o["kind"] == "block_flush" for o in out) == expect["blockReplyFlushCount"]
    if "assistantStreamEvents" in expect:
        assert [(p["text"], p["media_urls"]) for p in partials] == [
            (e["text"], e.get("mediaUrls") or []) for e in expect["assistantStreamEvents"]
        ]
    if "partialRepliesFirst" in expect:
        assert partials[0]["text"] == expect["partialRepliesFirst"]
