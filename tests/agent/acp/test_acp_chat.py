"""A Telegram conversation answered by an ACP agent botd does not ship: Claude Code's ACP
adapter (``@zed-industries/claude-code-acp`` from npm, pinned in ``tests/support/npm``) over
its stdio, asking the loopback Anthropic fake. botd runs in-process with the real
python-telegram-bot against the loopback Bot API; every assertion is about what the chat
showed, what the model was asked, and the files in the conversation's workspace.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from botd.agent.acp.agent import AcpAgent
from botd.agent.acp.turn import PREFACE
from tests.agent.acp.harness import (
    AGENT_KEY,
    PARAGRAPHS,
    AgentModel,
    agent_yaml,
    paragraphs,
    plan,
    said,
    tool_results,
    turn_streams,
    write_file,
)
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, thinking, tool_use
from tests.fakes.telegram_api import FakeTelegramAPI, user
from tests.support.chat import DM, Chat, chatting
from tests.support.waiting import until

ALICE = user(DM, "Alice")


@asynccontextmanager
async def acp_chat(
    tmp_path: Path,
    telegram: FakeTelegramAPI,
    model: FakeAnthropicAPI,
    entry: Path,
    home: str = "home",
    *lines: str,
) -> AsyncIterator[Chat]:
    """botd answering the DM with Claude Code, whose HOME (its sessions) is ``home``;
    ``lines`` are more keys of the ``agent`` section."""
    async with chatting(
        tmp_path, telegram, sections=[agent_yaml(entry, model, tmp_path / home, *lines)]
    ) as chat:
        yield chat


def workspace(tmp_path: Path) -> Path:
    """The one conversation's workspace (made when its first session opened)."""
    [found] = (tmp_path / "state" / "workspaces").iterdir()
    return found


def agent_of(chat: Chat) -> AcpAgent:
    assert chat.daemon.runtime is not None
    return chat.daemon.runtime.acp["acp"]


def with_buttons(telegram: FakeTelegramAPI) -> list[dict[str, Any]]:
    """The bot's messages in the DM that show buttons now."""
    return [m for m in telegram.sent_in(DM) if telegram.keyboard(DM, int(m["message_id"]))]


def status_lines(shown: list[str]) -> list[str]:
    return [line for line in shown if line.startswith(("⏳", "📋"))]


async def test_the_answer_in_blocks_a_tool_as_progress_and_its_permission_as_buttons(
    tmp_path: Path, claude_code_acp: Path
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=AGENT_KEY) as model:
        agent = AgentModel(
            model,
            lambda: write_file(workspace(tmp_path) / "notes.txt", "written by the agent\n"),
            paragraphs(),
        )
        async with acp_chat(tmp_path, telegram, model, claude_code_acp) as chat:
            await chat.send("please write the notes")
            [request] = await until(lambda: with_buttons(telegram), "the permission request")
            message_id = int(request["message_id"])
            data = {
                b["text"]: b["callback_data"] for r in telegram.keyboard(DM, message_id) for b in r
            }
            assert list(data) == ["Always Allow", "Allow", "Reject"]  # the agent's options
            assert request["text"].startswith("Approve Write ")  # in code
            assert "notes.txt" in request["text"]
            # The call waits for the press: its tool shows as running.
            await until(lambda: status_lines(chat.shown()), "a status line")
            assert status_lines(chat.shown()) == ["⏳ Running Write…"]
            telegram.push_press(request, data["Allow"], sender=ALICE)
            await until(lambda: PARAGRAPHS[-1] in chat.shown(), "the whole answer")
            await chat.idle()
            assert (workspace(tmp_path) / "notes.txt").read_text() == "written by the agent\n"
            [result] = tool_results(agent.asked[1])
            assert "updated successfully" in said(agent.asked[1])
            assert not result.get("is_error")
        posted = [str(c.params["text"]) for c in telegram.calls_to("sendMessage", ok_only=True)]
    for paragraph in PARAGRAPHS:
        assert posted.count(paragraph) == 1, paragraph  # in blocks, each once
    assert status_lines(telegram.visible(DM)) == []  # gone with the answer
    assert telegram.sent_message(DM, message_id)["text"].endswith("\nApproved by Alice.")
    assert telegram.keyboard(DM, message_id) == []


async def test_stop_cancels_the_agent_turn_and_the_next_message_is_answered(
    tmp_path: Path, claude_code_acp: Path
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=AGENT_KEY) as model:
        agent = AgentModel(model, stream(text("Thinking about it"), stall=True), paragraphs())
        async with acp_chat(tmp_path, telegram, model, claude_code_acp) as chat:
            await chat.send("take your time")
            await until(lambda: turn_streams(model), "the model asked")
            await chat.send("/stop")
            [asked] = turn_streams(model)
            await until(lambda: asked.closed_by_client, "the model's stream let go")
            await chat.idle()
            assert all("Thinking" not in line for line in chat.unread())
            await chat.send("now answer")
            await until(lambda: PARAGRAPHS[-1] in chat.shown(), "the answer")
            assert len(agent.asked) == 2


async def test_an_agent_that_dies_is_one_line_and_started_again_for_the_next_message(
    tmp_path: Path, claude_code_acp: Path
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=AGENT_KEY) as model:
        AgentModel(model, stream(text("Working"), stall=True), paragraphs())
        async with acp_chat(tmp_path, telegram, model, claude_code_acp) as chat:
            await chat.send("work on it")
            await until(lambda: turn_streams(model), "the model asked")
            first = agent_of(chat).pid
            assert first is not None
            os.kill(first, signal.SIGKILL)
            await until(lambda: any(t.startswith("⚠️") for t in chat.unread()), "the error line")
            await chat.idle()
            told = chat.unread()
            chat.read += len(told)
            # What the agent streamed before the kill shows first if its chunk reached botd
            # in time (the kill races it); then the one line.
            assert told[:-1] in ([], ["Working"]), told
            assert told[-1].startswith("⚠️ The agent stopped with an error: the agent ")
            assert told[-1].endswith("stopped; it is started again for the next message")
            await chat.send("again please")
            await until(lambda: PARAGRAPHS[-1] in chat.shown(), "the answer")
            assert agent_of(chat).pid not in (None, first)
            errors = [t for t in chat.shown() if t.startswith("⚠️")]
            assert len(errors) == 1


async def test_a_restart_loads_the_agent_session_and_new_starts_another(
    tmp_path: Path, claude_code_acp: Path
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=AGENT_KEY) as model:
        agent = AgentModel(model, stream(text("Noted.")))
        async with acp_chat(tmp_path, telegram, model, claude_code_acp) as chat:
            await chat.send("remember the word pineapple")
            assert await chat.reply() == "Noted."
        async with acp_chat(tmp_path, telegram, model, claude_code_acp) as chat:
            await chat.send("what was the word?")
            assert await chat.reply() == "Noted."
            # The agent's own session, loaded: what it was told before, not a retelling.
            assert "pineapple" in said(agent.asked[1])
            assert PREFACE not in said(agent.asked[1])
            await chat.send("/new")
            await chat.reply()
            await chat.send("hello again")
            assert await chat.reply() == "Noted."
            assert "pineapple" not in said(agent.asked[2])
        with_texts = (tmp_path / "state" / "acp" / "sessions.json").read_text()
    assert len(json.loads(with_texts)) == 2  # one agent session per botd session


async def test_an_agent_that_cannot_load_the_session_is_given_the_transcript(
    tmp_path: Path, claude_code_acp: Path
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=AGENT_KEY) as model:
        agent = AgentModel(model, stream(text("Noted.")))
        async with acp_chat(tmp_path, telegram, model, claude_code_acp) as chat:
            await chat.send("remember the word pineapple")
            assert await chat.reply() == "Noted."
        # Another HOME: the agent has none of its sessions any more.
        async with acp_chat(tmp_path, telegram, model, claude_code_acp, "other") as chat:
            await chat.send("what was the word?")
            assert await chat.reply() == "Noted."
    [preface, prompt] = agent.asked[1]["messages"][-1]["content"][-2:]
    assert preface["text"].startswith(PREFACE)
    assert "User: remember the word pineapple\n\nAssistant: Noted." in preface["text"]
    assert prompt["text"] == "what was the word?"


async def test_a_group_can_be_answered_by_the_agent_and_the_dms_by_the_model(
    tmp_path: Path, claude_code_acp: Path
) -> None:
    group = -100123
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=AGENT_KEY) as model:
        agent = AgentModel(model, stream(text("The agent here.")))
        agent_section = agent_yaml(claude_code_acp, model, tmp_path / "home")
        async with chatting(
            tmp_path,
            telegram,
            model=model,
            telegram_options=[
                "dm_policy: open",
                f'groups: {{"{group}": {{require_mention: false, backend: acp}}}}',
            ],
            sections=[agent_section.replace("backend: acp", "backend: model", 1)],
        ) as chat:
            await chat.send("hello model")
            assert await chat.reply() == "ok"  # botd's own model: no agent's tools offered
            telegram.push_text(group, "hello agent", sender=ALICE)
            await until(lambda: telegram.visible(group) == ["The agent here."], "the agent")
            assert len(agent.asked) == 1


async def test_the_agent_plan_shows_its_step_under_way_in_the_status_line(
    tmp_path: Path, claude_code_acp: Path
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=AGENT_KEY) as model:
        AgentModel(
            model,
            plan(("Read the notes", "in_progress"), ("Write the answer", "pending")),
            stream(text("Reading"), stall=True),
        )
        async with acp_chat(tmp_path, telegram, model, claude_code_acp) as chat:
            await chat.send("plan it")
            shown = await until(lambda: status_lines(chat.shown()), "the plan's status line")
            assert shown == ["📋 Step 1 of 2: Read the notes"]
            await chat.send("/stop")
            await until(lambda: not status_lines(chat.shown()), "the status line removed")


async def test_the_agent_thoughts_are_shown_as_agent_reasoning_says(
    tmp_path: Path, claude_code_acp: Path
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=AGENT_KEY) as model:
        AgentModel(model, stream(thinking("First I check.", signature="s1"), text("It is 42.")))
        async with acp_chat(
            tmp_path, telegram, model, claude_code_acp, "home", "reasoning: stream"
        ) as chat:
            await chat.send("what is it?")
            await until(lambda: "It is 42." in chat.shown(), "the answer")
            await chat.idle()
            assert chat.shown() == ["Reasoning:\nFirst I check.", "It is 42."]


async def test_with_terminals_on_claude_code_runs_its_bash_through_botd(
    tmp_path: Path, claude_code_acp: Path
) -> None:
    arguments = json.dumps(
        {"command": "pwd; echo done >&2; exit 3", "timeout": 60000, "description": "Show it"}
    )
    bash = stream(tool_use("toolu_acp_bash_1", "mcp__acp__Bash", arguments), stop_reason="tool_use")
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=AGENT_KEY) as model:
        agent = AgentModel(model, bash, stream(text("Ran it.")))
        section = agent_yaml(claude_code_acp, model, tmp_path / "home", terminals=True)
        async with chatting(tmp_path, telegram, sections=[section]) as chat:
            await chat.send("where are you?")
            [request] = await until(lambda: with_buttons(telegram), "the permission request")
            data = {
                b["text"]: b["callback_data"]
                for r in telegram.keyboard(DM, int(request["message_id"]))
                for b in r
            }
            telegram.push_press(request, data["Allow"], sender=ALICE)
            await until(lambda: "Ran it." in chat.shown(), "the answer")
            [result] = tool_results(agent.asked[1])
            # What botd's terminal ran in the workspace: its exit status and output.
            assert not result.get("is_error")
            assert result["content"] == [
                {
                    "type": "text",
                    "text": f"Exited with code 3.Final output:\n\n{workspace(tmp_path)}\ndone\n",
                }
            ]
