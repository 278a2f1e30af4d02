"""``botd doctor``'s warnings: a config that works, but most likely not as its operator meant.

Each is a ``⚠`` line (exit 0 unless ``--strict``) with what to do:

* what ``botd check`` warns about in the file (placeholder ids, literal secrets in a file
  others may read: ``botd.config.notices``);
* the scripted provider (canned replies) answering on a channel others read (not the
  operator's own terminal, a spec's ``local``), typically because
  the file has no ``model:`` section (``ANTHROPIC_API_KEY`` is then not used: only ``botd
  run`` without a config falls back on it);
* an access policy that admits nobody: ``dm_policy: allowlist`` with an empty
  ``allow_from`` and nobody approved by pairing (``pairing.json``), or ``group_policy:
  allowlist`` with no group (or only disabled ones) under ``groups``;
* the health port taken by something else (``botd run`` would stop at start; a botd running
  on the same state dir is presumably the one listening).

The Anthropic model id the API does not know is found by the model probe (``doctor``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ...channels.registry import platform_specs
from ...config import BotdConfig, ChatChannelSection, ConfigProblem
from ..ports import listen_problem
from .checks import Check, failed, passed, warned
from .state import lock_holder

__all__ = ["access_checks", "config_warnings", "health_port_check", "provider_check"]


def config_warnings(warnings: list[ConfigProblem], source: str) -> list[Check]:
    """``botd check``'s warnings, one line each."""
    return [warned("config", warning.render(source), "") for warning in warnings]


def provider_check(config: BotdConfig, env: Mapping[str, str]) -> list[Check]:
    """A warning when canned replies would answer on a real channel."""
    specs = platform_specs(config.channels)
    real = [
        name for name in config.channels.enabled() if name not in specs or not specs[name].local
    ]
    if config.model.provider != "scripted" or not real:
        return []
    why = ""
    if "model" not in config.model_fields_set:
        why = " (the config has no model: section"
        if env.get("ANTHROPIC_API_KEY"):
            why += "; ANTHROPIC_API_KEY is set, but only botd run without --config uses it"
        why += ")"
    return [
        warned(
            "model.provider",
            f"model: the scripted provider (canned replies, no model) answers on "
            f"{', '.join(real)}{why}",
            "add a model: section, e.g. provider: anthropic with api_key: ${ANTHROPIC_API_KEY}",
        )
    ]


async def access_checks(config: BotdConfig, state_dir: Path) -> list[Check]:
    """Warnings for access policies that admit nobody, by channel."""
    from ...store.pairing import PairingFile, PairingFileError

    sections = {
        name: section
        for name, section in config.channels.sections().items()
        if name in config.channels.enabled() and isinstance(section, ChatChannelSection)
    }
    if not sections:
        return []
    try:
        approved = await PairingFile(state_dir / "pairing.json").approved()
        paired = {channel for channel, _, _ in approved}
    except PairingFileError as exc:
        return [
            failed(
                "state_dir.pairing",
                str(exc),
                "pairing approvals cannot be read, so everyone approved is refused",
            )
        ]
    checks: list[Check] = []
    for name, section in sections.items():
        key = f"channels.{name}"
        if section.dm_policy == "allowlist" and not section.allow_from and name not in paired:
            checks.append(
                warned(
                    f"{key}.dm_policy",
                    f"{name}: dm_policy allowlist with an empty allow_from, and nobody approved "
                    "by pairing: no one can DM the bot",
                    f"add user ids to {key}.allow_from (/whoami tells a user theirs), or set "
                    "dm_policy: pairing and approve them with botd pairing approve",
                )
            )
        if section.group_policy == "allowlist" and not any(
            group.enabled for group in section.groups.values()
        ):
            checks.append(
                warned(
                    f"{key}.group_policy",
                    f"{name}: group_policy allowlist with no group under groups: the bot "
                    "answers in no group",
                    f'list the groups by id under {key}.groups ("*" for every group), or set '
                    "group_policy: disabled if the bot is for direct messages only",
                )
            )
    return checks


def health_port_check(config: BotdConfig) -> list[Check]:
    """Whether the health endpoint's address is free (when health is enabled)."""
    health = config.health
    if not health.enabled:
        return []
    address = f"{health.host}:{health.port}"
    problem = listen_problem(health.host, health.port)
    if problem is None:
        return [passed("health.port", f"health endpoint: {address} is free")]
    holder = lock_holder(Path(config.state_dir))
    if holder is not None:
        return [
            passed(
                "health.port",
                f"health endpoint: {address} is taken, presumably by the running botd ({holder})",
            )
        ]
    return [
        warned(
            "health.port",
            f"health.port: cannot listen on {problem}, so botd run would stop at start",
            "stop what listens there, or choose another health.port",
        )
    ]
