"""``botd run``: every configured channel, the sessions and the scheduler in one process.

Start order: logging, store, provider, adapters' delivery side, sessions, router, scheduler,
then the adapters' inbound side, the health endpoint, and READY=1 to systemd. SIGTERM or
SIGINT (or the console's end of input) shuts down in bounded order: stop taking input, let
running turns finish within the grace period and cancel the rest, flush deliveries, close
the adapters, the scheduler and the store, STOPPING=1, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

from .agent.message_tool import MessageTool
from .agent.providers import create_provider
from .agent.schedule_tool import ScheduleTool
from .agent.tools import Tool
from .agent.types import Provider
from .channels.base import ChannelAdapter, InboundMessage, MessageRef, Target
from .config import BotdConfig
from .delivery import ChannelDelivery
from .ops import HealthServer, Metrics, SystemdNotifier, configure_logging
from .router import PairingBook, Router
from .scheduler import Scheduler
from .sessions import SessionManager
from .store import Store

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 10.0


def build_provider(config: BotdConfig) -> Provider:
    return create_provider(config.model.provider, **config.provider_settings())


def build_adapters(
    config: BotdConfig, store: Store, console_done: asyncio.Event
) -> dict[str, ChannelAdapter]:
    """One adapter per configured channel; their SDKs are imported only when used."""
    channels = config.channels
    adapters: dict[str, ChannelAdapter] = {}
    if channels.telegram is not None:
        from .channels.telegram import TelegramAdapter

        tg = channels.telegram
        adapters["telegram"] = TelegramAdapter(tg.token, store=store, api_base_url=tg.api_base_url)
    if channels.slack is not None:
        from .channels.slack import SlackAdapter

        sl = channels.slack
        adapters["slack"] = SlackAdapter(
            bot_token=sl.bot_token,
            app_token=sl.app_token,
            signing_secret=sl.signing_secret,
            mode=sl.mode,
            api_base_url=sl.api_base_url,
            store=store,
            reply_to_mode=sl.reply_to_mode,
        )
    if channels.discord is not None:
        from .channels.discord import DiscordAdapter

        dc = channels.discord
        adapters["discord"] = DiscordAdapter(
            dc.token,
            store=store,
            api_base_url=dc.api_base_url,
            gateway_url=dc.gateway_url,
            allow_bots=dc.allow_bots,
        )
    if channels.console is not None and channels.console.enabled:
        from .channels.console import ConsoleAdapter

        async def end_of_input() -> None:
            console_done.set()

        adapters["console"] = ConsoleAdapter(on_end_of_input=end_of_input)
    return adapters


class Daemon:
    """One running botd (see the module docstring)."""

    def __init__(self, config: BotdConfig, env: Mapping[str, str] | None = None) -> None:
        self.config = config
        self._env = dict(os.environ if env is None else env)
        self._stop = asyncio.Event()
        self._console_done = asyncio.Event()
        self.metrics = Metrics()
        self._states: dict[str, str] = {}

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> int:
        config = self.config
        configure_logging(config.logging.level, config.logging.format)
        state_dir = Path(config.state_dir)
        notifier = SystemdNotifier()
        store = Store.open(state_dir)
        provider = build_provider(config)
        adapters = build_adapters(config, store, self._console_done)
        delivery = ChannelDelivery(adapters, config.delivery_modes())
        sessions_holder: list[SessionManager] = []

        async def submit(message: InboundMessage) -> None:
            self.metrics.inc("messages_in", channel=message.channel)
            await sessions_holder[0].submit(message)

        scheduler = Scheduler(state_dir, submit, timezone=config.scheduler.timezone)
        allowed = set(adapters)

        async def send(target: Target, text: str) -> MessageRef:
            refs = await delivery.send_text(target, text)
            self.metrics.inc("messages_out", channel=target.channel)
            return refs[0] if refs else MessageRef(target, "")

        def tools(message: InboundMessage) -> Sequence[Tool]:
            send_tool = MessageTool(send, allow=lambda t: t.channel in allowed)
            return [send_tool, ScheduleTool(scheduler)]

        sessions = SessionManager(
            store, provider, delivery, config.session_settings(state_dir), tools=tools
        )
        sessions_holder.append(sessions)

        async def reply(target: Target, text: str) -> None:
            await delivery.send_text(target, text)

        router = Router(
            store,
            submit,
            reply,
            config.access_policies(),
            pairing=PairingBook(state_dir / "pairing.json"),
        )
        health: HealthServer | None = None
        watchdog: asyncio.Task[None] | None = None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, self.request_stop)
        try:
            scheduler.start()
            scheduler.sync_config_jobs(config.scheduler_jobs())
            for name, adapter in adapters.items():
                self._states[name] = "starting"
                await adapter.start(router.handle)  # type: ignore[arg-type]
                self._states[name] = "running"
                log.info("channel %s running", name)
            if config.health.enabled:
                health = HealthServer(
                    config.health.host,
                    config.health.port,
                    channel_states=lambda: dict(self._states),
                    metrics=self.metrics,
                )
                await health.start()
            notifier.ready(f"{len(adapters)} channel(s) running")
            watchdog = asyncio.create_task(notifier.run_watchdog(self._stop))
            await self._wait_for_stop(sessions)
        finally:
            notifier.stopping()
            await self._shutdown(adapters, sessions, scheduler, store, health, provider)
            if watchdog is not None:
                watchdog.cancel()
                await asyncio.gather(watchdog, return_exceptions=True)
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError):
                    loop.remove_signal_handler(sig)
        return 0

    async def _wait_for_stop(self, sessions: SessionManager) -> None:
        stop = asyncio.create_task(self._stop.wait())
        console = asyncio.create_task(self._console_done.wait())
        done, pending = await asyncio.wait({stop, console}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if console in done:
            # End of input on the console: answer what was typed, then stop.
            await sessions.drain()

    async def _shutdown(
        self,
        adapters: dict[str, ChannelAdapter],
        sessions: SessionManager,
        scheduler: Scheduler,
        store: Store,
        health: HealthServer | None,
        provider: Provider,
    ) -> None:
        log.info("shutting down")
        scheduler.shutdown()
        await sessions.close(grace=SHUTDOWN_GRACE_SECONDS)
        for name, adapter in adapters.items():
            try:
                await adapter.stop()
            except Exception:
                log.exception("stopping channel %s failed", name)
            self._states[name] = "stopped"
        if health is not None:
            await health.stop()
        await provider.aclose()
        store.close()
        log.info("stopped")
