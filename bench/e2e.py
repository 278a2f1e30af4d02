"""The whole daemon per message: ``botd run`` with the real SDKs over the loopback fakes.

botd runs as a subprocess (``botd run --config``, python-telegram-bot and the anthropic SDK
inside it) against ``FakeTelegramAPI`` and ``FakeAnthropicAPI``, which run here, in the bench
process: botd's figures are read from its own ``/proc`` entry, so the fakes' CPU is not in
them. botd is configured as an operator would: ``dm_policy: open``, the default delivery,
status reactions off (``reactions: false``: the floor sets none, and each reaction is one more
Bot API call, two per message, through the SDK's 30-calls/s limiter, so with them on the
comparison would weigh a feature's platform calls rather than botd's own cost), one
conversation per chat with ``queue_mode: followup`` (each message its own run and its
own answer), state in a temp dir. The fake model answers each request with a short streamed
text naming the message it answers.

Loads:

* light: 10 chats x 20 messages, each chat writing its next message about half a second
  (``--think``) after its previous one was answered: about 19 messages/s, under Telegram's
  limit, so latency is the time botd takes, not queueing;
* saturating: 200 chats x 5 messages, all available at once;
* conversations: a fresh daemon, RSS idle after start, then 5,000 distinct chats one message
  each (in waves of 200), then RSS again: KB per conversation.

The same loads also go, round by round, to a second ``botd run`` configured with
``delivery: stream`` (each answer drafted with ``sendMessageDraft`` in the private chat, then
posted): its CPU ms per message is printed beside the default delivery's (blocks).

Per load: messages/s, botd's CPU ms per answered message (utime+stime of the botd process
from ``/proc/<pid>/stat`` over the load window only, start-up excluded; the kernel's part
shown apart), p50/p95/p99 latency from an update being available at the fake to the first
``sendMessage`` answering it. Every message must be answered exactly once (counted per
message): a loss or a duplicate fails.

The floor (``bench/e2e_floor.py``, a subprocess) does per message only what the SDKs must
(its share of ``getUpdates`` long polls, one streamed request with the body botd sent for the
same message, one ``send_message``) at the same loads, with botd's run cap as its
concurrency, measured the same way. botd's Telegram bot sends through python-telegram-bot's
``AIORateLimiter`` (Telegram allows a bot about 30 messages a second; beyond that it answers
429), so under the saturating load botd answers 30 messages/s whatever its CPU. CPU per
message depends on the rate it is spent at: a process answering 400 messages/s shares each
long poll, wake-up and warm cache among many more messages than one answering 30. So the
floor compared runs under the same limiter, at the same rate as botd; the ratio printed is
botd's CPU per message over that floor's. A floor without a limiter (which only the fakes
allow) is printed for reference: at the light load, where the limit is not reached, the two
floors cost the same.

On a shared machine one window's CPU per message can be off by 20%, for botd and the floor
alike. So botd, the floor and the unthrottled floor run side by side (each with its own
Telegram fake, idle while another is measured), and the loads are run in ``--rounds``
rounds (3), each load going to botd and then, with the same messages and request bodies,
to the floor: figures are the medians of the rounds, the ratio the median of each round's
ratio, latencies pooled.

On PostgreSQL: the same light and saturating loads, round by round, to ``botd run`` on
``store.backend: postgres`` (a throwaway server started here, ``tests/support/pg_server.py``:
Debian's PostgreSQL with ``fsync=off``, so the figures are the CPU's, not a disk's), one node.
CPU per message counts every process doing the work: botd and the server (the postmaster and its
backends, from ``/proc``, backends that ended included), printed with the server's part apart
and beside SQLite's (where the database is inside botd); then the same with ``--nodes``
(3) nodes sharing the database, each ``botd run`` in Telegram's webhook mode behind a
round-robin proxy (their CPU summed; until conversations are owned across nodes each node
answers what it accepts, and each has its own 30-a-second send limiter). ``--no-postgres``
leaves both out, ``--nodes 1`` the second; a machine without PostgreSQL says so and goes on.

Run: make bench   (or .venv/bin/python bench/e2e.py [--profile FILE])
``--profile FILE`` records botd under the saturating load of the last round with py-spy
(``pip install py-spy`` into the venv; raw collapsed stacks in FILE, the floors' in
FILE.floor and, when that round is the first, FILE.floor-unlimited) and prints the functions
with the most self time, and botd's own functions with the most time including what they
call. The loads' sizes are options (``--help``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fakes.anthropic_api import FakeAnthropicAPI, Reply, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.health_probe import free_port
from tests.support.pg_server import PostgresServer, postgres_bin_dir, running_postgres

TOKEN = "123456:BENCH-TOKEN"
API_KEY = "sk-ant-bench"
RUN_CAP = 8  # botd's default max_concurrent_runs, the floor's concurrency
HANG_GUARD = 600.0
SETTLE = 0.5  # seconds after the last answer before CPU and duplicates are read
KEY = re.compile(r"\bm\d+-\d+\b")
TICK = os.sysconf("SC_CLK_TCK")
FLOOR = Path(__file__).resolve().parent / "e2e_floor.py"


def cpu_seconds(pid: int) -> tuple[float, float]:
    """utime and stime of ``pid`` (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def server_cpu_seconds(server: PostgresServer) -> float:
    """The CPU seconds (user and system) of ``server``: its postmaster, every live child, and
    the children that ended and were reaped (the postmaster's cutime and cstime)."""
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    fields = Path(f"/proc/{postmaster}/stat").read_text().rpartition(")")[2].split()
    total = sum(int(f) for f in fields[11:15]) / TICK
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            child = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue  # ended meanwhile: counted in cutime once reaped
        if int(child[1]) == postmaster:
            total += (int(child[11]) + int(child[12])) / TICK
    return total


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit(f"no VmRSS for {pid}")


def last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


class Model(FakeAnthropicAPI):
    """The fake model: answers ``Answer to <key>.`` to the message named in the last user
    turn, keeping the body of each request by that key while ``keep`` is set."""

    def __init__(self) -> None:
        super().__init__(api_key=API_KEY)
        self.responder = self.reply
        self.bodies: dict[str, dict[str, Any]] = {}
        self.keep = False

    def reply(self, body: dict[str, Any]) -> Reply:
        found = KEY.search(last_user_text(body))
        key = found.group(0) if found else "unknown"
        if self.keep:
            self.bodies[key] = body
        # The recorded requests and streams are not needed: keep the fake's memory flat.
        self.requests.clear()
        self.streams.clear()
        return stream(text("Answer to ", f"{key}."))


@dataclass
class Tracking:
    available: dict[str, float] = field(default_factory=dict)
    answers: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    waiters: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    strays: list[str] = field(default_factory=list)
    methods: collections.Counter[str] = field(default_factory=collections.Counter)


class Telegram(FakeTelegramAPI):
    """The Telegram fake, noting when each message became available and when (and how many
    times) it was answered, and when a long poll came in."""

    def __init__(self) -> None:
        super().__init__(TOKEN)
        self.track = Tracking()
        self.polling = asyncio.Event()

    def post(self, chat_id: int, key: str) -> asyncio.Future[None]:
        answered = asyncio.get_running_loop().create_future()
        self.track.waiters[key] = answered
        self.track.available[key] = time.perf_counter()
        self.push_text(chat_id, f"{key} please answer briefly")
        return answered

    async def _handle(self, request: Any) -> Any:
        self.track.methods[request.match_info["method"]] += 1
        return await super()._handle(request)

    async def _api_getUpdates(self, params: dict[str, Any]) -> Any:
        if float(params.get("timeout", 0) or 0) > 0:
            self.polling.set()
        return await super()._api_getUpdates(params)

    async def _api_sendMessage(self, params: dict[str, Any]) -> Any:
        at = time.perf_counter()
        result = await super()._api_sendMessage(params)
        found = KEY.search(str(params.get("text", "")))
        if found is None or found.group(0) not in self.track.available:
            self.track.strays.append(str(params.get("text", "")))
            return result
        key = found.group(0)
        self.track.answers[key].append(at)
        waiter = self.track.waiters.pop(key, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        self.calls.clear()  # the call log is not needed: keep memory flat
        return result


@dataclass
class Figures:
    label: str
    messages: int
    rate: float
    cpu_ms: float
    sys_ms: float  # the part of cpu_ms spent in the kernel (system calls)
    latencies: list[float]
    methods: collections.Counter[str]
    db_ms: float = 0.0  # the part of cpu_ms spent by a database server (PostgreSQL)

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] * 1000

    def latency_line(self) -> str:
        return (
            f"p50/p95/p99 {self.percentile(0.5):.0f}/{self.percentile(0.95):.0f}/"
            f"{self.percentile(0.99):.0f} ms"
        )


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update({"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
    env.update({"BENCH_ANTHROPIC_KEY": API_KEY, "BENCH_TELEGRAM_TOKEN": TOKEN})
    return env


def write_config(
    tmp: Path, name: str, telegram: Telegram, model: Model, *, store: str = "", extra: str = ""
) -> Path:
    """A botd config for ``name`` (its own state dir); ``store``: a ``store:`` section;
    ``extra``: more keys of the Telegram section."""
    config = tmp / f"{name}.yaml"
    config.write_text(
        f"""
state_dir: {json.dumps(str(tmp / name))}
{store}model:
  provider: anthropic
  name: claude-bench
  api_key: ${{BENCH_ANTHROPIC_KEY}}
  base_url: {json.dumps(model.base_url)}
agent:
  queue_mode: followup
channels:
  telegram:
    token: ${{BENCH_TELEGRAM_TOKEN}}
    api_base_url: {json.dumps(telegram.base_url)}
    dm_policy: open
    reactions: false
{extra}""",
        encoding="utf-8",
    )
    return config


async def spawn(command: list[str], log: Path) -> asyncio.subprocess.Process:
    """Run ``command`` in ``log``'s directory, its output appended to ``log``."""
    with log.open("ab") as sink:
        return await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
            env=child_env(),
            cwd=log.parent,
        )


async def start(command: list[str], log: Path, telegram: Telegram) -> asyncio.subprocess.Process:
    """Start ``command`` and wait until its first long poll reached the fake."""
    telegram.polling.clear()
    process = await spawn(command, log)
    try:
        async with asyncio.timeout(60):
            await telegram.polling.wait()
    except TimeoutError:
        process.kill()
        raise SystemExit(f"{command[-1]} did not start polling; see {log}") from None
    await asyncio.sleep(SETTLE)
    return process


async def stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), 30)
    except TimeoutError:
        process.kill()
        await process.wait()


def check_once(label: str, track: Tracking) -> None:
    lost = [k for k in track.available if not track.answers.get(k)]
    twice = {k: len(v) for k, v in track.answers.items() if len(v) > 1}
    if lost or twice or track.strays:
        raise SystemExit(
            f"e2e {label}: not answered exactly once: {len(lost)} lost {lost[:5]}, "
            f"{len(twice)} answered more than once {list(twice.items())[:5]}, "
            f"{len(track.strays)} answers to no message {track.strays[:3]}"
        )


async def measure(
    label: str,
    nodes: Sequence[asyncio.subprocess.Process],
    telegram: Telegram,
    drive: Any,
    *,
    messages: int,
    database: Callable[[], float] | None = None,
) -> Figures:
    """Run ``drive()`` (which posts the messages and waits for their answers) as one load
    window of ``nodes`` (one botd, or several sharing a database: their CPU summed); check
    every message was answered exactly once. ``database``: the CPU seconds so far of a
    database server doing the work too (counted in CPU per message, and shown apart)."""
    telegram.track = Tracking()

    def cpu() -> tuple[float, float]:
        each = [cpu_seconds(node.pid) for node in nodes]
        return sum(u for u, _ in each), sum(k for _, k in each)

    db_before = database() if database else 0.0
    cpu_before = cpu()
    started = time.perf_counter()
    driving = asyncio.ensure_future(drive())
    exited = [asyncio.ensure_future(node.wait()) for node in nodes]
    await asyncio.wait({driving, *exited}, timeout=HANG_GUARD, return_when="FIRST_COMPLETED")
    for waiting in exited:
        waiting.cancel()
    if not driving.done():
        driving.cancel()
        for node in nodes:
            if node.returncode is not None:
                raise SystemExit(f"e2e {label}: a botd ended (status {node.returncode})")
        check_once(label, telegram.track)
        raise SystemExit(f"e2e {label}: no answers for {HANG_GUARD:.0f}s")
    driving.result()
    last = max(times[0] for times in telegram.track.answers.values())
    await asyncio.sleep(SETTLE)
    user_after, sys_after = cpu()
    db = (database() - db_before) if database else 0.0
    user, kernel = user_after - cpu_before[0], sys_after - cpu_before[1]
    track = telegram.track
    check_once(label, track)
    if len(track.available) != messages:
        raise SystemExit(f"e2e {label}: {len(track.available)} messages posted, not {messages}")
    latencies = [track.answers[k][0] - at for k, at in track.available.items()]
    rate = messages / (last - started)
    methods = collections.Counter(track.methods)  # as of now: later calls are not this load's
    per_message = 1000 / messages
    return Figures(
        label,
        messages,
        rate,
        (user + kernel + db) * per_message,
        kernel * per_message,
        latencies,
        methods,
        db * per_message,
    )


def light(telegram: Telegram, chats: int, each: int, think: float, first: int = 0) -> Any:
    """Each chat writes its next message ``think`` seconds (give or take a quarter, from a
    fixed seed) after its previous one was answered; the chats start spread over ``think``.
    Messages are numbered from ``first`` in each chat."""

    async def user(chat: int) -> None:
        pace = random.Random(chat * 1000 + first)
        await asyncio.sleep(think * (chat % chats) / chats)
        for n in range(first, first + each):
            if n > first:
                await asyncio.sleep(think * pace.uniform(0.75, 1.25))
            await telegram.post(chat, f"m{chat}-{n}")

    async def drive() -> None:
        await asyncio.gather(*(user(1000 + c) for c in range(chats)))

    return drive


def saturating(
    telegram: Telegram, chats: int, each: int, first: int = 0, first_chat: int = 2000
) -> Any:
    """``each`` messages (numbered from ``first``) in each of ``chats`` chats, all at once."""

    async def drive() -> None:
        waiting = [
            telegram.post(first_chat + c, f"m{first_chat + c}-{n}")
            for n in range(first, first + each)
            for c in range(chats)
        ]
        await asyncio.gather(*waiting)

    return drive


def waves(telegram: Telegram, conversations: int, wave: int) -> Any:
    async def drive() -> None:
        for start_at in range(0, conversations, wave):
            chats = range(100_000 + start_at, 100_000 + min(conversations, start_at + wave))
            await asyncio.gather(*(telegram.post(c, f"m{c}-0") for c in chats))

    return drive


async def profiled(pid: int, out: Path, window: Any) -> Any:
    """Run ``window()`` with py-spy recording ``pid`` (raw collapsed stacks into ``out``)."""
    recorder = Path(sys.executable).parent / "py-spy"
    if not recorder.exists():
        raise SystemExit(
            f"--profile needs py-spy: {Path(sys.executable)} -m pip install --group profile"
        )
    spy = await asyncio.create_subprocess_exec(
        str(recorder),
        "record",
        "--pid",
        str(pid),
        "--format",
        "raw",
        "--output",
        str(out),
        "--rate",
        "200",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    await asyncio.sleep(1.0)  # py-spy attaching
    try:
        return await window()
    finally:
        spy.send_signal(signal.SIGINT)
        await spy.wait()


# Leaf frames of a thread or an event loop waiting for work: not CPU, left out of the shares.
IDLE_LEAVES = ("EpollSelector.select (selectors.py)", "_worker (concurrent/futures/thread.py)")
LINE_NUMBER = re.compile(r":\d+\)$")


def top_frames(raw: Path, count: int = 15) -> tuple[list[str], list[str]]:
    """From py-spy's raw collapsed stacks, the ``count`` functions with the most self time
    (most often the leaf of a busy sample), and the ``count`` botd functions with the most
    time including what they call; shares of the busy samples."""
    leaves: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if not stack or not samples.isdigit():
            continue
        frames = [LINE_NUMBER.sub(")", frame) for frame in stack.split(";")]
        if frames[-1] in IDLE_LEAVES:
            continue
        leaves[frames[-1]] += int(samples)
        for frame in set(frames):
            if "botd/" in frame and "botd/cli/__init__.py" not in frame:
                inclusive[frame] += int(samples)
        total += int(samples)
    own = [f"{n / total:6.1%}  {frame}" for frame, n in leaves.most_common(count)]
    whole = [f"{n / total:6.1%}  {frame}" for frame, n in inclusive.most_common(count)]
    return own, whole


Load = tuple[str, int, Callable[[Telegram], Any]]
"""A load: its label, its number of messages, and its drive for a contender's Telegram fake."""


def loads(args: argparse.Namespace, round_: int) -> list[Load]:
    """The light and the saturating load of round ``round_`` (messages numbered on from the
    earlier rounds', so each round's are new to botd's conversations)."""
    light_first, heavy_first = round_ * args.light_each, round_ * args.each
    return [
        (
            f"light ({args.light_chats} chats)",
            args.light_chats * args.light_each,
            lambda t: light(t, args.light_chats, args.light_each, args.think, first=light_first),
        ),
        (
            f"saturating ({args.chats} chats x {args.each})",
            args.chats * args.each,
            lambda t: saturating(t, args.chats, args.each, first=heavy_first),
        ),
    ]


@dataclass
class Contender:
    """A process under measurement (botd, the floor, the unthrottled floor) and its own
    Telegram fake, with its figures per load, round by round."""

    name: str
    telegram: Telegram
    log: Path
    process: asyncio.subprocess.Process | None = None
    figures: dict[str, list[Figures]] = field(default_factory=lambda: collections.defaultdict(list))
    bodies_loads: int = 1  # a floor reads the bodies file once as it starts

    async def reload_bodies(self) -> None:
        """Have a floor read the bodies file again (SIGHUP), before its window, not in it."""
        assert self.process is not None
        self.bodies_loads += 1
        self.process.send_signal(signal.SIGHUP)
        loaded = f"bodies load {self.bodies_loads}:"
        async with asyncio.timeout(60):
            while loaded not in self.log.read_text():
                await asyncio.sleep(0.05)

    async def window(self, label: str, drive: Any, messages: int, profile: str | None) -> None:
        assert self.process is not None
        process = self.process

        async def measured() -> Figures:
            return await measure(label, [process], self.telegram, drive, messages=messages)

        if profile is None:
            self.figures[label].append(await measured())
        else:
            self.figures[label].append(await profiled(process.pid, Path(profile), measured))


def pooled(rounds: list[Figures]) -> Figures:
    """The rounds of one load as one: messages and latencies pooled, rate and CPU per
    message the rounds' medians."""
    methods: collections.Counter[str] = collections.Counter()
    for figures in rounds:
        methods.update(figures.methods)
    return Figures(
        rounds[0].label,
        sum(f.messages for f in rounds),
        statistics.median([f.rate for f in rounds]),
        statistics.median([f.cpu_ms for f in rounds]),
        statistics.median([f.sys_ms for f in rounds]),
        [latency for f in rounds for latency in f.latencies],
        methods,
        statistics.median([f.db_ms for f in rounds]),
    )


def report(botd_rounds: list[Figures], floor_rounds: list[Figures]) -> str:
    botd, floor = pooled(botd_rounds), pooled(floor_rounds)
    ratios = [b.cpu_ms / f.cpu_ms for b, f in zip(botd_rounds, floor_rounds, strict=True)]
    calls = ", ".join(
        f"{n / botd.messages:.2f} {method}"
        for method, n in sorted(botd.methods.items())
        if method != "getUpdates"
    )
    return (
        f"e2e {botd.label}: {botd.messages:,} messages in {len(ratios)} rounds, "
        f"{botd.rate:.1f} msg/s, botd {botd.cpu_ms:.1f} ms CPU/msg ({botd.sys_ms:.1f} in the "
        f"kernel), floor {floor.cpu_ms:.1f} ms CPU/msg ({floor.sys_ms:.1f} in the kernel) "
        f"({floor.rate:.1f} msg/s), ratio {statistics.median(ratios):.2f} (by round: "
        f"{' '.join(f'{r:.2f}' for r in ratios)}); latency {botd.latency_line()} "
        f"(floor {floor.latency_line()}); botd's Telegram calls per message: {calls}"
    )


async def on_postgres(
    args: argparse.Namespace, model: Model, tmp: Path, *, nodes: int = 1
) -> dict[str, list[Figures]] | str:
    """The light and the saturating load, round by round, to ``nodes`` ``botd run`` on one
    throwaway PostgreSQL (each node its own state dir and ``store.node_id``); the figures
    by load, or why they were not measured (no PostgreSQL here).

    One node polls Telegram. Several take Telegram's webhook (``mode: webhook``): the fake
    POSTs each update to a round-robin proxy (``RoundRobin``) in front of the nodes' listen
    ports, one POST at a time as Telegram does for a bot. Any node accepts what it is POSTed;
    each conversation is answered by the node holding its lease, so the runs spread over the
    nodes; each node's Telegram bot has its own rate limiter (30 sends a second), so several
    nodes send more than one bot may."""
    try:
        postgres_bin_dir()
    except RuntimeError as exc:
        return str(exc)
    figures: dict[str, list[Figures]] = collections.defaultdict(list)
    telegram = Telegram()
    proxy = RoundRobin()
    with running_postgres() as server:
        dsn = server.new_database()
        database = partial(server_cpu_seconds, server)
        async with telegram, proxy:
            running: list[asyncio.subprocess.Process] = []
            try:
                for n in range(1, nodes + 1):
                    name = f"postgres-{nodes}-{n}"
                    store = (
                        f"store:\n  backend: postgres\n  dsn: {json.dumps(dsn)}\n"
                        f"  node_id: bench-{n}\nhealth: {{port: {free_port()}}}\n"
                    )
                    webhook = ""
                    if nodes > 1:
                        port = free_port()
                        proxy.nodes.append(f"http://127.0.0.1:{port}/telegram")
                        webhook = WEBHOOK.format(port=port)
                        telegram.webhook_forward = proxy.url
                    config = write_config(tmp, name, telegram, model, store=store, extra=webhook)
                    command = [sys.executable, "-m", "botd", "run", "--config", str(config)]
                    log = tmp / f"{name}.log"
                    if nodes > 1:
                        running.append(await start_webhook(command, log, telegram, len(running)))
                    else:
                        running.append(await start(command, log, telegram))
                for round_ in range(args.rounds):
                    for label, messages, load in loads(args, round_):
                        figures[label].append(
                            await measure(
                                label,
                                running,
                                telegram,
                                load(telegram),
                                messages=messages,
                                database=database,
                            )
                        )
            finally:
                for node in running:
                    await stop(node)
    return figures


WEBHOOK = """    mode: webhook
    webhook_url: https://bench.invalid/telegram
    webhook_secret: bench-secret
    listen: {{host: 127.0.0.1, port: {port}, path: /telegram}}
"""
"""The Telegram section's webhook keys of a node listening on ``port``."""


class RoundRobin:
    """A reverse proxy in front of several nodes' webhooks: each POST to the next node in
    turn, its answer passed back (a node that refuses it makes Telegram POST it again)."""

    def __init__(self) -> None:
        self.nodes: list[str] = []
        self._next = 0
        self._runner: Any = None
        self.url = ""

    async def __aenter__(self) -> RoundRobin:
        from aiohttp import ClientSession, web

        self._http = ClientSession()

        async def forward(request: web.Request) -> web.Response:
            target = self.nodes[self._next % len(self.nodes)]
            self._next += 1
            headers = {
                k: v for k, v in request.headers.items() if k.lower().startswith("x-telegram")
            }
            body = await request.read()
            headers["Content-Type"] = "application/json"
            async with self._http.post(target, data=body, headers=headers) as answer:
                return web.Response(status=answer.status, body=await answer.read())

        app = web.Application()
        app.router.add_post("/telegram", forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/telegram"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.close()
        await self._runner.cleanup()


async def start_webhook(
    command: list[str], log: Path, telegram: Telegram, started: int
) -> asyncio.subprocess.Process:
    """Start a node in webhook mode; wait until it registered the webhook (its
    ``setWebhook``: the ``started + 1``-th)."""
    process = await spawn(command, log)
    try:
        async with asyncio.timeout(60):
            while telegram.track.methods["setWebhook"] <= started:
                await asyncio.sleep(0.05)
    except TimeoutError:
        process.kill()
        raise SystemExit(f"{command[-1]} did not set its webhook; see {log}") from None
    await asyncio.sleep(SETTLE)
    return process


def postgres_report(label: str, postgres: list[Figures], sqlite: list[Figures], nodes: int) -> str:
    pg, lite = pooled(postgres), pooled(sqlite)
    return (
        f"e2e on PostgreSQL ({nodes} node{'s' if nodes > 1 else ''}) {label}: "
        f"{pg.messages:,} messages, {pg.rate:.1f} msg/s, {pg.cpu_ms:.1f} ms CPU/msg (botd "
        f"{pg.cpu_ms - pg.db_ms:.1f} + postgres {pg.db_ms:.1f}), p99 to the first piece "
        f"{pg.percentile(0.99):.0f} ms; on SQLite: {lite.rate:.1f} msg/s, {lite.cpu_ms:.1f} ms "
        f"CPU/msg, p99 {lite.percentile(0.99):.0f} ms"
    )


async def main(args: argparse.Namespace) -> None:
    botd_cmd = [sys.executable, "-m", "botd", "run", "--config"]
    (light_label, _, _), (heavy_label, _, _) = loads(args, 0)
    tmp = Path(tempfile.mkdtemp(prefix="botd-e2e-"))
    model = Model()
    botd = Contender("botd", Telegram(), tmp / "loads.log")
    floor = Contender("floor", Telegram(), tmp / "floor.log")
    free = Contender("floor-unlimited", Telegram(), tmp / "floor-unlimited.log")
    streaming = Contender("botd delivery: stream", Telegram(), tmp / "stream.log")
    bodies = tmp / "bodies.json"
    bodies.write_text("{}")
    try:
        async with model, botd.telegram, floor.telegram, free.telegram, streaming.telegram:
            config = write_config(tmp, "loads", botd.telegram, model)
            botd.process = await start([*botd_cmd, str(config)], botd.log, botd.telegram)
            config = write_config(
                tmp,
                "stream",
                streaming.telegram,
                model,
                store=f"health: {{port: {free_port()}}}\n",  # beside the other botd's
                extra="    delivery: stream\n",
            )
            streaming.process = await start(
                [*botd_cmd, str(config)], streaming.log, streaming.telegram
            )
            for contender in (floor, free):
                command = [sys.executable, str(FLOOR), "--telegram", contender.telegram.base_url]
                command += ["--token", TOKEN, "--anthropic", model.base_url]
                command += ["--api-key", API_KEY, "--bodies", str(bodies)]
                command += ["--concurrency", str(RUN_CAP)]
                if contender is floor:
                    command.append("--rate-limiter")
                contender.process = await start(command, contender.log, contender.telegram)
            try:
                # Round by round, each load goes to botd (whose request bodies are kept), then
                # to the floor with the same messages and bodies; so a slow spell of the
                # machine meets both. The unthrottled floor runs in the first round only.
                for round_ in range(args.rounds):
                    floors = (floor, free) if round_ == 0 else (floor,)
                    for label, messages, load in loads(args, round_):
                        profile = None
                        if args.profile and label == heavy_label and round_ == args.rounds - 1:
                            profile = args.profile
                        model.keep = True
                        await botd.window(label, load(botd.telegram), messages, profile)
                        model.keep = False
                        # The same load shown as Telegram drafts, then the answer posted.
                        await streaming.window(label, load(streaming.telegram), messages, None)
                        bodies.write_text(json.dumps(model.bodies))
                        model.bodies.clear()
                        for other in floors:
                            await other.reload_bodies()
                            other_profile = profile and f"{profile}.{other.name}"
                            await other.window(label, load(other.telegram), messages, other_profile)
            finally:
                for contender in (botd, floor, free, streaming):
                    if contender.process is not None:
                        await stop(contender.process)

            # A fresh daemon: RSS idle, then after many conversations.
            telegram = botd.telegram
            config = write_config(tmp, "memory", telegram, model)
            daemon = await start([*botd_cmd, str(config)], tmp / "memory.log", telegram)
            try:
                idle = rss_kb(daemon.pid)
                many = await measure(
                    f"{args.conversations:,} conversations",
                    [daemon],
                    telegram,
                    waves(telegram, args.conversations, args.chats),
                    messages=args.conversations,
                )
                await asyncio.sleep(1.0)
                after = rss_kb(daemon.pid)
            finally:
                await stop(daemon)

            postgres = await on_postgres(args, model, tmp) if args.postgres else None
            cluster = None
            if args.postgres and args.nodes > 1 and not isinstance(postgres, str):
                cluster = await on_postgres(args, model, tmp, nodes=args.nodes)
    except BaseException:
        print(f"e2e: the logs (botd's and the floors') are kept in {tmp}", file=sys.stderr)
        raise
    shutil.rmtree(tmp)

    for label in (light_label, heavy_label):
        print(report(botd.figures[label], floor.figures[label]))
    for label in (light_label, heavy_label):
        unthrottled, botd_first = free.figures[label][0], botd.figures[label][0]
        print(
            f"e2e {label}, the floor without a rate limiter (for reference, first round): "
            f"{unthrottled.rate:.1f} msg/s, {unthrottled.cpu_ms:.1f} ms CPU/msg "
            f"(botd / this: {botd_first.cpu_ms / unthrottled.cpu_ms:.2f}); "
            f"latency {unthrottled.latency_line()}"
        )
    for label in (light_label, heavy_label):
        drafted, blocks = pooled(streaming.figures[label]), pooled(botd.figures[label])
        drafts = drafted.methods.get("sendMessageDraft", 0) / drafted.messages
        print(
            f"e2e {label} with delivery: stream (Telegram drafts): {drafted.rate:.1f} msg/s, "
            f"{drafted.cpu_ms:.1f} ms CPU/msg ({drafts:.2f} drafts/msg), p50 "
            f"{drafted.percentile(0.5):.0f} ms; with blocks: {blocks.cpu_ms:.1f} ms CPU/msg"
        )
    botd_light, floor_light = pooled(botd.figures[light_label]), pooled(floor.figures[light_label])
    print(
        f"e2e light p99: botd {botd_light.percentile(0.99):.1f} ms, "
        f"floor {floor_light.percentile(0.99):.1f} ms"
    )
    print(
        f"e2e memory: botd RSS {idle / 1024:.0f} MB idle after start, {after / 1024:.0f} MB "
        f"after {args.conversations:,} conversations "
        f"({(after - idle) / args.conversations:.1f} KB per conversation; "
        f"{many.rate:.1f} msg/s, {many.cpu_ms:.1f} ms CPU/msg)"
    )
    if isinstance(postgres, str):
        print(f"e2e on PostgreSQL: not measured: {postgres}")
    elif postgres is not None:
        for label in (light_label, heavy_label):
            print(postgres_report(label, postgres[label], botd.figures[label], nodes=1))
    if isinstance(cluster, dict):
        for label in (light_label, heavy_label):
            line = postgres_report(label, cluster[label], botd.figures[label], args.nodes)
            print(f"{line} (webhook mode, each conversation answered by the node owning it)")
    print("e2e: every message answered exactly once")
    if args.profile:
        own, whole = top_frames(Path(args.profile))
        print(f"botd under the saturating load (py-spy, {args.profile}), self time:")
        print("\n".join(f"  {line}" for line in own))
        print("botd's own functions, with what they call:")
        print("\n".join(f"  {line}" for line in whole))


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--light-chats", type=int, default=10)
    parser.add_argument("--light-each", type=int, default=20)
    parser.add_argument(
        "--think",
        type=float,
        default=0.5,
        help="seconds a light-load chat waits after an answer before its next message",
    )
    parser.add_argument("--chats", type=int, default=200)
    parser.add_argument("--each", type=int, default=5)
    parser.add_argument("--conversations", type=int, default=5000)
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of both loads, botd and the floor in turn; figures are the medians",
    )
    parser.add_argument("--profile", help="py-spy raw output file for the saturating load")
    parser.add_argument(
        "--no-postgres",
        dest="postgres",
        action="store_false",
        help="leave out the loads on PostgreSQL",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=3,
        help="nodes of the run on PostgreSQL in Telegram's webhook mode (1: none)",
    )
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
