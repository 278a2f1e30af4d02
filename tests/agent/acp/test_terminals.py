"""The terminals botd runs for an ACP agent (``terminal/*``): refused unless the agent's
section turns them on; when on, a command in the conversation's workspace whose output and
exit status come back, bounded, killed by the agent or by ``/stop``.

The chat tests drive the tiny agent ``shell_agent.py`` (the SDK's agent side over stdio) from
a Telegram DM; the bounds are also checked on ``Terminals`` itself, with real processes.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from botd.agent.acp.terminals import OUTPUT_BYTES, Terminals
from botd.media.sandbox import Budget
from tests.agent.acp.harness import shell_agent_yaml
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.chat import Chat, chatting
from tests.support.waiting import until


@asynccontextmanager
async def shell_chat(tmp_path: Path, *lines: str) -> AsyncIterator[Chat]:
    async with (
        FakeTelegramAPI() as telegram,
        chatting(tmp_path, telegram, sections=[shell_agent_yaml(*lines)]) as chat,
    ):
        yield chat


def workspace(tmp_path: Path) -> Path:
    [found] = (tmp_path / "state" / "workspaces").iterdir()
    return found


async def test_terminals_are_refused_unless_the_agent_section_turns_them_on(
    tmp_path: Path,
) -> None:
    async with shell_chat(tmp_path) as chat:
        await chat.send("run - echo hello")
        reply = await chat.reply()
    assert reply.startswith("error -32601")
    assert "terminals are off for this agent (botd's agent.acp.terminals)" in reply


async def test_a_command_runs_in_the_workspace_and_its_output_and_exit_status_come_back(
    tmp_path: Path,
) -> None:
    async with shell_chat(tmp_path, "terminals: true") as chat:
        await chat.send("run - pwd; echo to stderr >&2; exit 3")
        reply = await chat.reply()
        assert reply == f"exit 3 truncated False\n{workspace(tmp_path)}\nto stderr"


async def test_output_past_the_limit_keeps_its_end(tmp_path: Path) -> None:
    async with shell_chat(tmp_path, "terminals: true") as chat:
        await chat.send("run 10 printf abcdefghij0123456789")
        assert await chat.reply() == "exit 0 truncated True\n0123456789"


async def test_the_agent_kills_a_terminal(tmp_path: Path) -> None:
    async with shell_chat(tmp_path, "terminals: true") as chat:
        await chat.send("kill")
        assert await chat.reply() == "killed SIGKILL"


async def test_stop_kills_what_the_agent_runs(tmp_path: Path) -> None:
    async with shell_chat(tmp_path, "terminals: true") as chat:
        await chat.send("hang echo $$ > pid; exec sleep 600")
        pid = int(await until(lambda: _pid_written(tmp_path), "the command's pid"))
        await chat.send("/stop")
        await until(lambda: not _alive(pid), "the command killed")


def _pid_written(tmp_path: Path) -> str:
    found = list((tmp_path / "state" / "workspaces").glob("*/pid"))
    return found[0].read_text().strip() if found else ""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no one reaped yet does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# -- Terminals itself -----------------------------------------------------------------------


async def test_the_output_is_cut_at_a_character_boundary(tmp_path: Path) -> None:
    terminals = Terminals(os.environ)
    made = await terminals.create("s", tmp_path, "printf", ["ééééé"], {}, 5)  # 10 bytes
    terminal = terminals.get("s", made)
    assert terminal is not None
    await terminal.wait()
    assert (terminal.output(), terminal.truncated) == ("éé", True)
    await terminals.close()


async def test_no_agent_gets_more_output_than_botd_keeps(tmp_path: Path) -> None:
    terminals = Terminals(os.environ)
    shell = f"head -c {OUTPUT_BYTES + 1000} /dev/zero | tr '\\0' a"
    made = await terminals.create("s", tmp_path, "sh", ["-c", shell], {}, 10 * OUTPUT_BYTES)
    terminal = terminals.get("s", made)
    assert terminal is not None
    await terminal.wait()
    assert (len(terminal.output()), terminal.truncated) == (OUTPUT_BYTES, True)
    await terminals.close()


async def test_a_command_past_its_wall_time_is_killed(tmp_path: Path) -> None:
    terminals = Terminals(os.environ, Budget(wall=0.2, cpu=5))
    made = await terminals.create("s", tmp_path, "sleep", ["600"], {}, None)
    terminal = terminals.get("s", made)
    assert terminal is not None
    status = await terminal.wait()
    assert (status.exit_code, status.signal) == (None, "SIGKILL")
    await terminals.close()


async def test_a_command_gets_the_cpu_limit_of_the_reading_workers(tmp_path: Path) -> None:
    terminals = Terminals(os.environ, Budget(wall=600, cpu=1))
    made = await terminals.create("s", tmp_path, "sh", ["-c", "ulimit -t; ulimit -c"], {}, None)
    terminal = terminals.get("s", made)
    assert terminal is not None
    await terminal.wait()
    assert terminal.output().split() == ["1", "0"]
    await terminals.close()


async def test_a_released_session_leaves_nothing_running(tmp_path: Path) -> None:
    terminals = Terminals(os.environ)
    made = await terminals.create("s", tmp_path, "sleep", ["600"], {}, None)
    terminal = terminals.get("s", made)
    assert terminal is not None and terminal.running
    await terminals.release_session("s")
    assert not terminal.running and terminals.get("s", made) is None


async def test_a_release_kills_what_the_command_left_running(tmp_path: Path) -> None:
    terminals = Terminals(os.environ)
    shell = "sleep 600 & echo $! > child; exit 0"
    made = await terminals.create("s", tmp_path, "sh", ["-c", shell], {}, None)
    child = int(await until(lambda: _read(tmp_path / "child"), "the child's pid"))
    assert _alive(child)
    await terminals.release("s", made)
    await until(lambda: not _alive(child), "the child killed")


def _read(path: Path) -> str:
    return path.read_text().strip() if path.exists() else ""
