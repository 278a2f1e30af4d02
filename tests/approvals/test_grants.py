"""Standing grants ("always allow this exact call here", ``botd.approvals.grants``) on the
gate over a real store (both backends): the third button is offered only for a tool in
``always_allow`` whose whole call the request can show; once pressed, the very same call in
the same chat runs without asking, while another call, or the same one in another chat, is
asked about; ``/allowed`` lists and revokes, for approvers only."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from botd.agent.tools.base import ToolContext
from botd.approvals import NOT_AN_APPROVER, ApprovalRules, Approvals, RunPlace
from botd.chat import InboundMessage, Target
from botd.cluster.fencing import RunScope
from botd.events import ToolCallContent
from botd.store import Store
from tests.approvals.harness import Poster, press
from tests.support.waiting import until

GROUP = Target("telegram", "-100123")
OTHER_GROUP = Target("telegram", "-100777")
RULES = ApprovalRules(tools=("exec",), always_allow=("exec",), approvers=frozenset({"1"}))


def gated(approvals: Approvals, target: Target, anchor: str) -> Any:
    place = RunPlace(f"telegram:{target.chat_id}", anchor, "s1", target)
    gate = approvals.gate(place, shutting_down=lambda: False)
    assert gate is not None

    async def call(call_id: str, command: str) -> object:
        call = ToolCallContent(id=call_id, name="exec", arguments={"command": command})
        return await gate(call, ToolContext(RunScope(place.conversation_key), target, call_id))

    return call


def more_than(poster: Poster, count: int) -> bool:
    return len(poster.posted) > count


def typed(target: Target, text: str, sender: str) -> InboundMessage:
    return InboundMessage(
        channel=target.channel,
        chat_id=target.chat_id,
        sender_id=sender,
        sender_name="Ann",
        text=text,
        message_id=f"m-{text}",
        conversation_key=f"telegram:{target.chat_id}",
    )


async def test_always_allow_runs_the_exact_call_in_its_chat_without_asking_until_revoked(
    store: Store,
) -> None:
    poster = Poster()
    approvals = Approvals(store, poster, lambda: RULES, poll_interval=0.05)
    run = gated(approvals, GROUP, "1")
    command = "make test && git log --oneline -5 | head -3 # " + "x" * 100

    asking = asyncio.create_task(run("c1", command))
    await until(lambda: poster.posted, "the request posted")
    [(request, text, rows)] = poster.posted
    # The whole command is shown (longer than a summary's cut), with the third button.
    assert text == f'Approve `exec(command="{command}")`?'
    assert [button.label for button in rows[0]] == ["Approve", "Always allow here", "Deny"]
    always = rows[0][1].value
    assert await approvals.press(press(GROUP, request.message_id, always, sender="1")) == (
        "Always allowed."
    )
    assert await asyncio.wait_for(asking, 5) is None
    assert poster.posted[-1][1].endswith("Always allowed in this chat by Eve.")

    # The very same call in the same chat, in a later run: runs, nothing posted.
    posted = len(poster.posted)
    assert await gated(approvals, GROUP, "2")("c2", command) is None
    assert len(poster.posted) == posted

    # One byte changed, or the same call in another chat: asked about again.
    for target, changed in ((GROUP, command + " "), (OTHER_GROUP, command)):
        asking = asyncio.create_task(gated(approvals, target, "3")("c3", changed))
        await until(functools.partial(more_than, poster, posted), "asked again")
        ref, _, rows = poster.posted[-1]
        deny = rows[0][2].value
        assert await approvals.press(press(target, ref.message_id, deny, sender="1")) == "Denied."
        outcome = await asyncio.wait_for(asking, 5)
        assert outcome is not None and "denied" in str(outcome)
        posted = len(poster.posted)

    # /allowed lists the grant in its chat only; revoking is for approvers.
    listed = await approvals.grants_command(typed(GROUP, "/allowed", "2"), "")
    assert listed.splitlines()[1] == f'1. `exec(command="{command}")` (by Eve)'
    elsewhere = await approvals.grants_command(typed(OTHER_GROUP, "/allowed", "1"), "")
    assert elsewhere == "Nothing is allowed for good in this chat."
    refused = await approvals.grants_command(typed(GROUP, "/allowed revoke 1", "2"), "revoke 1")
    assert refused == NOT_AN_APPROVER
    assert await approvals.grants_command(typed(GROUP, "/allowed revoke 2", "1"), "revoke 2") == (
        "There is no grant 2 here: /allowed lists them."
    )
    revoked = await approvals.grants_command(typed(GROUP, "/allowed revoke 1", "1"), "revoke 1")
    assert revoked.startswith("Revoked:")

    # Revoked: the same call is asked about again.
    asking = asyncio.create_task(gated(approvals, GROUP, "4")("c4", command))
    await until(lambda: len(poster.posted) > posted, "asked after the revocation")
    asking.cancel()


async def test_a_call_the_request_cannot_show_whole_offers_no_grant(store: Store) -> None:
    poster = Poster()
    approvals = Approvals(store, poster, lambda: RULES, poll_interval=0.05)
    run = gated(approvals, GROUP, "1")
    too_long = "echo " + "y" * 700
    with_a_secret = "curl -H 'Authorization: Bearer sk-ant-api03-" + "A" * 40 + "'"
    for n, command in enumerate((too_long, with_a_secret)):
        asking = asyncio.create_task(run(f"c{n}", command))
        await until(functools.partial(more_than, poster, n * 2), "the request posted")
        ref, text, rows = poster.posted[-1]
        assert [button.label for button in rows[0]] == ["Approve", "Deny"]
        assert "sk-ant-api03" not in text and len(text) < 400
        deny = rows[0][1].value
        await approvals.press(press(GROUP, ref.message_id, deny, sender="1"))
        await asyncio.wait_for(asking, 5)
