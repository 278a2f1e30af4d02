"""A reply waiting out a retry backoff goes as soon as its platform is reachable again
(issue 35): the keeper hears from the adapter's ``PlatformLink`` that the platform answers
after failing, and delivery tries the waiting reply at once instead of at the end of its
backoff (set to a minute here, so only the wake can send it while the test waits).

The platform is a stand-in that refuses sends as an unreachable one does until it is back;
the keeper and delivery are the real ones, wired as the runtime wires them.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from botd.channel_keeper import ChannelHost, ChannelKeeper
from botd.channels.base import SendScope
from botd.channels.errors import ChannelError
from botd.channels.registry import ChannelContext
from botd.chat import Capabilities, MessageRef, Target
from botd.config import BotdConfig
from botd.delivery import ChannelDelivery
from botd.delivery.retrying import Retrier, RetrySettings
from botd.text.markup import PLAIN
from tests.support.text_only_adapter import TextOnlyAdapter
from tests.support.waiting import guarded, until

LONG = RetrySettings(first=60.0, cap=60.0)
"""A backoff far longer than the test waits: a send that goes did not wait it out."""


class Unreachable(TextOnlyAdapter):
    """A platform whose sends fail as a lost network's do until ``back``."""

    name = "edge"
    capabilities = Capabilities(text_limit=1000, markup=PLAIN)

    def __init__(self) -> None:
        self.reachable = False
        self.tries = 0
        self.sent: list[str] = []

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        self.tries += 1
        if not self.reachable:
            raise ChannelError("cannot reach edge: connection refused", retryable=True)
        self.sent.append(markdown)
        return [MessageRef(target, str(len(self.sent)))]

    async def typing(self, target: Target) -> None:
        return None


class Host:
    def __init__(self, adapter: Unreachable) -> None:
        self.adapters: dict[str, Any] = {"edge": adapter}
        self.sink = self.handle

    async def handle(self, message: object) -> None:
        return None

    def build_adapter(self, name: str, config: BotdConfig, context: object) -> Unreachable:
        raise AssertionError("not rebuilt")

    def update_channels(self, config: BotdConfig) -> None:
        return None


def wired(adapter: Unreachable) -> tuple[ChannelKeeper, ChannelDelivery]:
    delivery = ChannelDelivery({"edge": adapter}, retrier=Retrier(LONG))
    config = BotdConfig.model_validate({})
    keeper = ChannelKeeper(
        cast(ChannelHost, Host(adapter)),
        lambda: config,
        ChannelContext(offsets=cast(Any, None)),
        on_reachable=delivery.platform_back,
    )
    return keeper, delivery


async def test_a_reply_waiting_out_its_backoff_goes_once_the_platform_answers_again() -> None:
    adapter = Unreachable()
    keeper, delivery = wired(adapter)
    link = keeper.context.link("edge")
    link.unreachable("getUpdates failed: connection refused")  # the poller failing
    sending = asyncio.create_task(delivery.send_text(Target("edge", "42"), "the reply"))
    await until(lambda: adapter.tries == 1, "the first try, refused")
    adapter.reachable = True  # the network is back; the reply's next try is a minute away
    link.reachable()  # the poller got through
    refs = await guarded(sending, "the waiting reply sent at once")
    assert adapter.sent == ["the reply"] and len(refs) == 1


def test_only_a_platform_coming_back_is_told_on() -> None:
    told: list[str] = []
    config = BotdConfig.model_validate({})
    keeper = ChannelKeeper(
        cast(ChannelHost, Host(Unreachable())),
        lambda: config,
        ChannelContext(offsets=cast(Any, None)),
        on_reachable=told.append,
    )
    link = keeper.context.link("edge")
    # A platform never seen failing: "it answers" is no news (a Slack socket's watch says
    # so every second), and a backoff is never cut short by it.
    link.reachable()
    assert told == []
    link.unreachable("socket reconnecting")
    link.unreachable("socket reconnecting")
    link.reachable()
    link.reachable()
    assert told == ["edge"]
