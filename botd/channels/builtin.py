"""The built-in channels, described once: Telegram, Slack, Discord and the console.

Each has its config section model and a ``ChannelSpec`` registered under the entry-point
group ``botd.channels`` (see pyproject.toml), put together from its own package: what its ids
tell and how its targets are spelled (``<platform>/targets.py``), the doctor's probe of its
account (``<platform>/probe.py``). This module imports no
platform SDK: each factory imports its adapter module when it is called, and each spec names
the extra that installs the SDK (``pip install 'botd[telegram]'``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..chat import ChatKind
from ..config.schema import ChannelSection, ChatChannelSection, Section, off_on
from ..config.secrets import OptionalSecret, Secret
from .base import ChannelAdapter
from .discord import targets as discord_targets
from .registry import ChannelContext, ChannelSpec
from .slack import targets as slack_targets
from .telegram import targets as telegram_targets

if TYPE_CHECKING:
    import httpx

    from ..ops.doctor.checks import Check

__all__ = [
    "CONSOLE",
    "DISCORD",
    "SLACK",
    "TELEGRAM",
    "ConsoleSection",
    "DiscordSection",
    "SlackSection",
    "TelegramSection",
]


def _without_bot_suffix(url: str) -> str:
    """``url`` without trailing slashes and without one trailing ``/bot``."""
    return url.rstrip("/").removesuffix("/bot")


class TelegramListen(Section):
    """Where the webhook server listens (``mode: webhook``); a reverse proxy that ends TLS
    for ``webhook_url`` forwards to it."""

    host: str = "127.0.0.1"
    port: int = Field(default=8443, ge=0, le=65535)
    path: str = Field(default="/telegram", pattern=r"^/")


class TelegramSection(ChatChannelSection):
    platform_text_limit = 4096  # the adapter's Capabilities.text_limit
    token: Secret
    api_base_url: Annotated[str, AfterValidator(_without_bot_suffix)] = "https://api.telegram.org"
    """The Bot API's root; python-telegram-bot's own form (a trailing ``/bot``) is accepted
    and the suffix dropped, since botd adds ``/bot<token>`` itself."""
    poll_timeout: int = Field(default=30, ge=0)
    command_menu: bool = True
    """At start, make the bot's command menu (what a user sees on typing ``/``) list botd's
    chat commands; false leaves the menu as set with @BotFather."""
    mode: Literal["polling", "webhook"] = "polling"
    """``polling`` (getUpdates) or ``webhook`` (Telegram POSTs to ``webhook_url``)."""
    webhook_url: str | None = Field(default=None, validate_default=True)
    """The public HTTPS URL registered with ``setWebhook`` (``mode: webhook``)."""
    webhook_secret: OptionalSecret = Field(default=None, validate_default=True)
    """Sent as ``secret_token`` to ``setWebhook``; a request without it is refused (403).
    1 to 256 of ``A-Z a-z 0-9 _ -`` (Telegram's rule)."""
    listen: TelegramListen = TelegramListen()

    @field_validator("webhook_url", "webhook_secret")
    @classmethod
    def _webhook_needs(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("mode") == "webhook" and not value:
            raise ValueError(f"mode webhook needs {info.field_name}")
        if info.field_name == "webhook_url" and value and not value.startswith("https://"):
            raise ValueError("Telegram sends updates only to an https:// URL")
        secret = info.field_name == "webhook_secret" and value is not None
        if secret and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", str(value)):
            raise ValueError("Telegram takes 1 to 256 of A-Z, a-z, 0-9, _ and - here")
        return value


class SlackSection(ChatChannelSection):
    platform_text_limit = 4000
    bot_token: Secret
    app_token: OptionalSecret = None
    signing_secret: OptionalSecret = None
    mode: Literal["socket", "http"] = "socket"
    api_base_url: str = "https://slack.com/api/"
    reply_to_mode: Annotated[Literal["off", "first", "all"], BeforeValidator(off_on)] = "off"
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=3000, ge=1, le=65535)
    http_path: str = "/slack/events"
    allow_mass_mentions: bool = False
    """Post ``<!channel>``, ``<!here>``, ``<!everyone>`` and user-group mentions as Slack
    mentions (default: as plain text that notifies nobody)."""
    thread_context: int = Field(default=20, ge=0)
    """On the first mention inside a thread, how many of its earlier messages the model is
    given (``conversations.replies``); 0: none."""

    @model_validator(mode="after")
    def _mode_needs(self) -> SlackSection:
        if self.mode == "socket" and not self.app_token:
            raise ValueError("Socket Mode needs app_token (the xapp-... app-level token)")
        if self.mode == "http" and not self.signing_secret:
            raise ValueError("mode http needs signing_secret")
        return self


class DiscordSection(ChatChannelSection):
    platform_text_limit = 2000
    token: Secret
    api_base_url: str | None = None
    gateway_url: str | None = None
    allow_bots: bool = False
    auto_thread: bool = False
    """Answer a mention in a server's text channel in a new thread started on it (one
    conversation per thread; the thread's later messages need no mention)."""
    command_menu: bool = True
    """At start, register botd's chat commands as the application's slash commands (the
    list a user sees on typing ``/``); false leaves the registered ones as they are."""


class ConsoleSection(ChannelSection):
    enabled: bool = False


def _telegram(section: TelegramSection, context: ChannelContext) -> ChannelAdapter:
    from .telegram.adapter import TelegramAdapter

    return TelegramAdapter(
        section.token,
        offsets=context.offsets,
        api_base_url=section.api_base_url,
        poll_timeout=section.poll_timeout,
        account_id=section.account,
        command_menu=section.command_menu,
        on_down=context.down_reporter("telegram"),
        link=context.link("telegram"),
        mode=section.mode,
        webhook_url=section.webhook_url,
        webhook_secret=section.webhook_secret,
        listen=(section.listen.host, section.listen.port, section.listen.path),
    )


def _slack(section: SlackSection, context: ChannelContext) -> ChannelAdapter:
    from .slack.adapter import SlackAdapter

    return SlackAdapter(
        bot_token=section.bot_token,
        app_token=section.app_token,
        signing_secret=section.signing_secret,
        mode=section.mode,
        api_base_url=section.api_base_url,
        reply_to_mode=section.reply_to_mode,
        account_id=section.account,
        http_host=section.http_host,
        http_port=section.http_port,
        http_path=section.http_path,
        allow_mass_mentions=section.allow_mass_mentions,
        thread_context=section.thread_context,
        known_conversation=context.has_conversation,
        admits=context.admits,
        link=context.link("slack"),
    )


def _discord(section: DiscordSection, context: ChannelContext) -> ChannelAdapter:
    from .discord.adapter import DiscordAdapter

    return DiscordAdapter(
        section.token,
        api_base_url=section.api_base_url,
        gateway_url=section.gateway_url,
        allow_bots=section.allow_bots,
        account_id=section.account,
        on_down=context.down_reporter("discord"),
        link=context.link("discord"),
        auto_thread=section.auto_thread,
        admits=context.admits,
        command_menu=section.command_menu,
    )


async def _probe_telegram(client: httpx.AsyncClient, section: TelegramSection) -> list[Check]:
    from .telegram.probe import probe

    return await probe(client, section)


async def _probe_slack(client: httpx.AsyncClient, section: SlackSection) -> list[Check]:
    from .slack.probe import probe

    return await probe(client, section)


async def _probe_discord(client: httpx.AsyncClient, section: DiscordSection) -> list[Check]:
    from .discord.probe import probe

    return await probe(client, section)


async def _probe_console(client: httpx.AsyncClient, section: ConsoleSection) -> list[Check]:
    """Nothing to reach: the console is the terminal botd runs in."""
    return []


def _console(section: ConsoleSection, context: ChannelContext) -> ChannelAdapter:
    from .console.adapter import ConsoleAdapter

    return ConsoleAdapter(on_end_of_input=context.on_end_of_input, model=context.model)


TELEGRAM = ChannelSpec(
    name="telegram",
    section=TelegramSection,
    factory=_telegram,
    requirement="botd[telegram]",
    modules=("telegram", "aiohttp"),
    chat_kind=telegram_targets.chat_kind,
    targets=telegram_targets.TARGET_FORM,
    probe=_probe_telegram,
)
SLACK = ChannelSpec(
    name="slack",
    section=SlackSection,
    factory=_slack,
    requirement="botd[slack]",
    modules=("slack_bolt", "slack_sdk"),
    chat_kind=slack_targets.chat_kind,
    targets=slack_targets.TARGET_FORM,
    probe=_probe_slack,
)
DISCORD = ChannelSpec(
    name="discord",
    section=DiscordSection,
    factory=_discord,
    requirement="botd[discord]",
    modules=("discord",),
    targets=discord_targets.TARGET_FORM,
    probe=_probe_discord,
)


def _console_chat(chat_id: str) -> tuple[ChatKind, str | None]:
    """The console is its operator's direct chat."""
    return "direct", chat_id


CONSOLE = ChannelSpec(
    name="console",
    section=ConsoleSection,
    factory=_console,
    chat_kind=_console_chat,
    probe=_probe_console,
    local=True,
)
