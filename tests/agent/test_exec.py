"""The ``exec`` tool end to end: botd in-process with the real python-telegram-bot against the
loopback Bot API and the real anthropic SDK against the fake Messages API, whose model is
scripted to call ``exec``; the commands run in the real bubblewrap.

What is checked is what the model was sent as each call's result and what is left on the
host (the workspace's files, files the command tried to write elsewhere, its processes)."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import botd
from botd.agent.tools.base import ToolContext, ToolOutput
from botd.agent.tools.exec.tool import ExecTool
from botd.chat import Target
from botd.cluster.fencing import RunScope
from botd.config.schema import ExecSection
from botd.conversation.progress import activity_of
from botd.media.slots import FairSlots
from botd.ops.logging import add_secret
from botd.workspace import workspace_dir
from tests.approvals.harness import request_posted, states
from tests.fakes.anthropic_api import FakeAnthropicAPI, Reply, stream, text, tool_use
from tests.fakes.telegram_api import FakeTelegramAPI, user
from tests.support.chat import DM, chatting
from tests.support.daemon_inprocess import ANTHROPIC_KEY, HANG_GUARD
from tests.support.waiting import until

ALICE = user(DM, "Alice")


def calls(*commands: str) -> list[Reply]:
    """The model runs each command in turn (call ids ``exec_1``…), then says it is done."""
    replies: list[Reply] = [
        stream(
            tool_use(f"exec_{n}", "exec", json.dumps({"command": command})),
            stop_reason="tool_use",
        )
        for n, command in enumerate(commands, 1)
    ]
    return [*replies, stream(text("Done."))]


MARKED = '<untrusted source="a command\'s output">\n'
"""How a command's output reaches the model: inside the untrusted marker (its end after it)."""


def result(model: FakeAnthropicAPI, call_id: str) -> tuple[bool, str]:
    """(is_error, text) of the result the model was sent for ``call_id``: a command's output
    is asserted to be inside the untrusted marker and given without it."""
    for request in model.requests:
        for message in request.body["messages"]:
            content = message["content"]
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_result" and block["tool_use_id"] == call_id:
                    inner = block["content"]
                    said = inner if isinstance(inner, str) else inner[0]["text"]
                    if not said.startswith("exec is not available"):  # botd's own line
                        assert said.startswith(MARKED) and said.endswith("\n</untrusted>")
                        said = said.removeprefix(MARKED).removesuffix("\n</untrusted>")
                    return bool(block.get("is_error")), said
    raise AssertionError(f"the model was sent no result for {call_id}")


def exec_yaml(*lines: str) -> str:
    """An ``agent:`` section offering ``exec``; ``lines``: more of ``agent:``'s keys."""
    extra = "".join(f"  {line}\n" for line in lines)
    return f"agent:\n  tools: [exec]\n{extra}"


def workspace(tmp_path: Path) -> Path:
    """The DM's workspace on the host."""
    return workspace_dir(tmp_path / "state", f"telegram:{DM}")


def processes_with(marker: str) -> list[int]:
    """The pids of the host's processes whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                line = Path("/proc", entry, "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in line and b"/proc" not in line:
                found.append(int(entry))
    return found


async def test_a_command_runs_in_the_workspace_and_nowhere_else(tmp_path: Path) -> None:
    """``echo`` runs and writes into the workspace, which outlives the command; the host's
    directories are read-only or not there, ``/tmp`` is the command's own, and without
    ``agent.exec.network`` even a loopback fake is out of reach."""
    outside = tmp_path / "escaped"
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model.push(
            *calls(
                "echo hello from the sandbox | tee note.txt; pwd",
                f"echo x > {outside}; echo y > /usr/escaped; echo z > /tmp/kept; ls /tmp",
                f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{telegram.port}' && echo connected",
            )
        )
        async with chatting(tmp_path, telegram, model=model, sections=[exec_yaml()]) as chat:
            await chat.send("run some commands")
            assert await chat.reply() == "Done."
    assert result(model, "exec_1") == (
        False,
        "exit status 0\nstdout:\nhello from the sandbox\n/workspace\nstderr: (empty)",
    )
    assert (workspace(tmp_path) / "note.txt").read_text() == "hello from the sandbox\n"
    is_error, said = result(model, "exec_2")
    assert not is_error  # the last command (ls) succeeded; the writes before it did not
    assert f"{outside}: Directory nonexistent" in said
    assert "/usr/escaped: Read-only file system" in said
    assert "stdout:\nkept\n" in said
    assert not outside.exists() and not Path("/usr/escaped").exists()
    assert not Path("/tmp/kept").exists() or Path("/tmp/kept").read_text() != "z\n"
    is_error, said = result(model, "exec_3")
    assert is_error and said.startswith("exit status ") and "connected" not in said


async def test_with_network_a_command_reaches_the_loopback_fake(tmp_path: Path) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model.push(
            *calls(f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{telegram.port}' && echo connected")
        )
        sections = [exec_yaml("exec:", "  network: true")]
        async with chatting(tmp_path, telegram, model=model, sections=sections) as chat:
            await chat.send("connect")
            assert await chat.reply() == "Done."
    assert result(model, "exec_1") == (False, "exit status 0\nstdout:\nconnected\nstderr: (empty)")


async def test_stop_kills_the_command_with_everything_it_started(tmp_path: Path) -> None:
    """``/stop`` while a command and its children run: none of them is left."""
    marker = f"{3000 + secrets.randbelow(10**6)}.5"  # a sleep no one else runs
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model.push(*calls(f"sleep {marker} & sleep {marker}; echo finished"))
        async with chatting(tmp_path, telegram, model=model, sections=[exec_yaml()]) as chat:
            await chat.send("wait a long time")
            await until(lambda: len(processes_with(marker)) >= 2, "both sleeps started")
            await chat.send("/stop")
            assert await chat.reply() == "Stopped."
            await until(lambda: processes_with(marker) == [], "the sandbox's processes gone")
    assert len(model.requests) == 1  # the run ended with the call: no result went back


async def test_a_command_past_its_time_limit_is_killed_and_the_model_told(tmp_path: Path) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model.push(*calls("echo started; sleep 600"))
        sections = [exec_yaml("exec:", "  timeout: 1")]
        async with chatting(tmp_path, telegram, model=model, sections=sections) as chat:
            await chat.send("wait a long time")
            assert await chat.reply() == "Done."
    is_error, said = result(model, "exec_1")
    assert is_error
    assert said.startswith("killed: the command ran longer than its limit of 1 s\n")


def _request(tmp_path: Path, asked: int) -> int | None:
    """The message id of the request number ``asked`` (from 0), once posted."""
    if len(states(tmp_path / "state")) <= asked:
        return None
    posted = request_posted(tmp_path / "state")
    return None if posted is None else int(posted)


async def test_a_gated_command_waits_for_approval_and_a_denied_one_does_not_run(
    tmp_path: Path,
) -> None:
    """Approve, Deny, then *Always allow here*: the very same command runs again in the chat
    without a request."""
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model.push(*calls("touch approved"), *calls("touch denied"), *calls("touch kept"))
        model.push(*calls("touch kept"))
        sections = [exec_yaml("approvals:", "  tools: [exec]", "  always_allow: [exec]")]
        async with chatting(tmp_path, telegram, model=model, sections=sections) as chat:
            rounds = (("approved", "Approve"), ("denied", "Deny"), ("kept", "Always allow here"))
            for asked, (file, label) in enumerate(rounds):
                await chat.send(f"make a file named {file}")
                posted = await until(
                    functools.partial(_request, tmp_path, asked), f"asked about {file}"
                )
                assert posted is not None
                message = dict(telegram.sent_message(DM, posted))
                assert message["text"] == f'Approve exec(command="touch {file}")?'
                assert not (workspace(tmp_path) / file).exists()  # the call waits
                buttons = {b["text"]: b["callback_data"] for b in telegram.keyboard(DM, posted)[0]}
                telegram.push_press(message, buttons[label], sender=ALICE)
                chat.read += 1  # the request
                assert await chat.reply() == "Done."
            (workspace(tmp_path) / "kept").unlink()
            await chat.send("make it again")
            assert await chat.reply() == "Done."  # no request in between
    assert (workspace(tmp_path) / "approved").exists()
    assert not (workspace(tmp_path) / "denied").exists()
    assert (workspace(tmp_path) / "kept").exists()
    assert result(model, "exec_1") == (False, "exit status 0\nstdout: (empty)\nstderr: (empty)")
    assert states(tmp_path / "state") == ["approved", "denied", "always"]


async def test_without_bubblewrap_the_call_is_refused_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "bwrap"
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model.push(*calls(f"touch {tmp_path}/ran"))
        sections = [exec_yaml("exec:", f"  bwrap: {missing}")]
        async with chatting(tmp_path, telegram, model=model, sections=sections) as chat:
            await chat.send("run it")
            assert await chat.reply() == "Done."
    assert result(model, "exec_1") == (
        True,
        "exec is not available here, so the command was not run: bubblewrap is not "
        f"installed ({missing} not found): apt-get install bubblewrap",
    )
    assert not (tmp_path / "ran").exists()


def test_tool_progress_says_a_command_and_not_which_unless_configured() -> None:
    secret = f"sk-{secrets.token_hex(8)}"
    add_secret(secret)  # as botd registers its config's secrets
    call = {"command": f"curl -H 'x-api-key: {secret}' https://example.com/a/rather/long/path"}
    assert activity_of("exec", call).line() == "⏳ Running a command…"
    assert activity_of("exec", call).status() == "is running a command…"
    shown = activity_of("exec", call, show_command=True).line()
    assert (
        shown
        == "⏳ Running a command (curl -H 'x-api-key: ***' https://example.com/a/rather/long/…)…"
    )


async def test_with_show_command_the_status_line_shows_it_masked(tmp_path: Path) -> None:
    """The command waits inside the sandbox for a file the test makes in the workspace."""
    command = f"echo {ANTHROPIC_KEY} >/dev/null; until [ -e go ]; do sleep 0.05; done"
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model.push(*calls(command))
        sections = [exec_yaml("tool_progress: status", "exec:", "  show_command: true")]
        async with chatting(tmp_path, telegram, model=model, sections=sections) as chat:
            await chat.send("wait for go")
            status = await until(
                lambda: [line for line in chat.shown() if line.startswith("⏳")], "a status line"
            )
            (workspace(tmp_path) / "go").touch()
            await until(lambda: chat.shown() == ["Done."], "the answer, the status line gone")
    assert status == [
        "⏳ Running a command (echo *** >/dev/null; until [ -e go ]; do sleep 0.05; done)…"
    ]


_REFUSED_HERE = """
import asyncio, pathlib, sys
from botd.agent.tools.exec.bubblewrap import Limits, SandboxUnavailable, run_sandboxed
from botd.agent.tools.exec.bubblewrap import sandbox_problem

print(sandbox_problem("bwrap"))
limits = Limits(wall=60, cpu=60, memory=2**30, processes=64, file_bytes=2**20, output_bytes=999)
try:
    workspace = pathlib.Path(sys.argv[1])
    asyncio.run(run_sandboxed("bwrap", workspace, "touch ran", limits, network=False))
except SandboxUnavailable as exc:
    print(exc)
"""


def test_where_user_namespaces_are_refused_no_command_runs(tmp_path: Path) -> None:
    """In a user namespace that may not make more (``max_user_namespaces`` 0, as a unit's
    ``RestrictNamespaces=yes`` refuses them), bwrap cannot set up its sandbox: that is said
    before any command, and a command is refused, not run."""
    script = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" -c "$1" "$2"'
    done = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "sh",
            "-c",
            script,
            sys.executable,
            _REFUSED_HERE,
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()
    expected = (
        f"bubblewrap ({shutil.which('bwrap')}) cannot set up its sandbox here: bwrap: Creating "
        "new namespace failed: nesting depth or /proc/sys/user/max_*_namespaces exceeded "
        "(ENOSPC) (under systemd: botd unit --drop-in exec)"
    )
    assert said == [expected, expected]  # before any command, and for one
    assert list(tmp_path.iterdir()) == []


NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
"""Runs a command as ``nobody`` (util-linux)."""
_FORKS = """
import asyncio, pathlib, sys
from botd.agent.tools.exec.bubblewrap import Limits, run_sandboxed

limits = Limits(wall=60, cpu=60, memory=2**30, processes=4, file_bytes=2**20, output_bytes=999)
command = "for n in 1 2 3 4 5 6 7 8; do sleep 30 & echo $n; done"
workspace = pathlib.Path(sys.argv[1])
done = asyncio.run(run_sandboxed("bwrap", workspace, command, limits, network=False))
print(done.status, len(done.stdout.split()), done.stderr.decode().strip())
"""


def test_a_command_runs_at_most_its_processes_counted_in_its_own_sandbox() -> None:
    """As a user other than root (which the kernel does not hold to a process limit), with
    that user's processes outside not counted: the fifth fork in the sandbox fails."""
    # The workspace is made in /tmp itself, not beneath pytest's own directories: those are
    # their owner's only, and another pytest run on the machine sets them back to that at
    # any time (seen while one ran beside the suite).
    workspace = Path(tempfile.mkdtemp(prefix="botd-test-nobody-"))
    try:
        workspace.chmod(0o777)
        # The directory the checkout and its venv are in may be their owner's only too (a
        # clone into ``mktemp -d``): nobody is let through it.
        for place in (Path(botd.__file__).resolve(), Path(sys.prefix).resolve()):
            for parent in place.parents:
                mode = parent.stat().st_mode
                if not mode & 0o001:
                    parent.chmod(mode | 0o011)
        # An editable install puts the checkout on sys.path, and an import lists that
        # directory.
        checkout = Path(botd.__file__).resolve().parent.parent
        checkout.chmod(checkout.stat().st_mode | 0o055)
        done = subprocess.run(
            [*NOBODY, sys.executable, "-c", _FORKS, str(workspace)],
            capture_output=True,
            text=True,
            timeout=HANG_GUARD,
            check=False,
        )
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    status, started, error = done.stdout.split(" ", 2)
    assert status == "2" and error.strip().endswith("Cannot fork")
    assert started in ("1", "2")  # beside the shell and bwrap's own first process


async def test_one_conversations_commands_leave_a_slot_for_another_conversation(
    tmp_path: Path,
) -> None:
    """Two slots: a conversation with two commands runs one and queues the other; a second
    conversation's command takes the slot left and finishes while the first still waits."""
    section = ExecSection(timeout=30)
    slots = FairSlots(2)
    tool = ExecTool(section, state_dir=tmp_path / "state", slots=slots)

    def run(conversation: str, command: str) -> asyncio.Task[ToolOutput]:
        context = ToolContext(RunScope(conversation), Target("telegram", conversation), "c")
        return asyncio.create_task(tool.run({"command": command}, context))

    marker = f"{3000 + secrets.randbelow(10**6)}.5"
    first = run("telegram:1", f"sleep {marker}")
    queued = run("telegram:1", "echo second")
    await until(lambda: processes_with(marker), "the first command running")
    assert slots.waiting() == 1 and slots.held("telegram:1") == 1
    other = await asyncio.wait_for(run("telegram:2", "echo other"), 20)
    assert other.text.startswith("exit status 0\nstdout:\nother")
    assert not first.done() and not queued.done()  # the first conversation still waits
    first.cancel()
    assert (await asyncio.wait_for(queued, 20)).text.startswith("exit status 0\nstdout:\nsecond")
    await until(lambda: processes_with(marker) == [], "the first command killed")
