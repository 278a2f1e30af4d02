"""A command loads the optional parts its config uses and not the others: the HTTP server
(aiohttp) only when health is served or Telegram's webhook (aiohttp too) in webhook
mode, httpx only for what fetches, Pillow only in the reading worker, the MCP client only for
configured servers, and ``botd check`` nothing of the runtime. Each command runs in a process
of its own, which then lists what of ``WATCHED`` it imported; a config that does use a part
shows that part loaded, so an empty list means something.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.daemon_process import HANG_GUARD, daemon_env

WATCHED = [
    "aiohttp",
    "httpx",
    "PIL",
    "mcp",
    "jsonschema",
    "telegram",
    "anthropic",
    "botd.ops.health",
    "botd.http.server",
    "botd.net.fetch",
    "botd.agent.tools.web_fetch.tool",
    "botd.agent.mcp",
    "botd.agent.tools.base",
    "botd.store",
    "botd.events",
    "botd.cluster.leases",
]

LOADED = textwrap.dedent(
    f"""
    import json, sys
    from botd.cli import main
    status = main(sys.argv[1:])
    print(status, json.dumps([m for m in {WATCHED!r} if m in sys.modules]))
    """
)
"""``botd ARGS`` in this process, then its exit status and the watched modules it loaded."""


def loaded(tmp_path: Path, *args: str, input: str | None = None) -> tuple[int, list[str]]:
    result = subprocess.run(
        [sys.executable, "-c", LOADED, *args],
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=daemon_env(TELEGRAM_TOKEN="123:abc", ANTHROPIC_TEST_KEY="k"),
        timeout=HANG_GUARD,
    )
    assert result.returncode == 0, result.stderr
    status, modules = result.stdout.splitlines()[-1].split(" ", 1)
    return int(status), json.loads(modules)


def console_config(tmp_path: Path, extra: str = "") -> Path:
    config = tmp_path / "botd.yaml"
    config.write_text(
        f"state_dir: {json.dumps(str(tmp_path / 'state'))}\n"
        "model: {provider: scripted}\n"
        "channels:\n  console: {enabled: true}\n" + extra,
        encoding="utf-8",
    )
    return config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_console_botd_answers_without_the_health_server_httpx_pillow_or_mcp(
    tmp_path: Path,
) -> None:
    config = console_config(tmp_path, "health: {enabled: false}\n")
    status, modules = loaded(tmp_path, "run", "--config", str(config), input="hello\n")
    assert status == 0
    assert {"botd.store", "botd.agent.tools.base"} <= set(modules)  # it ran a turn with its tools
    unused = {"aiohttp", "httpx", "PIL", "mcp", "telegram", "anthropic", "botd.ops.health"}
    unused |= {"botd.http.server"}
    assert unused.isdisjoint(modules), modules
    assert "botd.net.fetch" not in modules and "botd.agent.tools.web_fetch.tool" not in modules


def test_the_health_server_and_the_web_fetch_tool_load_what_they_use(tmp_path: Path) -> None:
    extra = (
        f"health: {{enabled: true, port: {free_port()}}}\n"
        "agent:\n  tools: [message, schedule, web_fetch]\n"
    )
    config = console_config(tmp_path, extra)
    status, modules = loaded(tmp_path, "run", "--config", str(config), input="hello\n")
    assert status == 0
    served = {"aiohttp", "botd.ops.health", "botd.http.server"}
    assert served | {"httpx", "botd.agent.tools.web_fetch.tool"} <= set(modules)
    assert "PIL" not in modules and "mcp" not in modules


def test_check_loads_nothing_of_the_runtime(tmp_path: Path) -> None:
    config = tmp_path / "botd.yaml"
    config.write_text(
        "model: {provider: anthropic, name: claude-test, api_key: '${ANTHROPIC_TEST_KEY}'}\n"
        "channels:\n  telegram: {token: '${TELEGRAM_TOKEN}'}\n",
        encoding="utf-8",
    )
    assert loaded(tmp_path, "check", "--config", str(config)) == (0, [])


def test_doctor_loads_the_mcp_client_only_for_configured_servers(tmp_path: Path) -> None:
    status, modules = loaded(tmp_path, "doctor", "--config", str(console_config(tmp_path)))
    assert status == 0
    assert "botd.agent.mcp" not in modules and "jsonschema" not in modules
    servers = "agent:\n  mcp_servers:\n    gone: {command: /nonexistent/mcp-server}\n"
    status, modules = loaded(tmp_path, "doctor", "--config", str(console_config(tmp_path, servers)))
    assert status == 1  # the server cannot start: its check fails
    assert "botd.agent.mcp" in modules


def test_the_telegram_adapter_loads_aiohttp_only_for_its_webhook() -> None:
    code = textwrap.dedent(
        """
        import sys
        import botd.channels.telegram.adapter
        polling = "aiohttp" in sys.modules
        import botd.channels.telegram.webhook
        print(polling, "aiohttp" in sys.modules)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True"]
