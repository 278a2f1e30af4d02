"""The Slack platform's spec: its section (``channels.slack``, or a section of another name
with ``platform: slack``), its adapter factory, what its ids tell and how its conversation
keys and targets are spelled (``targets``), the doctor's probe (``probe``).

Imports no SDK: the factory imports the adapter (and slack-bolt) when it is called, and the
spec names the extra that installs it (``pip install 'botd[slack]'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from ...config.schema import CatchUp, CatchUpSection, ChatChannelSection, off_on
from ...config.secrets import OptionalSecret, Secret
from ..base import ChannelAdapter, LinkPreviews
from ..registry import ChannelContext, ChannelSpec, InitQuestions, SecretQuestion
from . import targets
from .emoji import EMOJI_NAMES, slack_emoji_name

if TYPE_CHECKING:
    import httpx

    from ...ops.doctor.checks import Check

__all__ = ["SPEC", "SlackSection"]


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
    catch_up: CatchUp = CatchUpSection()
    """Read what was missed while botd was down (``botd.channels.catch_up``)."""

    @model_validator(mode="after")
    def _mode_needs(self) -> SlackSection:
        if self.mode == "socket" and not self.app_token:
            raise ValueError("Socket Mode needs app_token (the xapp-... app-level token)")
        if self.mode == "http" and not self.signing_secret:
            raise ValueError("mode http needs signing_secret")
        return self

    @classmethod
    def reaction_refusal(cls, emoji: str) -> str | None:
        if slack_emoji_name(emoji) is not None:
            return None
        return (
            f"Slack reacts by emoji name: write {emoji!r} as :name: (like :eyes:), "
            "or use one of " + " ".join(EMOJI_NAMES)
        )


def _adapter(section: SlackSection, context: ChannelContext) -> ChannelAdapter:
    from ..catch_up import CatchUpSettings
    from .adapter import SlackAdapter

    channel = context.instance_name(SPEC.name)
    return SlackAdapter(
        channel=channel,
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
        link=context.link(channel),
        dm_threads=section.delivery == "stream",
        catch_up=CatchUpSettings.of(section.catch_up),
        marks=context.marks,
        link_previews=LinkPreviews(section.link_previews, section.group_link_previews()),
        proxy=section.proxy,
    )


async def _probe(client: httpx.AsyncClient, section: SlackSection) -> list[Check]:
    from .probe import probe

    return await probe(client, section)


SPEC = ChannelSpec(
    name="slack",
    section=SlackSection,
    factory=_adapter,
    requirement="botd[slack]",
    modules=("slack_bolt", "slack_sdk"),
    chat_kind=targets.chat_kind,
    conversation_key=targets.slack_conversation_key,
    targets=targets.TARGET_FORM,
    probe=_probe,
    init=InitQuestions(
        secrets=(
            SecretQuestion("bot_token", "SLACK_BOT_TOKEN", "the xoxb-... bot token"),
            SecretQuestion(
                "app_token", "SLACK_APP_TOKEN", "the xapp-... app-level token (Socket Mode)"
            ),
        ),
        rank=1,
    ),
)
