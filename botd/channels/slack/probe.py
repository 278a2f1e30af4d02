"""The doctor's live probe of a Slack app: read-only requests only.

``auth.test`` with the bot token, and the scopes its answer's ``X-OAuth-Scopes`` header lists
against those botd uses, and, in Socket Mode, ``apps.connections.open`` with the app token
(the websocket URL it returns is never opened). URLs are named without tokens.
"""

from __future__ import annotations

from typing import Any

import httpx

from ...ops.doctor.checks import Answer, Check, Unreachable, failed, passed, request, unreachable

__all__ = ["SLACK_API", "probe"]

SLACK_API = "https://slack.com/api/"
API_URL_KEY = "channels.slack.api_base_url"
"""The key that points the probe at the API."""


_SLACK_REJECTED = frozenset(
    {"invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive"}
)


async def probe(client: httpx.AsyncClient, section: Any) -> list[Check]:
    base = str(section.api_base_url)
    base = base if base.endswith("/") else base + "/"

    async def call(method: str, token: str) -> Answer:
        headers = {"Authorization": f"Bearer {token}"}
        return await request(client, "POST", f"{base}{method}", headers=headers)

    try:
        auth = await call("auth.test", str(section.bot_token))
    except Unreachable as exc:
        return [unreachable("slack.bot_token", "slack", base, exc, API_URL_KEY)]
    if auth.status == 404:
        return [_slack_not_found("slack.bot_token", "auth.test", base)]
    error = auth.field("error")
    if error in _SLACK_REJECTED:
        return [
            failed(
                "slack.bot_token",
                f"slack: the bot token was rejected (auth.test: {error})",
                "check channels.slack.bot_token: the xoxb-... Bot User OAuth Token "
                "(OAuth & Permissions); reinstall the app if it was revoked",
            )
        ]
    if auth.field("ok") is not True:
        return [_slack_trouble("slack.bot_token", "auth.test", base, auth)]
    who = f"@{auth.field('user') or '?'} in {auth.field('team') or '?'}"
    checks = [passed("slack.bot_token", f"slack: bot token accepted, {who} ({base})")]
    granted = auth.headers.get("x-oauth-scopes")
    if granted is not None:  # Slack sends it with every answer; a proxy may not
        checks.append(_slack_scopes({s.strip() for s in granted.split(",") if s.strip()}))
    if section.mode != "socket":
        return checks
    try:
        socket = await call("apps.connections.open", str(section.app_token))
    except Unreachable as exc:
        return [*checks, unreachable("slack.app_token", "slack", base, exc, API_URL_KEY)]
    error = socket.field("error")
    if socket.status == 404:
        checks.append(_slack_not_found("slack.app_token", "apps.connections.open", base))
    elif error in _SLACK_REJECTED or error == "not_allowed_token_type":
        checks.append(
            failed(
                "slack.app_token",
                f"slack: the app token was rejected (apps.connections.open: {error})",
                "check channels.slack.app_token: the xapp-... app-level token with the "
                "connections:write scope (Basic Information > App-Level Tokens)",
            )
        )
    elif socket.field("ok") is not True:
        checks.append(
            failed(
                "slack.app_token",
                f"slack: Socket Mode refused (apps.connections.open: {error or socket.status})",
                "turn Socket Mode on in the app's settings and give the app token the "
                "connections:write scope",
            )
        )
    else:
        checks.append(passed("slack.app_token", "slack: app token accepted, Socket Mode available"))
    return checks


# Bot token scopes botd uses, with what the bot cannot do without each: the first four it
# needs to be of any use, the others for one feature each.
_SLACK_NEEDED_SCOPES = {
    "chat:write": "it cannot post",
    "app_mentions:read": "it does not hear mentions",
    "channels:history": "it does not hear public channels nor read their threads",
    "im:history": "it does not hear direct messages",
}
_SLACK_FEATURE_SCOPES = {
    "groups:history": "private channels are not heard",
    "mpim:history": "group DMs are not heard",
    "reactions:write": "no reaction shows a message's status (taken, done, failed)",
    "files:read": "files users send are not read",
    "files:write": "the agent's files are posted as links, not uploaded",
    "assistant:write": "no typing or tool status in assistant threads",
    "users:read": "senders whose message carries no profile show as ids",
    "commands": "no slash command (/botd stop) reaches the bot",
}


def _slack_scopes(granted: set[str]) -> Check:
    """The bot token's scopes (``X-OAuth-Scopes``) against those botd uses."""
    lacking = [f"{s} ({why})" for s, why in _SLACK_NEEDED_SCOPES.items() if s not in granted]
    if lacking:
        return failed(
            "slack.scopes",
            f"slack: the bot token lacks {', '.join(lacking)}",
            "add the scopes under OAuth & Permissions > Bot Token Scopes, then reinstall the "
            "app to the workspace",
        )
    what = "slack: the bot token's scopes let it post and hear mentions, channels and DMs"
    without = [f"without {s} {why}" for s, why in _SLACK_FEATURE_SCOPES.items() if s not in granted]
    return passed("slack.scopes", f"{what}; {'; '.join(without)}" if without else what)


def _slack_not_found(name: str, method: str, base: str) -> Check:
    return failed(
        name,
        f"slack: {base} answered {method} with 404 Not Found",
        f"check channels.slack.api_base_url (normally {SLACK_API})",
    )


def _slack_trouble(name: str, method: str, base: str, answer: Answer) -> Check:
    return failed(
        name,
        f"slack: {method} failed ({answer.field('error') or answer.status})",
        f"if Slack is having trouble try again later; otherwise check the app at {base}",
    )
