"""What the Slack adapter tests share: the adapter over the loopback fake, a sink that lists
what it hands on, a message event, and a signed post to the adapter's HTTP endpoint."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from botd.channels.base import Ack
from botd.channels.slack.adapter import SlackAdapter
from botd.chat import InboundMessage
from tests.fakes.slack_api import FakeSlack, signed_headers

SECRET = "signing-secret"


class Inbox:
    """Every inbound message the adapter handed on, in order."""

    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []

    async def __call__(self, message: InboundMessage, *, ack: Ack | None = None) -> None:
        self.messages.append(message)


def slack_adapter(fake: FakeSlack, **kwargs: Any) -> SlackAdapter:
    """A Slack adapter over ``fake`` (``kwargs``: more of its keyword arguments)."""
    return SlackAdapter(
        bot_token="xoxb-test",
        app_token="xapp-test",
        signing_secret=SECRET,
        api_base_url=fake.base_url,
        **kwargs,
    )


def message_event(channel: str, ts: str, text: str, **extra: Any) -> dict[str, Any]:
    """A ``message`` event from U1 (a DM when ``channel`` starts with D)."""
    event = {"type": "message", "channel": channel, "user": "U1", "text": text, "ts": ts}
    event["channel_type"] = "im" if channel.startswith("D") else "channel"
    event.update(extra)
    return event


async def post_http(
    adapter: SlackAdapter, body: dict[str, Any], *, secret: str = SECRET, **headers: str
) -> tuple[int, str]:
    """``body`` posted to the adapter's events endpoint, signed with ``secret``: the
    status and text of the answer."""
    raw = json.dumps(body).encode()
    all_headers = {**signed_headers(secret, raw), **headers}
    url = f"http://127.0.0.1:{adapter.http_port}/slack/events"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=raw, headers=all_headers) as response,
    ):
        return response.status, await response.text()
