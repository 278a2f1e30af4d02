"""Several ``botd run`` processes on one PostgreSQL database, against the loopback fakes.

    async with Cluster(tmp_path, postgres_dsn, model, telegram=telegram) as cluster:
        await cluster.start_all()            # or start(node), again after a kill
        await cluster.ready("telegram")      # the channel runs on every node
        poller = await cluster.lease_holder("telegram:")
        await cluster.kill(poller)           # SIGKILL
        cluster.pause(other)                 # SIGSTOP ... cluster.resume(other): SIGCONT
        await cluster.holders("conversation:")   # {lease name: node id} held now
        statuses = await cluster.stop_all()  # SIGTERM, exit statuses

Channels: ``telegram`` (long polling, or ``telegram_mode="webhook"``), ``slack`` (Socket
Mode), ``discord``; ``channel_options``: lines every channel's section gets (``delivery:
stream``), ``agent_options`` lines the ``agent:`` section gets; ``jobs``: scheduled prompts in
every node's config.

Each node is a child process (``tests/support/daemon_process.py``) with a directory of its own (its
config, its ``state_dir``, its log), its own ``store.node_id`` (``n1``, ``n2``...) and a short
``store.lease_ttl``, so takeovers come quickly. Every node reaches the platform and the model
fakes under a path prefix of its own (the fakes' ``node_url``), so each call the fakes record
says which node made it (``via``). In Telegram webhook mode each node listens on a port of its
own and the fake Telegram POSTs to a ``RoundRobinProxy`` in front of them all.

With ``proxied=True`` each node reaches PostgreSQL (and the fake Telegram, if any) through a
``SilentProxy`` of its own (``database_proxy(node)``, ``telegram_proxy(node)``): cut, the
node is cut off from the database or from Telegram while its sockets stay open.
``telegram_poll_timeout`` sets the nodes' long poll (``channels.telegram.poll_timeout``).

The test reads the database (``holders``, ``query``) to know where to aim a fault, as an
operator would, and when a job fired, and may make a fault there (``execute``); what it
asserts is what the fakes saw. At the end every node still running is continued (if paused)
and killed, whatever the test did.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Self

import psycopg
from psycopg.conninfo import make_conninfo

from tests.cluster.proxy import RoundRobinProxy
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.discord_api import FakeDiscordAPI
from tests.fakes.slack_api import FakeSlack
from tests.fakes.tcp_proxy import SilentProxy
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_process import RunningDaemon, ended, reap, start_daemon
from tests.support.health_probe import free_port
from tests.support.waiting import file_contains, until

TOKEN = "123456:TEST-TOKEN"
MODEL_KEY = "sk-ant-test"
HOOK_SECRET = "cluster-hook-secret"
HOOK_PATH = "/telegram"
HOOK_URL = "https://bot.example.org/telegram"
"""What the nodes register with ``setWebhook``; the fake POSTs to the proxy instead (the TLS
end of a real deployment, which forwards to the load balancer)."""


@dataclass(frozen=True)
class Job:
    """A scheduled prompt every node is configured with: ``every`` (``3s``) to ``chat``."""

    id: str
    every: str
    prompt: str
    channel: str
    chat: str


@dataclass
class Node:
    """One ``botd run`` of the cluster."""

    name: str
    root: Path
    listen_port: int
    """Its Telegram webhook listener (webhook mode)."""
    process: RunningDaemon | None = None
    paused: bool = False
    starts: int = 0

    @property
    def config(self) -> Path:
        return self.root / "botd.yaml"

    @property
    def log(self) -> Path:
        return self.root / "daemon.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None


@dataclass
class Cluster:
    """N nodes on the database ``dsn`` (see the module docstring). Configure, then ``start``."""

    root: Path
    dsn: str
    model: FakeAnthropicAPI
    telegram: FakeTelegramAPI | None = None
    slack: FakeSlack | None = None
    discord: FakeDiscordAPI | None = None
    size: int = 3
    lease_ttl: float = 2.0
    telegram_mode: Literal["polling", "webhook"] = "polling"
    jobs: list[Job] = field(default_factory=list)
    proxied: bool = False
    telegram_poll_timeout: int | None = None
    max_concurrent_runs: int = 8
    """``agent.max_concurrent_runs`` of every node (8: botd's default)."""
    channel_options: tuple[str, ...] = ()
    """Lines added to every channel's section (``delivery: edit``)."""
    agent_options: tuple[str, ...] = ()
    """Lines added to the ``agent:`` section (``tools: [schedule]``)."""
    nodes: list[Node] = field(init=False, default_factory=list)
    proxy: RoundRobinProxy | None = field(init=False, default=None)
    silent_proxies: dict[tuple[str, str], SilentProxy] = field(init=False, default_factory=dict)
    """(node, "database" | "telegram") -> the proxy that node reaches it through."""

    async def __aenter__(self) -> Self:
        for number in range(1, self.size + 1):
            name = f"n{number}"
            node = Node(name, self.root / name, free_port())
            node.root.mkdir(parents=True, exist_ok=True)
            self.nodes.append(node)
        if self.telegram is not None and self.telegram_mode == "webhook":
            upstreams = [f"http://127.0.0.1:{node.listen_port}" for node in self.nodes]
            self.proxy = await RoundRobinProxy(upstreams).__aenter__()
            self.telegram.webhook_forward = self.proxy.url + HOOK_PATH
            # A paused node holds a POST until the proxy gives up; Telegram tries again.
            self.telegram.webhook_timeout = self.proxy.timeout * 2
        if self.proxied:
            for node in self.nodes:
                ends = [("database", SilentProxy.to_database(self.dsn))]
                if self.telegram is not None:
                    ends.append(("telegram", SilentProxy("127.0.0.1", self.telegram.port)))
                for end, proxy in ends:
                    self.silent_proxies[(node.name, end)] = await proxy.__aenter__()
        for node in self.nodes:
            node.config.write_text(self.config_text(node), encoding="utf-8")
        return self

    def database_proxy(self, node: Node) -> SilentProxy:
        return self.silent_proxies[(node.name, "database")]

    def telegram_proxy(self, node: Node) -> SilentProxy:
        return self.silent_proxies[(node.name, "telegram")]

    async def __aexit__(self, *exc: object) -> None:
        try:
            for node in self.nodes:
                if node.process is not None:
                    if node.paused:
                        node.process.send_signal(signal.SIGCONT)
                    await reap(node.process)
        finally:
            if self.proxy is not None:
                await self.proxy.__aexit__(None, None, None)
            for silent in self.silent_proxies.values():
                await silent.__aexit__(None, None, None)

    # --- configuration -------------------------------------------------------------------

    def config_text(self, node: Node) -> str:
        """``botd.yaml`` of ``node``: its state dir, the shared database, the fakes."""
        channels = []
        options = [f"    {option}" for option in self.channel_options]
        if self.telegram is not None:
            url = self.telegram.node_url(node.name)
            if self.proxied:
                port = self.telegram_proxy(node).port
                url = url.replace(f":{self.telegram.port}/", f":{port}/", 1)
            telegram = [
                "  telegram:",
                "    token: ${TELEGRAM_TEST_TOKEN}",
                f"    api_base_url: {json.dumps(url)}",
                "    dm_policy: open",
            ]
            if self.telegram_poll_timeout is not None:
                telegram.append(f"    poll_timeout: {self.telegram_poll_timeout}")
            if self.telegram_mode == "webhook":
                telegram += [
                    "    mode: webhook",
                    f"    webhook_url: {HOOK_URL}",
                    "    webhook_secret: ${TELEGRAM_HOOK_SECRET}",
                    f"    listen: {{host: 127.0.0.1, port: {node.listen_port}, path: {HOOK_PATH}}}",
                ]
            channels += telegram + options
        if self.slack is not None:
            channels += [
                "  slack:",
                "    bot_token: xoxb-test",
                "    app_token: xapp-test",
                f"    api_base_url: {json.dumps(self.slack.node_url(node.name))}",
                "    dm_policy: open",
                *options,
            ]
        if self.discord is not None:
            channels += [
                "  discord:",
                "    token: discord-test-token",
                f"    api_base_url: {json.dumps(self.discord.node_url(node.name))}",
                f"    gateway_url: {json.dumps(self.discord.gateway_url)}",
                "    guild_ready_timeout: 0.05",
                "    dm_policy: open",
                "    command_menu: false",
                *options,
            ]
        jobs = []
        if self.jobs:
            jobs.append("scheduler:\n  jobs:")
            for job in self.jobs:
                jobs += [
                    f"    - id: {job.id}",
                    f"      every: {job.every}",
                    f"      prompt: {json.dumps(job.prompt)}",
                    f"      deliver_to: {{channel: {job.channel}, chat: {json.dumps(job.chat)}}}",
                ]
        state = node.root / "state"
        return (
            f"""
state_dir: {json.dumps(str(state))}
health: {{enabled: false}}
shutdown_grace: 1
store:
  backend: postgres
  dsn: ${{BOTD_DATABASE_URL}}
  node_id: {node.name}
  lease_ttl: {self.lease_ttl}
model:
  provider: anthropic
  name: claude-test
  api_key: ${{ANTHROPIC_TEST_KEY}}
  base_url: {json.dumps(self.model.node_url(node.name))}
  max_retry_wait: 1
agent:
  block_streaming: {{min_chars: 10, max_chars: 200}}
  max_concurrent_runs: {self.max_concurrent_runs}
"""
            + "".join(f"  {line}\n" for line in self.agent_options)
            + "channels:\n"
            + "\n".join(channels)
            + "\n"
            + "\n".join(jobs)
            + "\n"
        )

    # --- processes -----------------------------------------------------------------------

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    async def start(self, node: Node) -> None:
        """Start ``node`` (again, after a kill: same state dir, same node id)."""
        assert not node.running, f"{node.name} is running"
        node.process = await start_daemon(
            node.config,
            node.root,
            log_path=node.log,
            BOTD_DATABASE_URL=_named(
                self.database_proxy(node).dsn(self.dsn) if self.proxied else self.dsn, node.name
            ),
            ANTHROPIC_TEST_KEY=MODEL_KEY,
            TELEGRAM_TEST_TOKEN=TOKEN,
            TELEGRAM_HOOK_SECRET=HOOK_SECRET,
        )
        node.paused = False
        node.starts += 1

    async def start_all(self) -> None:
        for node in self.nodes:
            await self.start(node)

    async def ready(self, channel: str, *nodes: Node) -> None:
        """Wait until ``channel`` runs on each of ``nodes`` (default: every node), as its log
        says."""
        for node in nodes or tuple(self.nodes):
            await until(
                file_contains(node.log, f"channel {channel} running"),
                f"{channel} running on {node.name}",
            )

    async def kill(self, node: Node) -> None:
        """SIGKILL: no shutdown code runs; returns once the process is gone."""
        assert node.process is not None
        node.process.kill()
        await ended(node.process)
        node.paused = False

    def pause(self, node: Node) -> None:
        """SIGSTOP: the process keeps its sockets and its leases' rows, and does nothing."""
        assert node.running
        assert node.process is not None
        node.process.send_signal(signal.SIGSTOP)
        node.paused = True

    def resume(self, node: Node) -> None:
        """SIGCONT after ``pause``."""
        assert node.process is not None
        node.process.send_signal(signal.SIGCONT)
        node.paused = False

    async def stop_all(self) -> dict[str, int]:
        """SIGTERM every node still running (continued first, if paused); exit statuses."""
        statuses: dict[str, int] = {}
        for node in self.nodes:
            if node.process is not None and node.paused:
                self.resume(node)
        for node in self.nodes:
            if node.process is not None and node.process.returncode is None:
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes:  # one SIGTERM each: a second one after botd's own shutdown
            if node.process is not None:  # removed its handler would kill it (status -15)
                statuses[node.name] = await ended(node.process)
        return statuses

    def logs(self) -> str:
        """The tail of every node's log, for a failure's message."""
        parts = []
        for node in self.nodes:
            text = node.log.read_text(errors="replace") if node.log.exists() else ""
            parts.append(f"--- {node.name} ---\n" + "\n".join(text.splitlines()[-30:]))
        return "\n".join(parts)

    # --- the database, read as an operator would -----------------------------------------

    async def query(self, sql: str, *params: object) -> list[tuple[object, ...]]:
        """Rows of ``sql`` on the shared database ([] while the schema is not there yet)."""
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            try:
                cursor = await conn.execute(sql, params)
            except psycopg.errors.UndefinedTable:
                return []
            return list(await cursor.fetchall())

    async def execute(self, sql: str) -> None:
        """Run the statements ``sql`` on the shared database (a fault the test makes there,
        as an operator's hand would)."""
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            await conn.execute(sql.encode())

    async def holders(self, prefix: str) -> dict[str, str]:
        """The leases named ``prefix...`` that are held now (unexpired): name -> node id."""
        rows = await self.query(
            "SELECT name, holder FROM leases WHERE name LIKE %s AND expires_at > now()",
            prefix.replace("%", r"\%") + "%",
        )
        return {str(name): str(holder) for name, holder in rows}

    async def lease_holder(self, prefix: str, *, not_on: tuple[Node, ...] = ()) -> Node:
        """The node holding a lease named ``prefix...`` (waiting until one, not among
        ``not_on``, holds one)."""
        excluded = {node.name for node in not_on}

        async def held() -> str:
            found = [h for h in (await self.holders(prefix)).values() if h not in excluded]
            return found[0] if found else ""

        return self.node(await until(held, f"a node holding {prefix}*"))


def _named(dsn: str, name: str) -> str:
    """``dsn`` with ``application_name`` set to the node's name: each node's sessions are
    told apart in ``pg_stat_activity`` (and the server's log)."""
    return make_conninfo(dsn, application_name=name)
