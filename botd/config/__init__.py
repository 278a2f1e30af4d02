"""botd's configuration: one YAML file into typed, validated settings, and nothing more.

``load_config`` reads the file with a YAML loader that remembers the line of every mapping
key (``source``), expands ``${VAR}`` / ``${VAR:-default}`` from the environment, and
validates the result with the models of ``schema``, which reject unknown keys; each
``channels.<name>`` section is validated by the model its channel registered under the
``botd.channels`` entry points. Every problem found is reported at once in a
``ConfigError`` (``problems``), each as ``file:line: key.path: message``, in one pass: a key
written twice, a blank secret, a value of the wrong kind and the rules spanning sections
(unique job ids, delivery targets on configured channels, optionally at least one enabled
channel, a ``media.outbound_dir`` that exposes no secrets: ``paths``; the skill folders of
``agent.skills_dir`` and the ``skills`` lists naming them: ``skills``) together. Values
that came from the environment, and keys that hold secrets, are never echoed. A relative
``state_dir`` or ``media.outbound_dir`` is taken from the config file's directory
(``paths``). A valid file may still carry warnings (``notices``: placeholder ids from the
reference config, secrets written in a file others may read), which
``load_config_with_warnings`` returns beside the config.

This package imports no other part of botd: checking a file loads no runtime, no platform
SDK. Secret fields are marked in the models (``secrets``) and ``secret_values`` collects
their values from a loaded config, for the logging to mask. The runtime is built from a
validated config by ``botd.wiring``; which settings apply in one chat (its forum topic's,
group's, channel's, the agent's) is resolved once, by ``overrides.resolve``. Cron
expressions are read by ``cron``, which the scheduler uses too, so ``botd check`` accepts
exactly what runs.
"""

from __future__ import annotations

from .channels import ENTRY_POINT_GROUP, ChannelEntry, registered_channels
from .cron import parse_every
from .loader import (
    LoadedConfig,
    default_config,
    load_config,
    load_config_with_warnings,
    parse_config,
)
from .problems import ConfigError, ConfigProblem
from .schema import BotdConfig, ChannelSection, ChatChannelSection
from .secrets import SECRET, OptionalSecret, Secret, secret_values

__all__ = [
    "ENTRY_POINT_GROUP",
    "SECRET",
    "BotdConfig",
    "ChannelEntry",
    "ChannelSection",
    "ChatChannelSection",
    "ConfigError",
    "ConfigProblem",
    "LoadedConfig",
    "OptionalSecret",
    "Secret",
    "default_config",
    "load_config",
    "load_config_with_warnings",
    "parse_config",
    "parse_every",
    "registered_channels",
    "secret_values",
]
