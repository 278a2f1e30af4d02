"""Golden tests: every subscriber, chunker and final-reply case of the reference's suite."""

from __future__ import annotations

import re
from typing import Any

import pytest

from botd.channels.registry import target_forms
from botd.delivery.coalesce import BlockCoalescer
from botd.subscriber import (
    BlockChunker,
    BlockReply,
    FinalReplyInput,
    MessagingTarget,
    Origin,
    build_final_replies,
)
from tests.cases import case_ids, load_cases

from .harness import (
    NOT_EXPOSED,
    Recorder,
    case_callbacks,
    case_event,
    config_from_case,
    message_start,
    text_end,
)

SUBSCRIBER_CASES = load_cases("subscriber")

_CAMEL_TO_FIELD = {
    "text": "text",
    "mediaUrls": "media_urls",
    "audioAsVoice": "audio_as_voice",
    "replyToId": "reply_to_id",
    "replyToCurrent": "reply_to_current",
    "replyToTag": "reply_to_tag",
}


def _fence_count(text: str) -> int:
    return len(re.findall(r"^ {0,3}(?:`{3,}|~{3,})", text, flags=re.MULTILINE))


def _collapsed(texts: list[str]) -> str:
    return re.sub(r"\s+", " ", " ".join(texts)).strip()


def _assert_block(reply: BlockReply, expected: str | dict[str, Any]) -> None:
    if isinstance(expected, str):
        assert reply.text == expected
        return
    for key, value in expected.items():
        assert getattr(reply, _CAMEL_TO_FIELD[key]) == value, key


def check_expectations(rec: Recorder, expect: dict[str, Any]) -> None:
    sub = rec.sub
    for key, value in expect.items():
        if key == "blockReplies":
            assert len(rec.blocks) == len(value), rec.texts
            for reply, expected in zip(rec.blocks, value, strict=True):
                _assert_block(reply, expected)
        elif key == "blockReplyCount":
            assert len(rec.blocks) == value, rec.texts
        elif key == "blockReplyCountAtLeast":
            assert len(rec.blocks) >= value, rec.texts
        elif key == "everyBlockReplyStartsWith":
            assert rec.blocks and all(t.startswith(value) for t in rec.texts), rec.texts
        elif key == "everyBlockReplyFenceCountAtLeast":
            assert all(_fence_count(t) >= value for t in rec.texts), rec.texts
        elif key == "blockRepliesJoinedCollapsed":
            assert _collapsed(rec.texts) == value
        elif key == "blockRepliesMustNotContain":
            for text in rec.texts:
                for forbidden in value:
                    assert forbidden not in text
        elif key == "assistantTexts":
            assert sub.assistant_texts == value
        elif key == "messagingToolSentTexts":
            assert sub.messaging_tool_sent_texts == value
        elif key == "didSendViaMessagingTool":
            assert sub.did_send_via_messaging_tool is value
        elif key == "partialRepliesFirst":
            assert rec.partials and rec.partials[0].text == value
        elif key == "lastPartialReplyContains":
            assert rec.partials and value in rec.partials[-1].text
        elif key == "assistantStreamEventCount":
            assert len(rec.partials) == value, [p.text for p in rec.partials]
        elif key == "assistantStreamEvents":
            assert len(rec.partials) == len(value)
            for partial, expected in zip(rec.partials, value, strict=True):
                assert partial.text == expected["text"]
                assert partial.media_urls == (expected.get("mediaUrls") or [])
        elif key == "lastReasoningStream":
            assert rec.reasoning and rec.reasoning[-1] == value
        elif key == "messageContentAfterEnd":
            content = [b.model_dump(exclude_none=True) for b in rec.messages[-1].blocks()]
            assert content == value
        elif key == "isCompacting":
            assert sub.is_compacting is value
        elif key == "waitForCompactionRetryResolved":
            assert sub.compaction_settled is value
        elif key == "blockReplyFlushCount":
            assert rec.flushes == value
        elif key == "order":
            assert value == "blockReply before blockReplyFlush"
            assert rec.order.index("block") < rec.order.index("flush")
        elif key == "raises":
            assert value is False  # reaching this point means nothing was raised
        else:
            raise AssertionError(f"unhandled expectation {key}")


@pytest.mark.parametrize("case", SUBSCRIBER_CASES, ids=case_ids(SUBSCRIBER_CASES))
def test_subscriber_case(case: dict[str, Any]) -> None:
    if case["id"] in NOT_EXPOSED:
        pytest.skip(NOT_EXPOSED[case["id"]])
    rec = Recorder(config_from_case(case["config"]), **case_callbacks(case))
    for spec in case["events"]:
        if spec["type"] == "checkpoint":
            check_expectations(rec, spec["expect"])
        else:
            rec.feed(case_event(spec))
    check_expectations(rec, case["expect"])


CHUNKER_CASES = load_cases("chunker")


@pytest.mark.parametrize("case", CHUNKER_CASES, ids=case_ids(CHUNKER_CASES))
def test_chunker_case(case: dict[str, Any]) -> None:
    spec = case["input"]
    chunking = spec["chunking"]
    chunker = BlockChunker(chunking["minChars"], chunking["maxChars"], chunking["breakPreference"])
    chunker.append(spec["append"])
    chunks: list[str] = []
    chunker.drain(spec["drain"]["force"], chunks.append)
    expect = case["expect"]
    assert len(chunks) == expect["chunkCount"]
    assert expect["chunks[0].contains"] in chunks[0]
    assert re.search(expect["chunks[0].matches"], chunks[0])
    assert expect["chunks[0].notContains"] not in chunks[0]
    assert chunker.buffer.startswith(expect["bufferedStartsWith"])


FINAL_CASES = load_cases("final_reply")


def _target(spec: dict[str, Any]) -> MessagingTarget:
    return MessagingTarget(
        tool=spec["tool"],
        provider=spec["provider"],
        to=spec["to"],
        account_id=spec.get("accountId"),
    )


@pytest.mark.parametrize("case", FINAL_CASES, ids=case_ids(FINAL_CASES))
def test_final_reply_case(case: dict[str, Any]) -> None:
    spec = case["input"]
    expect = case["expect"]
    if "blockRepliesFromAgent" in spec:
        coalesce = spec["coalesce"]
        joiner = {"paragraph": "\n\n", "newline": "\n", "sentence": " "}[
            spec["blockReplyChunking"]["breakPreference"]
        ]
        # The agent's blocks as what produces them: text_end events of one assistant
        # message, through the subscriber (which emits a repeated text_end once) and on to
        # the coalescer that delivery puts in front of the adapter.
        rec = Recorder(config_from_case({"chunking": spec["blockReplyChunking"]}))
        rec.feed(message_start())
        for block in spec["blockRepliesFromAgent"]:
            rec.feed(text_end(block["text"]))
        coalescer = BlockCoalescer(
            coalesce["minChars"], coalesce["maxChars"], coalesce["idleMs"], joiner
        )
        now = 0.0
        delivered: list[BlockReply] = []
        for reply in rec.blocks:
            delivered += coalescer.add(reply, now)
        delivered += coalescer.flush()
        assert [b.text for b in delivered] == expect["deliveredBlockReplies"]
        finals = build_final_replies(
            FinalReplyInput(
                assistant_texts=[p["text"] for p in spec["finalPayloads"]],
                delivered_blocks=delivered,
                block_streaming=spec["blockStreamingEnabled"],
            )
        )
        assert [f.text for f in finals] == [p["text"] for p in expect["finalReplies"]]
        return
    finals = build_final_replies(
        FinalReplyInput(
            assistant_texts=[p["text"] for p in spec["payloads"]],
            block_streaming=spec["blockStreamingEnabled"],
            sent_texts=spec["messagingToolSentTexts"],
            sent_targets=[_target(t) for t in spec["messagingToolSentTargets"]],
            origin=Origin(spec["messageProvider"], spec["originatingTo"], spec.get("accountId")),
            target_forms=target_forms(),
        )
    )
    assert [f.text for f in finals] == [p["text"] for p in expect["replyPayloads"]]


COALESCE_CASES = load_cases("coalesce")


@pytest.mark.parametrize("case", COALESCE_CASES, ids=case_ids(COALESCE_CASES))
def test_coalesce_case(case: dict[str, Any]) -> None:
    config = case["input"]["config"]
    coalescer = BlockCoalescer(
        config["minChars"], config["maxChars"], config["idleMs"], config["joiner"]
    )
    now = 0.0
    flushed: list[BlockReply] = []
    for op in case["input"]["ops"]:
        if "enqueue" in op:
            flushed += coalescer.add(BlockReply(text=op["enqueue"]["text"]), now)
        else:
            now += op["advanceMs"]
            flushed += coalescer.poll(now)
    assert [b.text for b in flushed] == case["expect"]["flushes"]
