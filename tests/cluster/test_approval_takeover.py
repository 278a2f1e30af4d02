"""An approval pending on a node that dies, decided by a press another node takes.

Two ``botd run`` nodes on one PostgreSQL, Telegram polled by one of them. The model calls a
gated tool (``schedule``, ``agent.approvals``); the node answering the conversation posts the
request with its Approve / Deny buttons and waits. That node is SIGKILLed; the user presses
Approve, right away or once the other node holds the conversation, and the press reaches the
other node (the only one left to poll: the poller moved there if the dead node held it). The
press is decided once, there; the other node resumes the run with the same call, finds the
request decided (no second request is posted), runs the tool and answers; the request's
message shows who approved it and its buttons are gone. Asserted on what the fakes saw.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.approvals.harness import RAN, model_calls_the_tool, tool_result
from tests.cluster.harness import MODEL_KEY, TOKEN, Cluster
from tests.conversation.crash import DM
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.telegram_api import FakeTelegramAPI, user
from tests.support.waiting import until

ALICE = user(DM, "Alice")
GATED = ("tools: [schedule]", "approvals: {tools: [schedule]}")
"""The ``agent:`` lines that make a call to ``schedule`` wait for an approval."""


async def request_posted(cluster: Cluster) -> int:
    """The message id of the (one) request's buttons, once posted and kept (0 before)."""
    rows = await cluster.query("SELECT messages FROM approvals ORDER BY created_at")
    refs = json.loads(str(rows[-1][0])) if rows and rows[-1][0] else []
    return int(refs[-1]["message_id"]) if refs else 0


async def approval_states(cluster: Cluster) -> list[str]:
    return [str(row[0]) for row in await cluster.query("SELECT state FROM approvals")]


@pytest.mark.parametrize("pressed", ["at once", "once taken over"])
async def test_an_approval_pending_on_a_killed_node_is_decided_by_a_press_on_another(
    pressed: str, tmp_path: Path, postgres_dsn: str
) -> None:
    """``pressed``: right after the kill (the decision is kept before any node resumes the
    run), or once the other node holds the conversation (its resumed run waits)."""
    async with (
        FakeTelegramAPI(TOKEN) as telegram,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        Cluster(
            tmp_path, postgres_dsn, model, telegram=telegram, size=2, agent_options=GATED
        ) as cluster,
    ):
        try:
            await cluster.start_all()
            await cluster.ready("telegram")
            model_calls_the_tool(model)
            telegram.push_text(DM, "what is scheduled?", sender=ALICE)
            message_id = await until(lambda: request_posted(cluster), "the request posted")
            asker = await cluster.lease_holder(f"conversation:telegram:{DM}")
            other = next(node for node in cluster.nodes if node is not asker)
            posted = dict(telegram.sent_message(DM, message_id))
            buttons = {
                button["text"]: button["callback_data"]
                for row in telegram.keyboard(DM, message_id)
                for button in row
            }
            assert list(buttons) == ["Approve", "Deny"]
            assert len(model.requests) == 1  # the run waits: the tool has not run

            await cluster.kill(asker)
            if pressed == "once taken over":
                conversation = f"conversation:telegram:{DM}"
                await cluster.lease_holder(conversation, not_on=(asker,))
            query = telegram.push_press(posted, buttons["Approve"], sender=ALICE)
            answered = telegram.answered_queries
            await until(lambda: query["id"] in answered, "the press answered")
            await until(lambda: "All done." in telegram.visible(DM), "the answer")
            await until(lambda: telegram.keyboard(DM, message_id) == [], "the buttons gone")
            statuses = await cluster.stop_all()
        except BaseException:
            print(cluster.logs())
            raise

    assert statuses[other.name] == 0
    assert answered[query["id"]] == "Approved."
    (press,) = telegram.calls_to("answerCallbackQuery")
    assert press.via == other.name  # the press reached the node still up
    assert await approval_states(cluster) == ["approved"]  # decided once
    request = str(telegram.sent_message(DM, message_id)["text"])
    assert request == 'Approve schedule(action="list")?\nApproved by Alice.'
    # The request once (not posted again by the node that took over), then the answer.
    assert telegram.visible(DM) == [request, "All done."]
    sends = telegram.calls_to("sendMessage", ok_only=True)
    assert [call.via for call in sends] == [asker.name, other.name]
    assert tool_result(model) == RAN  # the tool ran, on the node that took over
    assert [r.via for r in model.requests] == [asker.name, other.name]
