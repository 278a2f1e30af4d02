"""The Telegram channel's spec: its ``channels.telegram`` section, its adapter factory, what
its ids tell and how its targets are spelled (``targets``), the doctor's probe (``probe``).

Imports no SDK: the factory imports the adapter (and python-telegram-bot) when it is called,
and the spec names the extra that installs it (``pip install 'botd[telegram]'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator, Field

from ...config.schema import ChatChannelSection
from ...config.secrets import Secret
from ..base import ChannelAdapter
from ..registry import ChannelContext, ChannelSpec, InitQuestions, SecretQuestion
from . import targets

if TYPE_CHECKING:
    import httpx

    from ...ops.doctor.checks import Check

__all__ = ["SPEC", "TelegramSection"]


def _without_bot_suffix(url: str) -> str:
    """``url`` without trailing slashes and without one trailing ``/bot``."""
    return url.rstrip("/").removesuffix("/bot")


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


def _adapter(section: TelegramSection, context: ChannelContext) -> ChannelAdapter:
    from .adapter import TelegramAdapter

    return TelegramAdapter(
        section.token,
        offsets=context.offsets,
        api_base_url=section.api_base_url,
        poll_timeout=section.poll_timeout,
        account_id=section.account,
        command_menu=section.command_menu,
        on_down=context.down_reporter("telegram"),
        link=context.link("telegram"),
    )


async def _probe(client: httpx.AsyncClient, section: TelegramSection) -> list[Check]:
    from .probe import probe

    return await probe(client, section)


SPEC = ChannelSpec(
    name="telegram",
    section=TelegramSection,
    factory=_adapter,
    requirement="botd[telegram]",
    modules=("telegram",),
    chat_kind=targets.chat_kind,
    targets=targets.TARGET_FORM,
    probe=_probe,
    init=InitQuestions(
        secrets=(SecretQuestion("token", "TELEGRAM_TOKEN", "the token @BotFather gave"),), rank=0
    ),
)
