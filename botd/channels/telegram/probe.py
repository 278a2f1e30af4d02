"""The doctor's live probe of a Telegram bot: read-only requests only.

``getMe`` (401 is a rejected token, 404 a wrong ``api_base_url``) and ``getWebhookInfo`` (a
webhook conflicts with polling; in webhook mode the one set must be ``webhook_url``, and
Telegram's last delivery error and the updates waiting are shown), and whether privacy mode
hides group messages the config wants. URLs are named without tokens.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from ...ops.doctor.checks import Answer, Check, Unreachable, failed, passed, request, unreachable

__all__ = ["TELEGRAM_API", "probe"]

TELEGRAM_API = "https://api.telegram.org"
API_URL_KEY = "channels.telegram.api_base_url"
"""The key that points the probe at the API."""


async def probe(client: httpx.AsyncClient, section: Any) -> list[Check]:
    base = str(section.api_base_url)  # the section dropped a trailing "/" or "/bot" already
    token = str(section.token)

    async def call(method: str) -> Answer:
        return await request(client, "POST", f"{base}/bot{token}/{method}")

    try:
        me = await call("getMe")
    except Unreachable as exc:
        return [unreachable("telegram.token", "telegram", base, exc, API_URL_KEY)]
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
            unreachable("telegram.webhook", "telegram", base, exc, API_URL_KEY),
        ]
    info = hook.field("result")
    if hook.status != 200 or not isinstance(info, dict):
        checks.append(_telegram_trouble("telegram.webhook", "getWebhookInfo", base, hook))
    elif getattr(section, "mode", "polling") == "webhook":
        checks.append(_webhook_check(section, info))
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


def _webhook_check(section: Any, info: dict[str, Any]) -> Check:
    """Webhook mode: what Telegram has set against ``webhook_url``, in one line."""
    wanted, now = str(section.webhook_url), str(info.get("url") or "")
    waiting = int(info.get("pending_update_count") or 0)
    error = str(info.get("last_error_message") or "")
    if now != wanted:
        return failed(
            "telegram.webhook",
            f"telegram: the webhook set is {now or 'none'}, not channels.telegram.webhook_url "
            f"({wanted}); {waiting} update(s) waiting",
            "botd sets it when it starts (setWebhook); if another program set it since, "
            "stop that program, then restart botd",
        )
    if error:
        return failed(
            "telegram.webhook",
            f"telegram: webhook {wanted} set, but Telegram's last delivery failed: {error}; "
            f"{waiting} update(s) waiting",
            "check that botd runs and that the URL reaches channels.telegram.listen "
            "(the reverse proxy's TLS and forwarding)",
        )
    return passed(
        "telegram.webhook", f"telegram: webhook {wanted} set; {waiting} update(s) waiting"
    )


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
