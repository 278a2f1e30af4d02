"""``botd doctor`` and ``botd check`` about a listed tool that needs something of the host:
the ``exec`` tool without its bubblewrap is a failed doctor line and a ``check`` warning
(botd still starts: the tool refuses each call)."""

from __future__ import annotations

from pathlib import Path

from tests.ops.harness import doctor, write_config
from tests.support.daemon_process import run_botd


def _exec_config(tmp_path: Path, bwrap: str) -> Path:
    config = write_config(tmp_path)
    with config.open("a", encoding="utf-8") as file:
        file.write(f"agent:\n  tools: [message, exec]\n  exec: {{bwrap: {bwrap}}}\n")
    return config


async def test_doctor_fails_the_exec_tool_without_bubblewrap(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "no" / "bwrap"
    report = await doctor(_exec_config(tmp_path, str(missing)), tmp_path)
    assert report.status == 1, report.out + report.err
    assert report.failed() == [
        "✗ the exec tool refuses every call (it never runs a command unsandboxed): "
        f"bubblewrap is not installed ({missing} not found): apt-get install bubblewrap"
    ]


def test_check_warns_that_the_exec_tool_cannot_run_and_the_config_is_still_ok(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "no" / "bwrap"
    result = run_botd("check", "--config", str(_exec_config(tmp_path, str(missing))))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "⚠ agent.tools: the exec tool refuses every call (it never runs a command "
        f"unsandboxed): bubblewrap is not installed ({missing} not found): apt-get install "
        "bubblewrap"
    ]
    assert result.stdout.startswith("config OK")
