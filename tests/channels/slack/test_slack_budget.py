"""Slack's posting limit end to end: the whole daemon, slack-bolt and slack_sdk against the
fake answering 429 past three ``chat.postMessage`` in any three seconds in a channel
(``FakeSlack.limit_like_slack``). A long answer (several messages in one channel, status
reactions on by default) is posted whole, each message once, and Slack refuses none: botd's
budget (``botd.channels.slack.budget``) waits before the limit. What is asserted is what the
fake saw, never how long it took.
"""

from __future__ import annotations

from pathlib import Path

from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.support.daemon_inprocess import anthropic_yaml, config_yaml, daemon_running, slack_yaml
from tests.support.waiting import until

PARTS = 6
"""Paragraphs in the answer, each just under the block limit (1200 characters by default):
a message each, two of the channel's three-second windows."""


def paragraph(n: int) -> str:
    return f"Part {n}: " + "word " * 220


async def test_a_long_answer_keeps_to_slacks_posting_limit(tmp_path: Path) -> None:
    async with FakeSlack() as slack, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        slack.limit_like_slack()
        model.push(stream(text("\n\n".join(paragraph(n) for n in range(PARTS)))))
        section = slack_yaml(slack, "dm_policy: open")
        async with daemon_running(config_yaml(tmp_path, anthropic_yaml(model), section)):
            event = {"type": "message", "channel": "D1", "user": "U1", "text": "tell me"}
            event |= {"channel_type": "im", "ts": "100.000001"}
            await slack.send_event(event_callback(event))

            def whole() -> bool:
                return f"Part {PARTS - 1}:" in " ".join(slack.visible("D1"))

            await until(whole, "the whole answer posted")
        shown = " ".join(slack.visible("D1"))
        assert slack.rate_limited == []
        assert len(slack.calls_to("chat.postMessage")) >= 4  # past one window's three
        for n in range(PARTS):
            assert shown.count(f"Part {n}:") == 1
