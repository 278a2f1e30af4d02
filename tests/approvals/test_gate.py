"""The approvals gate on its own, over a real store: a press decides a request only on one of
the request's own messages, whatever token it carries (the router checks first that the value
is a button of the pressed message; the gate holds on its own too)."""

from __future__ import annotations

import asyncio

from botd.agent.tools.base import ToolContext
from botd.approvals import NOT_ITS_MESSAGE, ApprovalRules, Approvals, Choice, RunPlace
from botd.chat import MessageRef, Target
from botd.cluster.fencing import RunScope
from botd.events import ToolCallContent
from botd.store import Store
from tests.approvals.harness import Poster, press
from tests.support.waiting import until

GROUP = Target("telegram", "-100123")
ELSEWHERE = Target("telegram", "5555")


async def test_a_token_pressed_on_another_message_decides_nothing(store: Store) -> None:
    poster = Poster()
    approvals = Approvals(store, poster, lambda: ApprovalRules(tools=("exec",)), poll_interval=0.05)
    place = RunPlace("telegram:-100123", "1", "s1", GROUP)
    gate = approvals.gate(place, shutting_down=lambda: False)
    assert gate is not None
    call = ToolCallContent(id="c1", name="exec", arguments={"command": "ls"})
    context = ToolContext(RunScope(place.conversation_key), GROUP, call.id)
    waiting = asyncio.create_task(gate(call, context))
    await until(lambda: poster.posted, "the request posted")
    [(request, _, rows)] = poster.posted
    approve = rows[0][0].value

    # Its data, pressed on a message of another chat, or on another message of its own chat.
    elsewhere = await approvals.press(press(ELSEWHERE, request.message_id, approve))
    beside = await approvals.press(press(GROUP, "999", approve))
    assert elsewhere == beside == NOT_ITS_MESSAGE
    assert not waiting.done()
    kept = await store.approval(f"{place.conversation_key}/1/c1")
    assert kept is not None and kept.state == "pending"

    assert await approvals.press(press(GROUP, request.message_id, approve)) == "Approved."
    assert await asyncio.wait_for(waiting, 5) is None  # approved: the tool runs


async def test_an_agents_choices_are_its_buttons_and_always_is_kept_as_such(store: Store) -> None:
    poster = Poster()
    approvals = Approvals(store, poster, lambda: ApprovalRules(), poll_interval=0.05)
    place = RunPlace("telegram:-100123", "1", "s1", GROUP)
    choices = [
        Choice("Always Allow", "always"),
        Choice("Allow", "approve"),
        Choice("Reject", "deny"),
    ]
    asking = asyncio.create_task(
        approvals.choose(
            place,
            "toolu_1",
            "Write /work/notes.txt",
            choices,
            shutting_down=lambda: False,
            scope=RunScope(place.conversation_key),
        )
    )
    await until(lambda: poster.posted, "the request posted")
    [(request, text, rows)] = poster.posted
    assert text == "Approve `Write /work/notes.txt`?"
    assert [button.label for button in rows[0]] == ["Always Allow", "Allow", "Reject"]
    always = rows[0][0].value
    answer = await approvals.press(press(GROUP, request.message_id, always, sender="Alice"))
    assert answer == "Always allowed."
    assert await asking == "always"
    kept = await store.approval(f"{place.conversation_key}/1/toolu_1")
    assert kept is not None and kept.state == "always"
    assert poster.posted[-1][1] == "Approve `Write /work/notes.txt`?\nAlways allowed by Eve."


async def test_a_decision_from_the_page_wakes_the_run_and_a_press_first_wins(store: Store) -> None:
    poster = Poster()
    approvals = Approvals(store, poster, lambda: ApprovalRules(tools=("exec",)), poll_interval=600)
    place = RunPlace("telegram:-100123", "1", "s1", GROUP)
    gate = approvals.gate(place, shutting_down=lambda: False)
    assert gate is not None

    async def ask(call_id: str) -> tuple[asyncio.Task[object], str, MessageRef]:
        call = ToolCallContent(id=call_id, name="exec", arguments={"command": "ls"})
        context = ToolContext(RunScope(place.conversation_key), GROUP, call.id)
        waiting: asyncio.Task[object] = asyncio.create_task(gate(call, context))
        await until(lambda: len(poster.posted) % 2 == 1, "the request posted")
        ref, _, rows = poster.posted[-1]
        token = rows[0][0].value.removeprefix("approval:").rpartition(":")[0]
        return waiting, token, ref

    waiting, token, _ = await ask("c1")
    assert await approvals.decide(token, "always", "the web page") == (
        False,
        "Not a choice of this request: 'always'.",
    )
    assert await approvals.decide(token, "approve", "the web page") == (True, "Approved.")
    # Woken by the decision (the next look at the store is 10 min away); the request shows
    # who decided.
    assert await asyncio.wait_for(waiting, 60) is None
    assert poster.posted[-1][1].endswith("?\nApproved by the web page.")

    waiting, token, ref = await ask("c2")
    assert (
        await approvals.press(press(GROUP, ref.message_id, f"approval:{token}:deny")) == "Denied."
    )
    assert await approvals.decide(token, "approve", "the web page") == (
        False,
        "Already denied by Eve.",
    )
    output = await asyncio.wait_for(waiting, 60)
    assert output is not None and "denied by Eve" in str(output)
    assert await approvals.decide("no-such-token", "approve", "x") == (
        False,
        "This request is no longer open.",
    )
