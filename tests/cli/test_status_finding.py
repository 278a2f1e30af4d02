"""``botd status`` without ``--config`` asks the running botd with its own config, found in a
stated order (``botd.cli.finding``): ``./botd.yaml``, the installed unit's ``--config``,
``./var``; the config a running botd's lock names is the one used, and its health endpoint
is asked where the lock says. None found is said, with how to point at it; the built-in
console config is never used in its place.

The daemon runs in the test's loop (Telegram over the loopback Bot API) and the command in a
child process started in the directory a test chooses; where the unit is looked for is the
finder's argument, so those cases call it in the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from botd.cli.finding import NotFound, find_config, unit_config
from botd.config import default_config
from botd.ops.statelock import StateLock
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_inprocess import daemon_running, telegram_yaml
from tests.support.daemon_process import run_botd
from tests.support.health_probe import free_port

ROOT = Path(__file__).resolve().parents[2]


async def status_in(cwd: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``botd status`` without ``--config``, started in ``cwd``."""
    return await asyncio.to_thread(run_botd, "status", *options, cwd=cwd)


def telegram_config(path: Path, state: Path, telegram: FakeTelegramAPI) -> str:
    text = (
        f"state_dir: {json.dumps(str(state))}\n"
        f"health: {{enabled: true, port: {free_port()}}}\n"
        + telegram_yaml(telegram, "poll_timeout: 1", "dm_policy: open")
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return text


async def test_botd_yaml_in_the_current_directory_is_the_first_place(
    tmp_path: Path, telegram: FakeTelegramAPI
) -> None:
    config = tmp_path / "botd.yaml"
    text = telegram_config(config, tmp_path / "state", telegram)
    async with daemon_running(text, config_path=config):
        done = await status_in(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == (
            f"config {config}: botd.yaml in the current directory; the botd holding its state dir"
        )
        assert lines[1].endswith(": ok") and f"(pid {os.getpid()} on " in lines[1]
        body = json.loads((await status_in(tmp_path, "--json")).stdout)
        assert body["config"] == str(config) and body["status"] == "ok"
        assert body["found_by"].startswith("botd.yaml in the current directory")
    done = await status_in(tmp_path)  # stopped: the same config says so
    assert done.returncode == 3
    assert done.stdout.splitlines() == [
        f"config {config}: botd.yaml in the current directory",
        f"botd is not running: no botd holds state dir {tmp_path / 'state'}",
    ]


async def test_the_config_the_running_botd_names_is_used_and_its_health_asked_where_it_says(
    tmp_path: Path, telegram: FakeTelegramAPI
) -> None:
    # The case: botd runs with a config elsewhere whose state dir is ./var here.
    work = tmp_path / "work"
    config = tmp_path / "etc" / "bot.yaml"
    text = telegram_config(config, work / "var", telegram)
    async with daemon_running(text, config_path=config):
        done = await status_in(work)
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == (
            f"config {config}: the botd holding {work / 'var'} (the state dir of botd run "
            "without --config), which runs it"
        )
        assert lines[1].endswith(": ok")
        assert "  channel telegram  up" in lines


def test_the_state_dir_of_botd_run_without_config_is_the_last_place(tmp_path: Path) -> None:
    with StateLock(tmp_path / "var"):  # a console botd run here, without --config
        found = find_config(tmp_path, {}, unit_dirs=[tmp_path / "no-units"])
    assert found.path is None
    assert found.config == default_config({})
    assert found.how == (
        f"the botd holding {tmp_path / 'var'} (the state dir of botd run without --config)"
    )
    done = run_botd("status", cwd=tmp_path)  # nothing runs there any more
    if unit_config() is None:  # this machine has no botd unit of its own
        assert done.returncode == 3


def test_the_installed_units_config_is_the_second_place(tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    shipped = (ROOT / "systemd" / "botd.service").read_text(encoding="utf-8")
    (units / "botd.service").write_text(shipped, encoding="utf-8")
    assert unit_config([units]) == (Path("/etc/botd/botd.yaml"), units / "botd.service")

    config = tmp_path / "etc" / "botd.yaml"
    config.parent.mkdir()
    config.write_text(f"state_dir: {json.dumps(str(tmp_path / 'state'))}\n", encoding="utf-8")
    (units / "botd.service").write_text(
        shipped.replace("--config /etc/botd/botd.yaml", f"--config={config}"), encoding="utf-8"
    )
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    found = find_config(cwd, {}, unit_dirs=[tmp_path / "none", units])
    assert (found.path, found.how) == (config, f"the --config of {units / 'botd.service'}")
    assert found.config.state_dir == tmp_path / "state"

    # ./botd.yaml comes first, unless only the unit's state dir is held.
    local = cwd / "botd.yaml"
    local.write_text(f"state_dir: {json.dumps(str(cwd / 'mine'))}\n", encoding="utf-8")
    assert find_config(cwd, {}, unit_dirs=[units]).path == local
    with StateLock(tmp_path / "state", config=config):
        found = find_config(cwd, {}, unit_dirs=[units])
    assert found.path == config
    assert found.how == f"the --config of {units / 'botd.service'}; the botd holding its state dir"


def test_nothing_found_is_said_with_how_to_point_at_it(tmp_path: Path) -> None:
    units = tmp_path / "units"
    with pytest.raises(NotFound) as none:
        find_config(tmp_path, {}, unit_dirs=[units])
    assert str(none.value) == (
        f"found no botd to ask: no botd.yaml in {tmp_path}, no botd.service with --config in "
        f"{units}, and no botd holds {tmp_path / 'var'}; name its config with --config FILE"
    )
    if unit_config() is not None:
        pytest.skip("this machine has a botd unit of its own")
    done = run_botd("status", cwd=tmp_path)
    assert done.returncode == 3
    [line] = done.stdout.splitlines()
    assert line.startswith("botd is not running: found no botd to ask: no botd.yaml in ")
    assert line.endswith("; name its config with --config FILE")
    body = json.loads(run_botd("status", "--json", cwd=tmp_path).stdout)
    assert body["status"] == "not running" and body["state_dir"] is None
    assert body["config"] is None and body["reason"].startswith("found no botd to ask")
