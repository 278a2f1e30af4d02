"""``botd acp`` over plain pipes (no ACP client): stdout carries only JSON-RPC frames, a line
that is no JSON object is answered with an error while the connection goes on, the socket is
its user's alone, and a config whose channels write to the terminal is refused."""

from __future__ import annotations

import asyncio
import json
import stat
import sys
from pathlib import Path

from tests.support.daemon_inprocess import config_yaml
from tests.support.daemon_process import daemon_env, reap, run_botd
from tests.support.waiting import HANG_GUARD


async def _botd_acp(tmp_path: Path) -> asyncio.subprocess.Process:
    """``botd acp`` on a config with the ACP channel, its stdin and stdout piped to the test."""
    config = tmp_path / "botd.yaml"
    config.write_text(
        config_yaml(
            tmp_path, "model: {provider: scripted}\n", "channels:\n  acp: {enabled: true}\n"
        )
    )
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "botd",
        "acp",
        "--config",
        str(config),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=tmp_path,
        env=daemon_env(),
    )


async def test_stdout_carries_only_frames_and_a_line_that_is_no_object_is_an_error(
    tmp_path: Path,
) -> None:
    process = await _botd_acp(tmp_path)
    try:
        assert process.stdin is not None and process.stdout is not None
        initialize = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "initialize",
            "params": {"protocolVersion": 1},
        }
        process.stdin.write(b"this is not json\n[1, 2]\n" + json.dumps(initialize).encode() + b"\n")
        process.stdin.close()
        out = await asyncio.wait_for(process.stdout.read(), HANG_GUARD)
        assert await asyncio.wait_for(process.wait(), HANG_GUARD) == 0
    finally:
        await reap(process)
    frames = [json.loads(line) for line in out.decode().splitlines()]  # every line is JSON
    assert [frame.get("id") for frame in frames] == [None, None, 7]
    assert frames[0]["error"]["code"] == -32700
    assert frames[0]["error"]["message"].startswith("Parse error: not JSON")
    assert frames[1]["error"]["code"] == -32600
    assert frames[2]["result"]["protocolVersion"] == 1


async def test_the_socket_is_its_users_alone(tmp_path: Path) -> None:
    process = await _botd_acp(tmp_path)
    try:
        assert process.stdin is not None and process.stdout is not None
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": 1},
        }
        process.stdin.write(json.dumps(initialize).encode() + b"\n")
        await asyncio.wait_for(process.stdout.readline(), HANG_GUARD)  # it serves now
        mode = (tmp_path / "state" / "acp.sock").stat().st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
        process.stdin.close()
        assert await asyncio.wait_for(process.wait(), HANG_GUARD) == 0
    finally:
        await reap(process)


def test_a_config_with_the_console_is_refused_when_botd_acp_runs_the_daemon(
    tmp_path: Path,
) -> None:
    config = tmp_path / "botd.yaml"
    config.write_text(
        config_yaml(
            tmp_path,
            "model: {provider: scripted}\n",
            "channels:\n  acp: {enabled: true}\n  console: {enabled: true}\n",
        )
    )
    done = run_botd("acp", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "channels.console writes to this terminal" in done.stderr
