"""The Telegram platform's spec: its section (``channels.telegram``, or a section of another
name with ``platform: telegram``), its adapter factory, what its ids tell and how its
conversation keys and targets are spelled (``targets``), the doctor's probe (``probe``).

Imports no SDK: the factory imports the adapter (and python-telegram-bot) when it is called,
and the spec names the extra that installs it (``pip install 'botd[telegram]'``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from ...config.schema import ChatChannelSection, Section
from ...config.secrets import OptionalSecret, Secret
from ..base import ChannelAdapter, LinkPreviews
from ..registry import ChannelContext, ChannelSpec, InitQuestions, SecretQuestion
from . import targets
from .reactions import REACTION_EMOJI, telegram_reaction

if TYPE_CHECKING:
    import httpx

    from ...ops.doctor.checks import Check

__all__ = ["SPEC", "TelegramSection"]


def _without_bot_suffix(url: str) -> str:
    """``url`` without trailing slashes and without one trailing ``/bot``."""
    return url.rstrip("/").removesuffix("/bot")


class TelegramListen(Section):
    """Where the webhook is served (``mode: webhook``); a reverse proxy that ends TLS for
    ``webhook_url`` forwards to it. The same host and port as ``health`` share one server."""

    host: str = "127.0.0.1"
    port: int = Field(default=8443, ge=0, le=65535)
    path: str = Field(default="/telegram", pattern=r"^/")


class TelegramSection(ChatChannelSection):
    platform_text_limit = 4096  # the adapter's Capabilities.text_limit
    # Bots react only with Telegram's fixed list, which has neither ✅ nor ❌.
    default_reactions = ("👀", "👍", "👎")
    forum_topics = True  # groups.<id>.topics.<thread id>

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

    @classmethod
    def reaction_refusal(cls, emoji: str) -> str | None:
        if telegram_reaction(emoji) is not None:
            return None
        return (
            f"{emoji!r} is not one of the reactions a Telegram bot may set; take one of "
            + " ".join(REACTION_EMOJI)
        )


def _adapter(section: TelegramSection, context: ChannelContext) -> ChannelAdapter:
    from .adapter import TelegramAdapter

    channel = context.instance_name(SPEC.name)
    return TelegramAdapter(
        section.token,
        channel=channel,
        offsets=context.offsets,
        api_base_url=section.api_base_url,
        poll_timeout=section.poll_timeout,
        account_id=section.account,
        command_menu=section.command_menu,
        pair_in_menu=bool(section.owners or section.admins_are_owners)
        and section.dm_policy == "pairing",
        on_down=context.down_reporter(channel),
        link=context.link(channel),
        leases=context.leases,
        mode=section.mode,
        webhook_url=section.webhook_url,
        webhook_secret=section.webhook_secret,
        listen=(section.listen.host, section.listen.port, section.listen.path),
        http=context.http,
        shared_rate=context.shared_rate,
        held_back=context.held_back,
        link_previews=LinkPreviews(section.link_previews, section.group_link_previews()),
        proxy=section.proxy,
    )


async def _probe(client: httpx.AsyncClient, section: TelegramSection) -> list[Check]:
    from .probe import probe

    return await probe(client, section)


SPEC = ChannelSpec(
    name="telegram",
    section=TelegramSection,
    factory=_adapter,
    requirement="botd[telegram]",
    modules=("telegram", "aiohttp"),
    chat_kind=targets.chat_kind,
    conversation_key=targets.telegram_conversation_key,
    targets=targets.TARGET_FORM,
    probe=_probe,
    init=InitQuestions(
        secrets=(SecretQuestion("token", "TELEGRAM_TOKEN", "the token @BotFather gave"),), rank=0
    ),
)
