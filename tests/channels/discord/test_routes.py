"""One Discord client's own URLs: what discord.py builds on its process-wide defaults is
rebased onto the client's, anything else (a resume URL READY named) is left as it is."""

from __future__ import annotations

from discord.gateway import DiscordWebSocket
from discord.http import Route

from botd.channels.discord.routes import DiscordRoutes

OWN = DiscordRoutes.of("http://127.0.0.1:9/api/v10/", "ws://127.0.0.1:9/gateway/")


def test_rest_requests_are_rebased_and_the_route_made_stays_as_it_was() -> None:
    route = Route("GET", "/channels/{channel_id}/messages", channel_id=42)
    rebased = OWN.rest(route)
    assert rebased.url == "http://127.0.0.1:9/api/v10/channels/42/messages"
    assert route.url == f"{Route.BASE}/channels/42/messages"
    assert (rebased.key, rebased.channel_id) == (route.key, route.channel_id)  # same bucket
    assert DiscordRoutes.of(None, None).rest(route) is route


def test_the_default_gateway_is_rebased_with_its_query_and_a_resume_url_is_not() -> None:
    asked = str(DiscordWebSocket.DEFAULT_GATEWAY.with_query(v=10, encoding="json"))
    assert OWN.socket(asked) == "ws://127.0.0.1:9/gateway/?v=10&encoding=json"
    resume = "wss://gateway-us-east1-b.discord.gg/?v=10&encoding=json"
    assert OWN.socket(resume) == resume
    assert DiscordRoutes.of(None, None).socket(asked) == asked
