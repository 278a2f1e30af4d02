"""``botd acp`` driven by an ACP client botd does not ship (the TypeScript SDK's, ``client.mjs``),
the model being the loopback Anthropic fake: a turn streams as message chunks and ends with
``end_turn``, a tool call shows its states, an approval is the client's permission request, a
cancel ends the turn ``cancelled``, a malformed or unknown request is a JSON-RPC error while
the connection goes on, and a session is loaded again after the daemon restarts: its prompts
and answers replayed, and its tool calls with their outcome and (reasoning shown) its thoughts
in their place."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.channels.acp.editors import Editors, prompt
from tests.fakes.anthropic_api import FakeAnthropicAPI, http_error, stream, text, thinking, tool_use
from tests.fakes.image_headers import png
from tests.fakes.loopback import serve
from tests.support.daemon_process import ended
from tests.support.waiting import until


async def test_a_turn_streams_its_answer_and_a_bad_request_is_answered_with_an_error(
    model: FakeAnthropicAPI, editors: Editors
) -> None:
    model.push(stream(text("Hello ", "from botd.")))
    client, session = await editors.open(editors.config())

    unknown = await client.response(client.send("session/nonsense", {}))
    assert unknown["error"]["code"] == -32601
    malformed = await client.response(client.send("session/prompt", {"sessionId": 5}))
    assert malformed["error"]["code"] == -32602
    assert "sessionId" in json.dumps(malformed["error"]["data"])

    ended = await client.request("session/prompt", prompt(session, "hi"))  # it goes on
    assert ended == {"stopReason": "end_turn"}
    assert client.chunks(session) == "Hello from botd."
    assert await client.close() == 0


async def test_a_prompts_image_and_resources_reach_the_model_and_its_thinking_shows_as_thoughts(
    model: FakeAnthropicAPI, editors: Editors
) -> None:
    model.push(stream(thinking("Looking ", "closely.", signature="sig"), text("A black square.")))
    client, session = await editors.open(editors.config("agent:\n  reasoning: on\n"))
    image = base64.b64encode(png(8, 8)).decode()
    blocks = [
        {"type": "text", "text": "What is in it?"},
        {"type": "image", "mimeType": "image/png", "data": image},
        {"type": "resource_link", "name": "notes.md", "uri": "file:///tmp/notes.md"},
        {
            "type": "resource",
            "resource": {
                "uri": "file:///tmp/a.py",
                "text": "print('hi')",
                "mimeType": "text/x-python",
            },
        },
    ]
    ended = await client.request("session/prompt", {"sessionId": session, "prompt": blocks})
    assert ended == {"stopReason": "end_turn"}

    [asked] = model.requests
    content = asked.body["messages"][-1]["content"]
    said = json.dumps(content)
    assert any(block.get("type") == "image" for block in content)
    assert "What is in it?" in said
    assert "[notes.md](file:///tmp/notes.md)" in said
    assert "file:///tmp/a.py" in said and "print('hi')" in said
    thoughts = [
        u["update"]["content"]["text"]
        for u in client.updates
        if u["update"]["sessionUpdate"] == "agent_thought_chunk"
    ]
    assert "".join(thoughts) == "Looking closely."
    assert client.chunks(session) == "A black square."  # the reasoning is no message chunk
    assert await client.close() == 0


async def test_a_failed_run_ends_its_turn_with_end_turn_and_says_so(
    model: FakeAnthropicAPI, editors: Editors
) -> None:
    model.push(http_error(400, "invalid_request_error", "the request is refused"))
    client, session = await editors.open(editors.config())
    ended = await client.request("session/prompt", prompt(session, "hi"))
    assert ended == {"stopReason": "end_turn"}
    assert client.chunks(session)  # told, in botd's words
    assert await client.close() == 0


@pytest.fixture
async def page() -> AsyncIterator[str]:
    """The URL of a loopback page saying "the page", for ``web_fetch``."""

    async def answer(request: web.Request) -> web.Response:
        return web.Response(text="the page", content_type="text/plain")

    app = web.Application()
    app.router.add_get("/page", answer)
    runner, port = await serve(app)
    try:
        yield f"http://127.0.0.1:{port}/page"
    finally:
        await runner.cleanup()


async def test_a_tool_call_shows_its_states_and_its_approval_is_asked_of_the_client(
    model: FakeAnthropicAPI, editors: Editors, page: str
) -> None:
    model.push(
        stream(tool_use("w1", "web_fetch", json.dumps({"url": page})), stop_reason="tool_use"),
        stream(text("I read it.")),
    )
    agent = (
        "agent:\n  tools: [web_fetch]\n  web_fetch: {allow_hosts: [127.0.0.1]}\n"
        "  approvals:\n    tools: [web_fetch]\n"
    )
    client, session = await editors.open(editors.config(agent))
    turn = client.send("session/prompt", prompt(session, "read the page"))
    await until(lambda: client.asks, "the permission request")
    ask = client.asks[0]
    assert ask["params"]["toolCall"]["toolCallId"] == "w1"
    options = {o["kind"]: o["optionId"] for o in ask["params"]["options"]}
    assert set(options) == {"allow_once", "reject_once"}
    client.answer(ask["ask"], options["allow_once"])

    assert (await client.response(turn))["result"] == {"stopReason": "end_turn"}
    assert client.tool_states("w1") == ["pending", "in_progress", "completed"]
    assert client.chunks(session) == "I read it."
    assert await client.close() == 0


async def test_a_cancel_ends_the_turn_cancelled(model: FakeAnthropicAPI, editors: Editors) -> None:
    model.push(stream(text("never shown"), delay=0))
    held = model.hold()
    client, session = await editors.open(editors.config())
    turn = client.send("session/prompt", prompt(session, "take your time"))
    await until(lambda: model.pending >= 1, "the model to be asked")
    client.notify("session/cancel", {"sessionId": session})
    assert (await client.response(turn))["result"] == {"stopReason": "cancelled"}
    held.set()
    assert client.chunks(session) == ""
    # Loaded again, it replays the prompt; not the /stop the cancel sent, nor its answer.
    replayed = await client.replayed(session)
    assert client.said(session, replayed) == [("user_message_chunk", "take your time")]
    assert await client.close() == 0


async def test_a_session_is_loaded_again_after_the_daemon_restarts_replaying_what_it_said(
    model: FakeAnthropicAPI, editors: Editors
) -> None:
    model.push(stream(text("First answer.")), stream(text("Second answer.")))
    config = editors.config()
    await editors.start_daemon(config)
    client, session = await editors.open(config)  # bridged to the running daemon
    first = await client.request("session/prompt", prompt(session, "remember me"))
    assert first == {"stopReason": "end_turn"}
    assert await client.close() == 0
    assert await editors.stop_daemon() == 0

    await editors.start_daemon(config)
    again = await editors.connect(config)
    # The conversation came back, in order, before the load was answered.
    replayed = await again.replayed(session)
    assert again.said(session, replayed) == [
        ("user_message_chunk", "remember me"),
        ("agent_message_chunk", "First answer."),
    ]
    second = await again.request("session/prompt", prompt(session, "who am I?"))
    assert second == {"stopReason": "end_turn"}
    assert again.chunks(session) == "First answer.Second answer."
    # The model was asked with the first turn before the second.
    said = json.dumps(model.requests[-1].body["messages"])
    assert "remember me" in said and "First answer." in said
    unknown = await again.response(again.load("nope"))
    assert unknown["error"]["code"] == -32002
    assert await again.close() == 0
    assert await editors.stop_daemon() == 0


async def test_the_sessions_are_listed_after_the_daemon_restarts(
    model: FakeAnthropicAPI, editors: Editors
) -> None:
    model.push(stream(text("Done.")))
    config = editors.config()
    await editors.start_daemon(config)
    client = await editors.connect(config)
    made = {cwd: await client.new_session(cwd) for cwd in ("/work/b", "/work/a")}
    words = "Fix the parser\nIt breaks on empty lines."
    assert await client.request("session/prompt", prompt(made["/work/b"], words)) == {
        "stopReason": "end_turn"
    }
    assert await client.close() == 0
    assert await editors.stop_daemon() == 0

    await editors.start_daemon(config)
    again = await editors.connect(config)
    listed = await again.request("session/list", {})
    assert [(s["sessionId"], s["cwd"], s.get("title")) for s in listed["sessions"]] == [
        (made["/work/b"], "/work/b", "Fix the parser"),  # prompted last: first
        (made["/work/a"], "/work/a", None),
    ]
    assert all(s["updatedAt"].endswith("Z") for s in listed["sessions"])
    assert listed.get("nextCursor") is None
    in_a = await again.request("session/list", {"cwd": "/work/a"})
    assert [s["sessionId"] for s in in_a["sessions"]] == [made["/work/a"]]
    bad = await again.response(again.send("session/list", {"cursor": "no such"}))
    assert bad["error"]["code"] == -32602
    assert await again.close() == 0
    assert await editors.stop_daemon() == 0


async def test_a_prompts_image_survives_a_kill_mid_answer(
    model: FakeAnthropicAPI, editors: Editors, tmp_path: Path
) -> None:
    model.push(stream(stall=True))  # the model takes the request and says nothing
    config = editors.config()
    daemon = await editors.start_daemon(config)
    client, session = await editors.open(config)
    image = base64.b64encode(png(8, 8)).decode()
    blocks = [
        {"type": "text", "text": "What is in it?"},
        {"type": "image", "mimeType": "image/png", "data": image},
    ]
    client.send("session/prompt", {"sessionId": session, "prompt": blocks})
    await until(lambda: len(model.requests) == 1, "the model asked")
    daemon.kill()  # SIGKILL: no shutdown code runs
    await ended(daemon)

    # The image is a file of the state dir; one older than a finished message is kept
    # (a week) is removed when the channel starts.
    files = tmp_path / "state" / "acp" / "prompt-files"
    [kept] = list(files.iterdir())
    old = files / ("acp-file-" + "0" * 32)
    old.write_bytes(b"an old image")
    eight_days_ago = time.time() - 8 * 24 * 3600
    os.utime(old, (eight_days_ago, eight_days_ago))

    model.push(stream(text("A black square.")))
    await editors.start_daemon(config)
    await until(lambda: len(model.requests) == 2, "the resumed run to ask the model")
    for asked in model.requests:
        content = asked.body["messages"][-1]["content"]
        assert any(block.get("type") == "image" for block in content), content
    await until(lambda: not old.exists(), "the old file removed")
    assert list(files.iterdir()) == [kept]
    assert await editors.stop_daemon() == 0


def steps(session_id: str, updates: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """``session_id``'s updates among ``updates``, each as (kind, what it says): a chunk's
    text; a tool call's id, title and kind; an update's id and status."""
    out: list[tuple[str, Any]] = []
    for said in updates:
        if said["sessionId"] != session_id:
            continue
        update = said["update"]
        kind = update["sessionUpdate"]
        if kind == "tool_call":
            out.append((kind, (update["toolCallId"], update["title"], update["kind"])))
        elif kind == "tool_call_update":
            out.append((kind, (update["toolCallId"], update["status"])))
        else:
            out.append((kind, update["content"]["text"]))
    return out


async def run_then_load(
    editors: Editors, config: Path, words: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A prompt saying ``words`` answered on a daemon, the daemon restarted, the session
    loaded: the updates the prompt streamed, and those replayed before the load's answer."""
    await editors.start_daemon(config)
    client, session = await editors.open(config)
    assert await client.request("session/prompt", prompt(session, words)) == {
        "stopReason": "end_turn"
    }
    live = client.updates
    assert await client.close() == 0
    assert await editors.stop_daemon() == 0

    await editors.start_daemon(config)
    again = await editors.connect(config)
    replayed = await again.replayed(session)
    assert await again.close() == 0
    assert await editors.stop_daemon() == 0
    return [u for u in live if u["sessionId"] == session], replayed


WEB_FETCH = "  tools: [web_fetch]\n  web_fetch: {allow_hosts: [127.0.0.1]}\n"


async def test_a_loaded_session_replays_its_tool_calls_and_thoughts_in_their_place(
    model: FakeAnthropicAPI, editors: Editors, page: str
) -> None:
    model.push(
        stream(
            thinking("Which page?", signature="s1"),
            tool_use("w1", "web_fetch", json.dumps({"url": page})),
            stop_reason="tool_use",
        ),
        stream(thinking("It loaded.", signature="s2"), text("I read it.")),
    )
    config = editors.config("agent:\n  reasoning: on\n" + WEB_FETCH)
    live, replayed = await run_then_load(editors, config, "read the page")
    session = live[0]["sessionId"]

    assert steps(session, replayed) == [
        ("user_message_chunk", "read the page"),
        ("agent_thought_chunk", "Which page?"),
        ("tool_call", ("w1", "web_fetch", "fetch")),
        ("tool_call_update", ("w1", "completed")),
        ("agent_thought_chunk", "It loaded."),
        ("agent_message_chunk", "I read it."),
    ]
    # The call as the live stream gave it: its raw input, and its result as its content.
    [started] = [u["update"] for u in replayed if u["update"]["sessionUpdate"] == "tool_call"]
    [shown] = [u["update"] for u in live if u["update"]["sessionUpdate"] == "tool_call"]
    assert started["rawInput"] == shown["rawInput"] == {"url": page}
    [ended_] = [u["update"] for u in replayed if u["update"]["sessionUpdate"] == "tool_call_update"]
    assert "the page" in json.dumps(ended_["content"])


async def test_with_reasoning_off_no_thought_is_replayed_and_a_failed_tool_is_failed(
    model: FakeAnthropicAPI, editors: Editors
) -> None:
    refused = "http://192.0.2.1/secret"  # not public: web_fetch refuses it before connecting
    model.push(
        stream(
            thinking("Which page?", signature="s1"),
            tool_use("w1", "web_fetch", json.dumps({"url": refused})),
            stop_reason="tool_use",
        ),
        stream(thinking("It failed.", signature="s2"), text("I could not read it.")),
    )
    config = editors.config("agent:\n" + WEB_FETCH)
    live, replayed = await run_then_load(editors, config, "read the secret")
    session = live[0]["sessionId"]

    assert steps(session, replayed) == [
        ("user_message_chunk", "read the secret"),
        ("tool_call", ("w1", "web_fetch", "fetch")),
        ("tool_call_update", ("w1", "failed")),
        ("agent_message_chunk", "I could not read it."),
    ]
    assert not [u for u in live if u["update"]["sessionUpdate"] == "agent_thought_chunk"]
    [failed] = [u["update"] for u in replayed if u["update"]["sessionUpdate"] == "tool_call_update"]
    assert "refused to fetch" in json.dumps(failed["content"])  # the result's own words
