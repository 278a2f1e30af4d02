"""Buttons on Slack, end to end: the daemon with the real slack-bolt/slack_sdk and anthropic
SDKs over the loopback fakes, in Socket Mode. The directive becomes Block Kit (the text as a
section, one ``actions`` block per row, ``text`` the fallback); a press (``block_actions``)
reaches the model once even when delivered twice, is acked, and replaces the buttons with the
choice made; a second press is told "Already answered" in an ephemeral message.
"""

from __future__ import annotations

import time
from pathlib import Path

from botd.inbound.router import ALREADY_ANSWERED, NOT_OFFERED
from tests.buttons.prompts import prompts
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.support.daemon_inprocess import anthropic_yaml, config_yaml, daemon_running, slack_yaml
from tests.support.waiting import until

DM = "D1"


async def test_a_directive_shows_block_kit_buttons_and_a_press_reaches_the_model_once(
    tmp_path: Path,
) -> None:
    async with (
        FakeSlack(clock=time.time) as slack,
        FakeAnthropicAPI(api_key="sk-ant-test") as model,
    ):
        model.push(stream(text("Deploy now?\n[[buttons: Yes | No]]")), stream(text("Deploying.")))
        config = config_yaml(tmp_path, anthropic_yaml(model), slack_yaml(slack, "dm_policy: open"))
        async with daemon_running(config) as daemon:
            await slack.send_event(
                event_callback(
                    {
                        "type": "message",
                        "channel": DM,
                        "channel_type": "im",
                        "user": "U1",
                        "text": "deploy?",
                        "ts": f"{time.time():.6f}",
                    }
                )
            )
            posted = await until(
                lambda: [m for m in slack.posted(DM) if m.get("blocks")], "buttons posted"
            )
            message = posted[0]
            assert message["text"] == "Deploy now?"  # the fallback, without the directive
            [section, actions] = message["blocks"]
            assert section["text"]["text"] == "Deploy now?"
            labels = [e["text"]["text"] for e in actions["elements"]]
            assert labels == ["Yes", "No"]
            yes = actions["elements"][0]["action_id"]

            first = await slack.send_press(DM, message["ts"], yes, action_ts="1.1")
            again = await slack.send_press(DM, message["ts"], yes, action_ts="1.1")  # redelivered
            await until(lambda: {first, again} <= set(slack.acks), "both deliveries acked")
            await until(lambda: "Deploying." in slack.visible(DM), "the answer")
            shown = next(m for m in slack.posted(DM) if m["ts"] == message["ts"])
            assert [b["type"] for b in shown["blocks"]] == ["section", "context"]
            assert shown["blocks"][1]["elements"][0]["text"].startswith("✔ Yes")

            second = await slack.send_press(DM, message["ts"], yes, user="U2", action_ts="2.2")
            await until(lambda: second in slack.acks, "the second press acked")
            await until(lambda: ("U2", ALREADY_ANSWERED) in slack.ephemerals, "U2 told")
            assert daemon.runtime is not None
            await daemon.runtime.dispatcher.drain()
    assert [p.split("] ")[-1] for p in prompts(model)] == ["deploy?", "(pressed: Yes)"]


def dm(text: str) -> dict[str, object]:
    return event_callback(
        {
            "type": "message",
            "channel": DM,
            "channel_type": "im",
            "user": "U1",
            "text": text,
            "ts": f"{time.time():.6f}",
        }
    )


async def test_forged_presses_are_refused_and_the_real_press_still_counts(
    tmp_path: Path,
) -> None:
    """A payload naming the bot's message with a value that is not one of its buttons, and
    one naming a plain answer of the bot's, reach nothing: not the model, not the message's
    one press, not its text; the real button then counts."""
    async with (
        FakeSlack(clock=time.time) as slack,
        FakeAnthropicAPI(api_key="sk-ant-test") as model,
    ):
        model.push(
            stream(text("Refunds go through the desk.")),
            stream(text("Refund?\n[[buttons: Yes | No]]")),
            stream(text("Refunded.")),
        )
        config = config_yaml(tmp_path, anthropic_yaml(model), slack_yaml(slack, "dm_policy: open"))
        async with daemon_running(config) as daemon:
            await slack.send_event(dm("refunds?"))
            await until(lambda: slack.visible(DM) == ["Refunds go through the desk."], "answer")
            [plain] = slack.posted(DM)
            await slack.send_event(dm("refund me"))
            posted = await until(
                lambda: [m for m in slack.posted(DM) if m.get("blocks")], "buttons posted"
            )
            message = posted[0]
            yes = message["blocks"][1]["elements"][0]["action_id"]

            lure = ("✔ Refund: visit evil.example", "b:0")
            on_plain = await slack.send_press(DM, plain["ts"], yes, action_ts="1.1", forged=lure)
            seven = await slack.send_press(
                DM, message["ts"], yes, action_ts="1.2", forged=("Yes", "b:7")
            )
            await until(lambda: {on_plain, seven} <= set(slack.acks), "both acked")
            await until(
                lambda: slack.ephemerals.count(("U1", NOT_OFFERED)) == 2, "the presser told"
            )
            assert next(m for m in slack.posted(DM) if m["ts"] == plain["ts"]) == plain
            shown = next(m for m in slack.posted(DM) if m["ts"] == message["ts"])
            assert [b["type"] for b in shown["blocks"]] == ["section", "actions"]
            assert len(model.requests) == 2

            real = await slack.send_press(DM, message["ts"], yes, action_ts="2.1")
            await until(lambda: real in slack.acks, "the real press acked")
            await until(lambda: "Refunded." in slack.visible(DM), "the answer")
            assert daemon.runtime is not None
            await daemon.runtime.dispatcher.drain()
    assert [p.split("] ")[-1] for p in prompts(model)] == [
        "refunds?",
        "refund me",
        "(pressed: Yes)",
    ]
