"""Operations: the systemd notify protocol and unit file, the health endpoint, logging."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from botd.config import BotdConfig, default_config
from botd.http.routes import HttpServers
from botd.ops.health import HealthEndpoint, HealthPortInUse
from botd.ops.logging import LogContext, configure_logging
from botd.ops.metrics import Metrics
from botd.ops.ports import cannot_listen, listen_problem
from botd.ops.status import StatusReport
from botd.ops.systemd import SystemdNotifier
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_process import ended, reap, start_daemon

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "botd.service"
NODE_DROP_IN = ROOT / "systemd" / "botd.service.d" / "mcp-node.conf"
EXEC_DROP_IN = ROOT / "systemd" / "botd.service.d" / "exec.conf"

# --------------------------------------------------------------------------- notify socket


def _recv(sock: socket.socket) -> bytes:
    sock.settimeout(5)
    return sock.recv(4096)


@pytest.fixture
def notify_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify"
    sock.bind(str(path))
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    yield sock
    sock.close()


def test_ready_watchdog_stopping_reach_the_socket(notify_socket: socket.socket) -> None:
    notifier = SystemdNotifier()
    assert notifier.enabled
    assert notifier.ready()
    assert _recv(notify_socket) == b"READY=1"
    assert notifier.watchdog()
    assert _recv(notify_socket) == b"WATCHDOG=1"
    assert notifier.status("2 channels\nrunning")
    assert _recv(notify_socket) == b"STATUS=2 channels running"
    assert notifier.stopping("shutting down")
    assert _recv(notify_socket) == b"STOPPING=1\nSTATUS=shutting down"


def test_abstract_namespace_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"botd-test-{os.getpid()}-{id(monkeypatch)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(b"\0" + name.encode())
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        notifier = SystemdNotifier()
        assert notifier.ready()
        assert _recv(sock) == b"READY=1"
        assert notifier.stopping()
        assert _recv(sock) == b"STOPPING=1"


def test_no_socket_is_a_noop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    notifier = SystemdNotifier()
    assert not notifier.enabled
    assert not notifier.ready()
    assert not notifier.stopping()


def test_missing_socket_logs_once_and_never_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone"))
    notifier = SystemdNotifier()
    with caplog.at_level(logging.WARNING, logger="botd.ops.systemd"):
        assert not notifier.ready()
        assert not notifier.watchdog()
        assert not notifier.stopping()
    assert len([r for r in caplog.records if "notify socket" in r.getMessage()]) == 1


def test_watchdog_interval() -> None:
    assert SystemdNotifier({}).watchdog_interval() is None
    assert SystemdNotifier({"WATCHDOG_USEC": "60000000"}).watchdog_interval() == 30.0
    assert SystemdNotifier({"WATCHDOG_USEC": "junk"}).watchdog_interval() is None
    assert SystemdNotifier({"WATCHDOG_USEC": "0"}).watchdog_interval() is None
    own = {"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}
    assert SystemdNotifier(own).watchdog_interval() == 1.0
    other = {"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid() + 1)}
    assert SystemdNotifier(other).watchdog_interval() is None


async def test_run_watchdog_pings_until_stopped(tmp_path: Path) -> None:
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.setblocking(False)
        # 20 ms watchdog -> a ping every 10 ms.
        notifier = SystemdNotifier({"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "20000"})
        stop = asyncio.Event()
        task = asyncio.create_task(notifier.run_watchdog(stop))
        loop = asyncio.get_running_loop()
        for _ in range(3):
            assert await asyncio.wait_for(loop.sock_recv(sock, 64), 5) == b"WATCHDOG=1"
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_run_watchdog_without_watchdog_waits_for_stop() -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(SystemdNotifier({}).run_watchdog(stop))
    await asyncio.sleep(0)
    assert not task.done()
    stop.set()
    await asyncio.wait_for(task, 5)


# --------------------------------------------------------------------------- unit file


def _unit_copy(tmp_path: Path, text: str, *, drop_in: bool, more: tuple[Path, ...] = ()) -> Path:
    """The unit as ``botd.service`` in ``tmp_path``, with the Node drop-in (and ``more``)
    beside it in ``botd.service.d/`` (where systemd-analyze, like systemd, reads drop-ins) or
    without."""
    copy = tmp_path / "botd.service"
    copy.write_text(text)
    drop_ins = ((NODE_DROP_IN,) if drop_in else ()) + more
    if drop_ins:
        (tmp_path / "botd.service.d").mkdir()
    for source in drop_ins:
        shutil.copyfile(source, tmp_path / "botd.service.d" / source.name)
    return copy


@pytest.mark.parametrize(
    ("drop_in", "more"),
    [(False, ()), (True, ()), (False, (EXEC_DROP_IN,))],
    ids=["unit", "unit+mcp-node", "unit+exec"],
)
def test_unit_file_verifies(tmp_path: Path, drop_in: bool, more: tuple[Path, ...]) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed (.ci/run installs Debian's systemd)")
    text = UNIT.read_text()
    for key in ("Type=notify", "Restart=on-failure", "ProtectSystem=strict", "WatchdogSec=60"):
        assert re.search(rf"^{re.escape(key)}$", text, re.M), key
    # verify checks that ExecStart exists; the real one lives on the target machine only.
    exec_line = "ExecStart=/opt/botd/.venv/bin/botd run --config /etc/botd/botd.yaml"
    assert exec_line in text.splitlines()
    copy = _unit_copy(
        tmp_path,
        text.replace("/opt/botd/.venv/bin/botd", "/bin/true"),
        drop_in=drop_in,
        more=more,
    )
    result = subprocess.run(
        [analyze, "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    own = [line for line in result.stderr.splitlines() if "botd.service" in line]
    assert own == [], own


# --------------------------------------------------------------------------- health endpoint

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _parse_prometheus(text: str) -> tuple[dict[str, str], list[tuple[str, dict[str, str], float]]]:
    """(types by metric family, samples); fails on any line that is not valid exposition."""
    types: dict[str, str] = {}
    samples: list[tuple[str, dict[str, str], float]] = []
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped")
            types[name] = kind
        elif line.startswith("# HELP "):
            continue
        else:
            match = _SAMPLE.match(line)
            assert match, line
            name, labels, value = match.groups()
            samples.append((name, dict(_LABEL.findall(labels or "")), float(value)))
    for name, _, _ in samples:
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in types or family in types, name
    return types, samples


def _metrics() -> Metrics:
    metrics = Metrics()
    metrics.message_in("telegram")
    metrics.message_in("telegram")
    metrics.message_in("slack")
    metrics.message_out("telegram")
    metrics.run_started("telegram")
    metrics.error("slack", "send_failed")
    for seconds in (0.01, 0.3, 0.3, 4.0, 500.0):
        metrics.observe_latency("telegram", seconds)
    return metrics


async def test_healthz_and_metrics() -> None:
    states = {"telegram": "running", "slack": "running"}
    servers = HttpServers()
    server = HealthEndpoint(StatusReport(channel_states=lambda: dict(states), metrics=_metrics()))
    port = await server.serve(servers)
    try:
        async with aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{port}"
            async with http.get(f"{base}/healthz") as resp:
                assert resp.status == 200
                body = await resp.json()
                assert {key: body[key] for key in ("status", "channels", "components")} == {
                    "status": "ok",
                    "channels": states,
                    "components": {},
                }
                assert body["problems"] == []
                assert body["botd"]["pid"] == os.getpid()
                assert body["stats"] == {"runs_in_flight": 1}  # started, never ended
            states["slack"] = "reconnecting"
            async with http.get(f"{base}/healthz") as resp:
                assert resp.status == 503
                body = await resp.json()
                assert body["status"] == "degraded"
                assert body["channels"]["slack"] == "reconnecting"
                assert body["problems"] == ["channel slack: reconnecting"]
            async with http.get(f"{base}/metrics") as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                text = await resp.text()
    finally:
        await servers.close()

    types, samples = _parse_prometheus(text)
    assert types["botd_messages_in_total"] == "counter"
    assert types["botd_reply_latency_seconds"] == "histogram"
    values = {(n, tuple(sorted(labels.items()))): v for n, labels, v in samples}
    assert values[("botd_messages_in_total", (("channel", "telegram"),))] == 2
    assert values[("botd_messages_in_total", (("channel", "slack"),))] == 1
    assert values[("botd_errors_total", (("channel", "slack"), ("kind", "send_failed")))] == 1
    buckets = [
        (labels["le"], v) for n, labels, v in samples if n == "botd_reply_latency_seconds_bucket"
    ]
    assert buckets[-1] == ("+Inf", 5)
    bounds = [float(le) for le, _ in buckets]
    counts = [v for _, v in buckets]
    assert bounds == sorted(bounds) and counts == sorted(counts)
    assert values[("botd_reply_latency_seconds_count", (("channel", "telegram"),))] == 5
    assert values[("botd_reply_latency_seconds_sum", (("channel", "telegram"),))] == pytest.approx(
        504.61
    )
    assert dict(zip(bounds, counts, strict=True))[0.5] == 3


async def test_health_server_restartable_and_stop_idempotent() -> None:
    http = HttpServers()
    server = HealthEndpoint(StatusReport(channel_states=dict, metrics=Metrics()))
    port = await server.serve(http)
    assert port > 0 and http.listening() == [("127.0.0.1", port)]
    await server.stop()
    assert http.listening() == []  # its routes gone, the server went with them
    await server.stop()
    assert await server.serve(http) > 0
    await http.close()


async def test_a_health_port_in_use_is_one_line_naming_health_port() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        line = (
            f"health.port: cannot listen on 127.0.0.1:{port}: Address already in use; stop "
            "what listens there, choose another health.port, or set health.enabled: false"
        )
        assert cannot_listen(listen_problem("127.0.0.1", port) or "") == line
        http = HttpServers()
        server = HealthEndpoint(StatusReport(channel_states=dict, metrics=Metrics()))
        with pytest.raises(HealthPortInUse) as caught:
            await server.serve(http, port=port)
        assert str(caught.value) == line
        assert http.listening() == []  # nothing was left running
        await server.stop()


def test_health_is_on_by_default_but_not_for_the_embedded_console_config() -> None:
    assert BotdConfig().health.enabled and BotdConfig().health.port == 8480
    assert default_config({}).health.enabled is False  # two `make run`s share no port


def test_metrics_escape_labels_and_reject_unknown_error_kinds() -> None:
    metrics = Metrics()
    metrics.message_in('we"ird\\chan\nnel')
    assert 'channel="we\\"ird\\\\chan\\nnel"' in metrics.render()
    with pytest.raises(ValueError, match="unknown error kind"):
        metrics.error("x", "nope")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- logging


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    clients = {name: logging.getLogger(name).level for name in HTTP_CLIENTS}
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    for name, client_level in clients.items():
        logging.getLogger(name).setLevel(client_level)


HTTP_CLIENTS = ("httpx", "httpcore", "httpx2", "httpcore2")


@pytest.mark.usefixtures("restore_root_logger")
@pytest.mark.parametrize("client", HTTP_CLIENTS)
def test_http_clients_request_lines_show_only_at_debug(client: str) -> None:
    out = io.StringIO()
    configure_logging("INFO", "text", stream=out)
    logger = logging.getLogger(client)
    logger.info('HTTP Request: POST http://example.test/sendMessage "HTTP/1.1 200 OK"')
    logger.warning("connection reset, retrying")
    logging.getLogger("botd.test").info("botd's own line")
    lines = out.getvalue().splitlines()
    assert [line.split(" ", 3)[3] for line in lines] == [
        "connection reset, retrying",
        "botd's own line",
    ]
    configure_logging("DEBUG", "text", stream=out)  # a reload to DEBUG shows them again
    logger.info("HTTP Request: GET http://example.test/getMe")
    assert out.getvalue().splitlines()[-1].endswith("HTTP Request: GET http://example.test/getMe")


@pytest.mark.usefixtures("restore_root_logger")
def test_json_logging_carries_context_ids() -> None:
    out = io.StringIO()
    configure_logging("DEBUG", "json", stream=out)
    logger = logging.getLogger("botd.test")
    with LogContext.bind(channel="telegram", conversation="tg:42"):
        with LogContext.bind(run="run-7"):
            logger.info("skipped %s", "msg-1", extra={"reason": "not mentioned"})
        logger.debug("after run")
    logger.warning("no context")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 3
    first, second, third = lines
    assert first["msg"] == "skipped msg-1"
    assert first["level"] == "INFO" and first["logger"] == "botd.test"
    assert (first["channel"], first["conversation"], first["run"]) == ("telegram", "tg:42", "run-7")
    assert first["reason"] == "not mentioned"
    assert second["conversation"] == "tg:42" and "run" not in second
    assert not {"channel", "conversation", "run"} & third.keys()
    assert LogContext.current() == {}


@pytest.mark.usefixtures("restore_root_logger")
async def test_context_follows_tasks() -> None:
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out)

    async def turn(run: str) -> None:
        with LogContext.bind(run=run):
            await asyncio.sleep(0)
            logging.getLogger("botd.test").info("turn")

    with LogContext.bind(channel="slack", conversation="C1"):
        await asyncio.gather(turn("a"), turn("b"))
    runs = sorted(json.loads(line)["run"] for line in out.getvalue().splitlines())
    assert runs == ["a", "b"]


@pytest.mark.usefixtures("restore_root_logger")
def test_text_logging_and_reconfigure() -> None:
    first = io.StringIO()
    configure_logging("INFO", "json", stream=first)
    out = io.StringIO()
    configure_logging("warning", "text", stream=out)  # replaces the earlier handler
    logger = logging.getLogger("botd.test")
    logger.info("hidden")
    with LogContext.bind(channel="discord", conversation="g1", run="r1"):
        logger.warning("hello %d", 5)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logger.exception("failed")
    assert first.getvalue() == ""
    lines = out.getvalue().splitlines()
    assert re.match(
        r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z WARNING botd\.test "
        r"\[channel=discord conversation=g1 run=r1\] hello 5$",
        lines[0],
    )
    assert lines[1].endswith("ERROR botd.test failed")
    assert "RuntimeError: boom" in out.getvalue()
    with pytest.raises(ValueError):
        configure_logging("LOUD", "text", stream=out)


SECRETS = [
    "xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "xapp-1-A0123456789-1234567890123-abcdef0123456789abcdef",
    "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcdefgh",
    "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw_x",
    "MTA4NzY1NDMyMTA5ODc2NTQzMg.GaBcDe.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
]


@pytest.mark.usefixtures("restore_root_logger")
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_tokens_are_masked(fmt: str) -> None:
    out = io.StringIO()
    configure_logging("INFO", "json" if fmt == "json" else "text", stream=out)
    logger = logging.getLogger("botd.test")
    for secret in SECRETS:
        logger.info("connecting with token=%s now", secret)
    logger.info("literal %s in message", SECRETS[0])
    logger.info("POST https://api.telegram.org/bot%s/getUpdates", SECRETS[4])
    try:
        raise RuntimeError(f"auth failed for {SECRETS[4]}")
    except RuntimeError:
        logger.exception("telegram refused")
    logger.info("plain text 12:30 and sk-short stays", extra={"key": SECRETS[2]})
    text = out.getvalue()
    for secret in SECRETS:
        assert secret not in text
    assert "xoxb-***" in text and "sk-ant-***" in text and "123456789:***" in text
    assert "plain text 12:30 and sk-short stays" in text
    assert "/bot123456789:***/getUpdates" in text


def _analyze_security() -> str:
    """systemd-analyze, if it can score a unit file offline (systemd 252 or later)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed (.ci/run installs Debian's systemd)")
    version = subprocess.run(
        [analyze, "--version"], capture_output=True, text=True, timeout=60, check=False
    ).stdout
    found = re.match(r"systemd (\d+)", version)
    if found is None or int(found.group(1)) < 252:
        pytest.skip(f"systemd-analyze security --offline needs systemd 252: {version[:40]!r}")
    return analyze


@pytest.mark.parametrize("drop_in", [False, True], ids=["unit", "unit+mcp-node"])
def test_unit_file_hardening_keeps_exposure_at_most_2(tmp_path: Path, drop_in: bool) -> None:
    analyze = _analyze_security()
    text = UNIT.read_text()
    for key in (
        "RestartPreventExitStatus=2",
        "SystemCallFilter=@system-service",
        "ProtectProc=invisible",
        "ProcSubset=pid",
        "UMask=0077",
        "Documentation=file:///usr/share/doc/botd/README.md",
    ):
        assert re.search(rf"^{re.escape(key)}$", text, re.M), key
    unit_section = text.split("[Service]")[0]
    assert re.search(r"^StartLimitIntervalSec=\d+$", unit_section, re.M)
    assert re.search(r"^StartLimitBurst=\d+$", unit_section, re.M)
    # The install steps put the README where Documentation= points, and the pages it links
    # to beside it.
    install = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    assert "README.md /usr/share/doc/botd/README.md" in install
    assert "-t /usr/share/doc/botd/docs docs/*.md" in install
    copy = _unit_copy(tmp_path, text, drop_in=drop_in)
    result = subprocess.run(
        [analyze, "security", "--offline=yes", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    found = re.search(r"Overall exposure level for botd\.service: (\d+\.\d+)", result.stdout)
    assert found is not None, result.stdout + result.stderr
    assert float(found.group(1)) <= 2.0
    # The drop-in was read (it is what changes MemoryDenyWriteExecute's line).
    memory = next(line for line in result.stdout.splitlines() if "MemoryDenyWriteExecute=" in line)
    assert memory.startswith("✗" if drop_in else "✓"), memory


def test_mcp_servers_on_node_get_a_drop_in_and_a_writable_cache() -> None:
    unit = UNIT.read_text()
    # The default stays strict; the drop-in lifts that one setting, nothing else.
    assert re.search(r"^MemoryDenyWriteExecute=yes$", unit, re.M)
    settings = [
        line
        for line in NODE_DROP_IN.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert settings == ["[Service]", "MemoryDenyWriteExecute=no"]
    # npx (and uvx) write to HOME, which must be writable under ProtectSystem=strict: the
    # unit's cache directory, and HOME is one of the variables MCP servers get from botd.
    assert re.search(r"^CacheDirectory=botd$", unit, re.M)
    assert re.search(r"^Environment=HOME=%C/botd$", unit, re.M)
    from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS

    assert "HOME" in DEFAULT_INHERITED_ENV_VARS
    # The install page tells when to install the drop-in, and how.
    install = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    assert "systemd/botd.service.d/mcp-node.conf" in install
    assert "botd unit --drop-in mcp-node" in install


async def test_run_with_the_health_port_taken_stops_before_any_channel_connects(
    tmp_path: Path,
) -> None:
    token = "424242:q9ZrTk7pLw2xVb"
    async with FakeTelegramAPI(token=token) as telegram:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            config = tmp_path / "botd.yaml"
            config.write_text(
                f"state_dir: {json.dumps(str(tmp_path / 'state'))}\n"
                "model: {provider: scripted}\n"
                f"channels:\n  telegram:\n    token: ${{T_TOKEN}}\n"
                f"    api_base_url: {json.dumps(telegram.base_url)}\n"
                f"health: {{enabled: true, host: 127.0.0.1, port: {port}}}\n",
                encoding="utf-8",
            )
            process = await start_daemon(config, tmp_path, T_TOKEN=token)
            try:
                status = await ended(process)
            finally:
                await reap(process)
        assert telegram.calls == []  # no channel was connected first
    log = (tmp_path / "daemon.log").read_text(encoding="utf-8")
    assert status == 2, log
    assert (
        f"botd: health.port: cannot listen on 127.0.0.1:{port}: Address already in use; "
        "stop what listens there, choose another health.port, or set health.enabled: false"
    ) in log.splitlines()
    assert "Traceback" not in log
