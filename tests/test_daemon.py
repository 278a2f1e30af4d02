"""``botd run`` as an admin runs it: a subprocess, real SDKs, loopback fakes, signals."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
from pathlib import Path

from botd.store.sqlite import SqliteStore
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_process import (
    BOTD,
    HANG_GUARD,
    RunningDaemon,
    daemon_env,
    reap,
    run_botd,
    start_daemon,
    stop_daemon,
)
from tests.support.waiting import file_contains, until

DM = 777


def test_piped_input_is_answered_and_the_daemon_exits_cleanly(tmp_path: Path) -> None:
    result = run_botd("run", cwd=tmp_path, input="hello\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "You said: hello\n"
    assert (tmp_path / "var" / "botd.sqlite3").exists()  # the embedded default's state


async def test_the_state_directory_holds_one_database(tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = tmp_path / "botd.yaml"
    config.write_text(
        f"""
state_dir: {json.dumps(str(state))}
health: {{enabled: false}}
model:
  provider: scripted
channels:
  console:
    enabled: true
scheduler:
  timezone: UTC
  jobs:
    - id: hourly
      every: 1h
      prompt: "Anything new?"
      deliver_to: {{channel: console, chat: console}}
""",
        encoding="utf-8",
    )
    result = run_botd("run", "--config", str(config), cwd=tmp_path, input="hello\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "You said: hello\n"
    # Conversations, dedupe ids, offsets and the scheduled job: all in botd.sqlite3.
    databases = sorted(
        p.name for p in state.iterdir() if p.name not in ("pairing.json", "botd.lock")
    )
    assert databases == ["botd.sqlite3"]
    with SqliteStore.open(state) as store:
        assert [job.id for job in await store.load_jobs()] == ["hourly"]


async def test_ready_and_stopping_reach_the_notify_socket_and_sigterm_exits_0(
    tmp_path: Path,
) -> None:
    notify = tmp_path / "notify.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify))
    listener.setblocking(False)
    process = await asyncio.create_subprocess_exec(
        *BOTD,
        "run",
        stdin=asyncio.subprocess.PIPE,  # kept open: the console waits for input
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=tmp_path,
        env=daemon_env(NOTIFY_SOCKET=str(notify)),
    )
    loop = asyncio.get_running_loop()
    try:
        ready = await asyncio.wait_for(loop.sock_recv(listener, 4096), HANG_GUARD)
        assert b"READY=1" in ready
        process.send_signal(signal.SIGTERM)
        messages: list[bytes] = []
        while not any(b"STOPPING=1" in m for m in messages):
            messages.append(await asyncio.wait_for(loop.sock_recv(listener, 4096), HANG_GUARD))
        assert await asyncio.wait_for(process.wait(), HANG_GUARD) == 0
    finally:
        await reap(process)
        listener.close()


def _config(
    path: Path, state: Path, telegram: FakeTelegramAPI, anthropic: FakeAnthropicAPI
) -> Path:
    config = path / "botd.yaml"
    config.write_text(
        f"""
state_dir: {json.dumps(str(state))}
health: {{enabled: false}}
model:
  provider: anthropic
  name: claude-test
  api_key: ${{ANTHROPIC_TEST_KEY}}
  base_url: {json.dumps(anthropic.base_url)}
  max_retry_wait: 1
channels:
  telegram:
    token: ${{TELEGRAM_TEST_TOKEN}}
    api_base_url: {json.dumps(telegram.base_url)}
    dm_policy: open
""",
        encoding="utf-8",
    )
    return config


async def _start(
    config: Path, cwd: Path, token: str, log_path: Path | None = None
) -> RunningDaemon:
    return await start_daemon(
        config,
        cwd,
        log_path=log_path,
        ANTHROPIC_TEST_KEY="sk-ant-test",
        TELEGRAM_TEST_TOKEN=token,
    )


_stop = stop_daemon


async def test_telegram_and_anthropic_end_to_end_across_a_restart(tmp_path: Path) -> None:
    token = "123456:TEST-TOKEN"
    state = tmp_path / "state"
    async with FakeTelegramAPI(token) as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = _config(tmp_path, state, telegram, model)
        model.push(stream(text("Hello ", "Ada!")))
        first = await _start(config, tmp_path, token)
        try:
            telegram.push_text(DM, "hi there")
            await telegram.wait_for_call("sendMessage", 1, timeout=HANG_GUARD)
            assert await _stop(first) == 0
        finally:
            await reap(first)
        sent = telegram.calls_to("sendMessage", ok_only=True)
        assert [c.params["text"] for c in sent] == ["Hello Ada!"]

        model.push(stream(text("Still here.")))
        second = await _start(config, tmp_path, token)
        try:
            telegram.push_text(DM, "are you still there?")
            await telegram.wait_for_call("sendMessage", 2, timeout=HANG_GUARD)
            assert await _stop(second) == 0
        finally:
            await reap(second)

    texts = [c.params["text"] for c in telegram.calls_to("sendMessage", ok_only=True)]
    assert texts == ["Hello Ada!", "Still here."]  # nothing replayed after the restart
    # The conversation continued: the second model call carried the first exchange.
    second_request = model.requests[-1].body["messages"]
    flattened = json.dumps(second_request)
    assert "hi there" in flattened and "Hello Ada!" in flattened
    assert "are you still there?" in flattened
    assert len(model.requests) == 2


async def test_sighup_refuses_an_invalid_file_and_applies_a_valid_one(tmp_path: Path) -> None:
    token = "123456:TEST-TOKEN"
    async with FakeTelegramAPI(token) as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = _config(tmp_path, tmp_path / "state", telegram, model)
        valid = config.read_text(encoding="utf-8")
        log_path = tmp_path / "daemon.log"
        process = await _start(config, tmp_path, token, log_path)
        try:
            model.push(stream(text("one")))
            telegram.push_text(DM, "first")
            await telegram.wait_for_call("sendMessage", 1, timeout=HANG_GUARD)

            config.write_text(valid + "bogus_key: 1\n", encoding="utf-8")
            process.send_signal(signal.SIGHUP)
            await until(file_contains(log_path, "reload refused"), "reload refused in the log")
            model.push(stream(text("two")))
            telegram.push_text(DM, "second")
            await telegram.wait_for_call("sendMessage", 2, timeout=HANG_GUARD)

            job = (
                "scheduler:\n  jobs:\n    - id: nightly\n      cron: '0 3 * * *'\n"
                "      prompt: report\n      deliver_to: {channel: telegram, chat: 777}\n"
            )
            config.write_text(valid + job, encoding="utf-8")
            process.send_signal(signal.SIGHUP)
            await until(
                file_contains(log_path, "re-syncing scheduled jobs"),
                "re-syncing scheduled jobs in the log",
            )
            model.push(stream(text("three")))
            telegram.push_text(DM, "third")
            await telegram.wait_for_call("sendMessage", 3, timeout=HANG_GUARD)
            assert await _stop(process) == 0
        finally:
            await reap(process)
        log = log_path.read_text(encoding="utf-8", errors="replace")
    texts = [c.params["text"] for c in telegram.calls_to("sendMessage", ok_only=True)]
    assert texts == ["one", "two", "three"]
    assert "reload refused" in log and "bogus_key" in log
    assert "re-syncing scheduled jobs" in log


def test_the_log_level_is_warning_while_the_console_runs_unless_asked() -> None:
    from botd.app import App
    from botd.config import parse_config

    console = "channels:\n  console: {enabled: true}\n"
    telegram = "channels:\n  telegram: {token: t}\n"
    for yaml_text, debug, level in [
        (console, False, "WARNING"),
        (console, True, "DEBUG"),
        (console + "logging: {level: INFO}\n", False, "INFO"),
        (console + "logging: {format: json}\n", False, "WARNING"),
        (console.replace("true", "false") + telegram.split("\n", 1)[1], False, "INFO"),
        (telegram, False, "INFO"),
        (telegram + "logging: {level: ERROR}\n", True, "DEBUG"),
    ]:
        config = parse_config(yaml_text, {})
        assert App(config, debug=debug).log_level(config) == level, yaml_text
