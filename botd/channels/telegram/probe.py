"""The chat platforms' live probes: Telegram, Slack and Discord, read-only requests only.

Telegram: ``getMe`` (401 is a rejected token, 404 a wrong ``api_base_url``) and
``getWebhookInfo`` (a webhook conflicts with polling), and whether privacy mode hides
group messages the config wants. Slack: ``auth.test`` with the bot token, and the scopes its
answer's ``X-OAuth-Scopes`` header lists against those botd uses, and, in Socket Mode,
``apps.connections.open`` with the app token (the websocket URL it returns is never opened).
Discord: ``users/@me``, ``gateway/bot`` (session starts left) and ``applications/@me`` for
the message-content intent botd asks the gateway for. URLs are named without tokens.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from .checks import Answer, Check, Unreachable, failed, passed, request, unreachable

__all__ = ["DISCORD_API", "SLACK_API", "TELEGRAM_API", "discord", "slack", "telegram"]

TELEGRAM_API = "https://api.telegram.org"
SLACK_API = "https://slack.com/api/"
DISCORD_API = "https://discord.com/api/v10"

# Application flags granting the message-content intent (verified apps, and apps in fewer
# than 100 servers).
GATEWAY_MESSAGE_CONTENT = 1 << 18
GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 19

API_URL_KEY = {
    "telegram": "channels.telegram.api_base_url",
    "slack": "channels.slack.api_base_url",
    "discord": "channels.discord.api_base_url",
}
"""The key that points each platform's probes at its API."""

DISCORD_INTENT_FIX = (
    'enable "Message Content Intent" in the Discord developer portal '
    "(Applications > your app > Bot > Privileged Gateway Intents)"
)


# --------------------------------------------------------------------------- telegram


async def telegram(client: httpx.AsyncClient, section: Any) -> list[Check]:
    base = str(section.api_base_url)  # the section dropped a trailing "/" or "/bot" already
    token = str(section.token)

    async def call(method: str) -> Answer:
        return await request(client, "POST", f"{base}/bot{token}/{method}")

    try:
        me = await call("getMe")
    except Unreachable as exc:
        return [unreachable("telegram.token", "telegram", base, exc, API_URL_KEY["telegram"])]
    if me.status == 401:
        return [
            failed(
                "telegram.token",
                f"telegram: the token was rejected by {base} (getMe: 401 Unauthorized)",
                "check channels.telegram.token: the token @BotFather gave "
                "(digits:letters); if it was revoked, get a new one with /token in @BotFather",
            )
        ]
    if me.status == 404:
        fix = (
            "check channels.telegram.api_base_url: it is the server's root, e.g. "
            f"{TELEGRAM_API} (botd adds /bot<token>/ itself)"
        )
        if not re.fullmatch(r"\d+:[\w-]+", token):  # Telegram answers such tokens 404 too
            fix += ", and the token: it does not look like one from @BotFather (digits:letters)"
        return [
            failed("telegram.token", f"telegram: {base} answered getMe with 404 Not Found", fix)
        ]
    result = me.field("result")
    if me.status != 200 or me.field("ok") is not True or not isinstance(result, dict):
        return [_telegram_trouble("telegram.token", "getMe", base, me)]
    bot = f"@{result.get('username', '?')}"
    checks = [passed("telegram.token", f"telegram: token accepted, bot {bot} ({base})")]
    try:
        hook = await call("getWebhookInfo")
    except Unreachable as exc:
        return [
            *checks,
            unreachable("telegram.webhook", "telegram", base, exc, API_URL_KEY["telegram"]),
        ]
    info = hook.field("result")
    if hook.status != 200 or not isinstance(info, dict):
        checks.append(_telegram_trouble("telegram.webhook", "getWebhookInfo", base, hook))
    elif info.get("url"):
        # Telegram refuses getUpdates while a webhook is set; botd's polling deletes it when
        # it starts, which takes the updates away from whatever receives them there.
        checks.append(
            passed(
                "telegram.webhook",
                f"telegram: a webhook is set ({info['url']}), which conflicts with polling: "
                "botd deletes it when it starts, so stop whatever receives updates there "
                f"(or delete it yourself: curl '{base}/bot<token>/deleteWebhook')",
            )
        )
    else:
        checks.append(passed("telegram.webhook", "telegram: no webhook set (polling works)"))
    checks.append(_telegram_privacy(section, result))
    return checks


def _telegram_trouble(name: str, method: str, base: str, answer: Answer) -> Check:
    description = answer.field("description") or "no description"
    return failed(
        name,
        f"telegram: {base} answered {method} with {answer.status} ({description})",
        "if it is a 5xx or 429, Telegram is having trouble: try again later; "
        "otherwise check channels.telegram.api_base_url",
    )


def _telegram_privacy(section: Any, me: dict[str, Any]) -> Check:
    if me.get("can_read_all_group_messages"):
        return passed(
            "telegram.privacy", "telegram: privacy mode off (the bot sees every message in groups)"
        )
    groups_on = getattr(section, "group_policy", "allowlist") != "disabled"
    groups = getattr(section, "groups", {}) or {}
    wants_all = bool(section.require_mention is False) or any(
        getattr(group, "require_mention", True) is False for group in groups.values()
    )
    if groups_on and wants_all:
        return failed(
            "telegram.privacy",
            "telegram: privacy mode is on, so in groups the bot sees only mentions, commands "
            "and replies to it, but require_mention is off for some group",
            "turn privacy mode off in @BotFather (/setprivacy, Disable), then remove the bot "
            "from each group and add it again",
        )
    return passed(
        "telegram.privacy",
        "telegram: privacy mode on: in groups the bot sees only mentions, commands and "
        "replies to it (enough with require_mention; turn it off in @BotFather with /setprivacy "
        "for more)",
    )


# --------------------------------------------------------------------------- slack

_SLACK_REJECTED = frozenset(
    {"invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive"}
)


async def slack(client: httpx.AsyncClient, section: Any) -> list[Check]:
    base = str(section.api_base_url)
    base = base if base.endswith("/") else base + "/"

    async def call(method: str, token: str) -> Answer:
        headers = {"Authorization": f"Bearer {token}"}
        return await request(client, "POST", f"{base}{method}", headers=headers)

    try:
        auth = await call("auth.test", str(section.bot_token))
    except Unreachable as exc:
        return [unreachable("slack.bot_token", "slack", base, exc, API_URL_KEY["slack"])]
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
        return [*checks, unreachable("slack.app_token", "slack", base, exc, API_URL_KEY["slack"])]
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
    "reactions:write": "no reaction marks a message being answered",
    "files:read": "files users send are not read",
    "files:write": "the agent's files are posted as links, not uploaded",
    "assistant:write": "no typing status in assistant threads",
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


# --------------------------------------------------------------------------- discord


async def discord(client: httpx.AsyncClient, section: Any) -> list[Check]:
    base = str(section.api_base_url or DISCORD_API).rstrip("/")
    headers = {"Authorization": f"Bot {section.token}"}

    async def get(path: str) -> Answer:
        return await request(client, "GET", f"{base}/{path}", headers=headers)

    try:
        me = await get("users/@me")
    except Unreachable as exc:
        return [unreachable("discord.token", "discord", base, exc, API_URL_KEY["discord"])]
    if me.status == 401:
        return [
            failed(
                "discord.token",
                "discord: the bot token was rejected (users/@me: 401 Unauthorized)",
                "check channels.discord.token: the bot token from the developer portal "
                "(Applications > your app > Bot > Reset Token)",
            )
        ]
    if me.status == 404:
        return [_discord_not_found("discord.token", "users/@me", base)]
    if me.status != 200:
        return [_discord_trouble("discord.token", "users/@me", me)]
    bot = me.field("username") or "?"
    checks = [passed("discord.token", f"discord: token accepted, bot {bot} ({base})")]
    try:
        gateway = await get("gateway/bot")
        application = await get("applications/@me")
    except Unreachable as exc:
        return [
            *checks,
            unreachable("discord.gateway", "discord", base, exc, API_URL_KEY["discord"]),
        ]
    if gateway.status != 200:
        checks.append(_discord_trouble("discord.gateway", "gateway/bot", gateway))
    else:
        limit = gateway.field("session_start_limit")
        remaining = limit.get("remaining") if isinstance(limit, dict) else None
        if remaining == 0:
            wait = int(limit.get("reset_after", 0)) // 1000 if isinstance(limit, dict) else 0
            checks.append(
                failed(
                    "discord.gateway",
                    "discord: no gateway session starts left today",
                    f"wait about {wait} s before starting botd (too many restarts)",
                )
            )
        else:
            url = gateway.field("url") or "?"
            checks.append(passed("discord.gateway", f"discord: gateway reachable ({url})"))
    flags = application.field("flags")
    if application.status != 200 or not isinstance(flags, int):
        checks.append(_discord_trouble("discord.intent", "applications/@me", application))
    elif flags & (GATEWAY_MESSAGE_CONTENT | GATEWAY_MESSAGE_CONTENT_LIMITED):
        checks.append(passed("discord.intent", "discord: message content intent enabled"))
    else:
        checks.append(
            failed(
                "discord.intent",
                "discord: the message content intent is off, so Discord refuses the gateway "
                "connection botd asks for",
                DISCORD_INTENT_FIX,
            )
        )
    return checks


def _discord_not_found(name: str, path: str, base: str) -> Check:
    return failed(
        name,
        f"discord: {base} answered {path} with 404 Not Found",
        f"check channels.discord.api_base_url (normally {DISCORD_API}, or leave it out)",
    )


def _discord_trouble(name: str, path: str, answer: Answer) -> Check:
    message = answer.field("message") or "no message"
    return failed(
        name,
        f"discord: {path} answered {answer.status} ({message})",
        "if it is a 5xx or 429, Discord is having trouble: try again later",
    )
