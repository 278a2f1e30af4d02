"""The Discord platform's spec: its section (``channels.discord``, or a section of another name
with ``platform: discord``), its adapter factory, how its conversation keys and targets are
spelled (``targets``), the doctor's probe (``probe``). Its chat ids tell nothing of the chat's
kind (every chat's kind is ``unknown``).

Imports no SDK: the factory imports the adapter (and discord.py) when it is called, and the
spec names the extra that installs it (``pip install 'botd[discord]'``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pydantic import Field

from ...config.schema import CatchUp, CatchUpSection, ChatChannelSection
from ...config.secrets import Secret
from ..base import ChannelAdapter, LinkPreviews
from ..registry import ChannelContext, ChannelSpec, InitQuestions, SecretQuestion
from . import targets

if TYPE_CHECKING:
    import httpx

    from ...ops.doctor.checks import Check

__all__ = ["SPEC", "DiscordSection"]

_CUSTOM_EMOJI = re.compile(r"<?a?:?[A-Za-z0-9_]{2,32}:[0-9]{15,21}>?")
"""A server's own emoji: ``name:id`` (or ``<:name:id>`` as a message writes it)."""


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
    guild_ready_timeout: float = Field(default=2.0, gt=0, le=60)
    """Seconds discord.py waits, at each connect, after the last server's data arrived
    before it counts the connection ready (it cannot know the last one came). A bot in a
    handful of servers starts faster with a lower value; raise it on a slow link with many
    servers."""
    shard_count: int = Field(default=1, ge=1)
    """Gateway shards (Discord requires more than one past 2,500 servers). On several nodes
    each shard runs on one node at a time, held by a lease; more shards spread the gateway
    load over the nodes."""
    catch_up: CatchUp = CatchUpSection()
    """Read what was missed while botd was down (``botd.channels.catch_up``)."""

    @classmethod
    def reaction_refusal(cls, emoji: str) -> str | None:
        text = emoji.strip()
        if _CUSTOM_EMOJI.fullmatch(text) or not (text.isascii() or " " in text):
            return None
        return (
            f"Discord reacts with the emoji itself (like 👀) or a server emoji as name:id, "
            f"not {emoji!r}"
        )


def _adapter(section: DiscordSection, context: ChannelContext) -> ChannelAdapter:
    from ..catch_up import CatchUpSettings
    from .adapter import DiscordAdapter

    channel = context.instance_name(SPEC.name)
    return DiscordAdapter(
        section.token,
        channel=channel,
        api_base_url=section.api_base_url,
        gateway_url=section.gateway_url,
        allow_bots=section.allow_bots,
        account_id=section.account,
        on_down=context.down_reporter(channel),
        link=context.link(channel),
        auto_thread=section.auto_thread,
        admits=context.admits,
        command_menu=section.command_menu,
        pair_in_menu=bool(section.owners or section.admins_are_owners)
        and section.dm_policy == "pairing",
        shard_count=section.shard_count,
        guild_ready_timeout=section.guild_ready_timeout,
        leases=context.leases,
        catch_up=CatchUpSettings.of(section.catch_up),
        marks=context.marks,
        link_previews=LinkPreviews(section.link_previews, section.group_link_previews()),
        proxy=section.proxy,
    )


async def _probe(client: httpx.AsyncClient, section: DiscordSection) -> list[Check]:
    from .probe import probe

    return await probe(client, section)


SPEC = ChannelSpec(
    name="discord",
    section=DiscordSection,
    factory=_adapter,
    requirement="botd[discord]",
    modules=("discord",),
    conversation_key=targets.discord_conversation_key,
    targets=targets.TARGET_FORM,
    probe=_probe,
    init=InitQuestions(
        secrets=(
            SecretQuestion("token", "DISCORD_TOKEN", "the bot token from the developer portal"),
        ),
        rank=2,
    ),
)
