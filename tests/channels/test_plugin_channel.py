"""A channel from another distribution: ``tests/example_channel`` (``botd-filechat``, a toy
platform kept in two JSON-lines files) installed with pip into a directory of its own, its
``botd.channels`` entry point found by botd's own processes. ``botd check`` accepts its
section, ``botd doctor`` runs its probe, ``botd run`` takes a message in and answers through
its adapter (written in the plugin's own markup), and the core asks its spec what its chat ids
and messaging targets mean, and its adapter's capabilities how Markdown is shown there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemon_process import (
    BOTD,
    HANG_GUARD,
    daemon_env,
    reap,
    start_daemon,
    stop_daemon,
)
from tests.support.waiting import until

EXAMPLE = Path(__file__).resolve().parent.parent / "example_channel"
PIP_INSTALL = [sys.executable, "-m", "pip", "install", "-q", "--no-deps"]
INSTALL_GUARD = 300.0
"""A hang guard for pip building and installing the toy distribution; never a measure."""


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A ``PYTHONPATH`` that sees the installed ``botd-filechat`` and the botd under test."""
    site = tmp_path_factory.mktemp("filechat-site")
    # Built from a copy: setuptools leaves build/ and *.egg-info beside the sources it builds.
    source = tmp_path_factory.mktemp("filechat-source") / "example_channel"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    installed = subprocess.run(
        [*PIP_INSTALL, "--target", str(site), str(source)],
        capture_output=True,
        text=True,
        timeout=INSTALL_GUARD,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    assert (site / "botd_filechat-0.1.0.dist-info" / "entry_points.txt").is_file()
    botd_root = str(Path(__file__).resolve().parent.parent.parent)
    return os.pathsep.join([str(site), os.environ.get("PYTHONPATH", botd_root)])


def _config(tmp_path: Path) -> Path:
    spool = tmp_path / "spool"
    spool.mkdir(exist_ok=True)
    config = tmp_path / "botd.yaml"
    config.write_text(
        f"""
state_dir: {json.dumps(str(tmp_path / "state"))}
health: {{enabled: false}}
model: {{provider: scripted}}
channels:
  filechat:
    spool: {json.dumps(str(spool))}
    dm_policy: allowlist
    allow_from: [ann]
""",
        encoding="utf-8",
    )
    return config


def _botd(plugin_path: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BOTD, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=daemon_env(PYTHONPATH=plugin_path),
        timeout=HANG_GUARD,
        check=False,
    )


def test_check_accepts_the_plugin_section_and_names_its_mistakes(
    plugin_path: str, tmp_path: Path
) -> None:
    config = _config(tmp_path)
    checked = _botd(plugin_path, "check", "--config", str(config))
    assert checked.returncode == 0, checked.stdout + checked.stderr

    config.write_text(config.read_text(encoding="utf-8").replace("spool:", "spoil:"), "utf-8")
    refused = _botd(plugin_path, "check", "--config", str(config))
    assert refused.returncode == 2
    assert "channels.filechat" in refused.stdout + refused.stderr


def test_doctor_runs_the_plugin_probe(plugin_path: str, tmp_path: Path) -> None:
    config = _config(tmp_path)
    doctor = _botd(plugin_path, "doctor", "--config", str(config))
    assert f"filechat: spool {tmp_path / 'spool'} is there" in doctor.stdout, doctor.stderr
    assert "no live probe" not in doctor.stdout

    (tmp_path / "spool").rmdir()
    failing = _botd(plugin_path, "doctor", "--config", str(config))
    assert failing.returncode == 1
    assert "filechat: no spool directory" in failing.stdout


async def test_run_answers_a_message_through_the_plugin_adapter(
    plugin_path: str, tmp_path: Path
) -> None:
    config = _config(tmp_path)
    spool = tmp_path / "spool"
    outbox = spool / "outbox.jsonl"
    process = await start_daemon(config, tmp_path, PYTHONPATH=plugin_path)
    try:
        inbox = spool / "inbox.jsonl"
        lines = [
            {"id": "1", "chat": "dm-bob", "sender": "bob", "text": "let me in"},
            {"id": "2", "chat": "dm-ann", "sender": "ann", "text": "**hello** _there_"},
        ]
        inbox.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")

        def answered() -> bool:
            return outbox.exists() and "You said: HELLO" in outbox.read_text(encoding="utf-8")

        await until(answered, "the answer in the outbox")
        assert await stop_daemon(process) == 0
    finally:
        await reap(process)
    answers = [json.loads(line) for line in outbox.read_text(encoding="utf-8").splitlines()]
    # bob is not on the allowlist: what he is told (if anything) goes to his own chat.
    # Ann's answer is in filechat's own markup: strong in capitals, emphasis in slashes.
    assert {"chat": "dm-ann", "text": "You said: HELLO /there/"} in answers
    assert all(a["chat"] == "dm-bob" for a in answers if a["chat"] != "dm-ann")


def test_the_core_asks_the_plugin_spec_what_its_ids_mean(plugin_path: str) -> None:
    script = """
from botd.channels.registry import target_forms
from botd.config import parse_config
from botd.subscriber.dedupe import messaging_send, same_route
from botd.wiring import access_policies
config = parse_config("channels: {filechat: {spool: spool}}", {})
kind = access_policies(config)["filechat"].kind_of
print(kind("dm-ann"), kind("room-x"))
forms = target_forms()
args = {"action": "send", "channel": "filechat", "to": "FC:Dm-Ann"}
sent = messaging_send(forms, "message", args).target
print(sent.to, same_route(forms, sent, provider="filechat", to="dm-ann", account_id=None))
"""
    shown = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=daemon_env(PYTHONPATH=plugin_path),
        timeout=HANG_GUARD,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "('direct', 'ann') ('group', None)",
        "filechat:dm-ann True",
    ]
