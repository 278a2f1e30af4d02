"""Which ACP agent answers a chat: ``agent.acp`` for ``backend: acp`` (as before), a named
one of ``agent.acp_agents`` for ``backend: acp:<name>``; a backend naming an agent the
config does not have is a problem under its own key and line."""

from __future__ import annotations

import textwrap

import pytest

from botd.config import BotdConfig, ConfigError, parse_config
from botd.config.problems import ConfigProblem

AGENTS = """
agent:
  backend: model
  acp: {command: claude-code-acp}
  acp_agents:
    gemini: {command: gemini, args: [--experimental-acp], terminals: true}
channels:
  telegram:
    token: "123:abc"
    groups:
      "-100": {backend: acp}
      "-200": {backend: "acp:gemini"}
"""


def parsed(text: str) -> BotdConfig:
    return parse_config(textwrap.dedent(text).lstrip("\n"), {})


def only_problem(text: str) -> ConfigProblem:
    with pytest.raises(ConfigError) as caught:
        parsed(text)
    [problem] = caught.value.problems
    return problem


def test_groups_name_the_agent_that_answers_them() -> None:
    config = parsed(AGENTS)
    sections = config.agent.acp_sections()
    assert sorted(sections) == ["acp", "acp:gemini"]
    assert sections["acp"].command == "claude-code-acp"
    assert (sections["acp:gemini"].command, sections["acp:gemini"].terminals) == ("gemini", True)
    assert sections["acp"].terminals is False  # off unless said


def test_the_one_agent_config_means_what_it_meant() -> None:
    text = "agent:\n  backend: acp\n  acp: {command: claude-code-acp}\n"
    config = parsed(text)
    assert config.agent.backend == "acp"
    assert list(config.agent.acp_sections()) == ["acp"]


def test_a_backend_naming_an_unknown_agent_is_a_problem_at_its_line() -> None:
    text = AGENTS.replace('"acp:gemini"', '"acp:gemnii"')
    problem = only_problem(text)
    assert problem == ConfigProblem(
        "channels.telegram.groups.-200.backend",
        11,
        "acp:gemnii names the ACP agent agent.acp_agents.gemnii, which is not set",
    )


def test_backend_acp_without_agent_acp_is_a_problem_at_its_line() -> None:
    text = "agent:\n  backend: acp\n"
    problem = only_problem(text)
    assert problem == ConfigProblem(
        "agent.backend", 2, "acp names the ACP agent agent.acp, which is not set"
    )


def test_a_backend_spelled_wrong_is_a_problem() -> None:
    problem = only_problem("agent:\n  backend: claude\n")
    assert problem.path == "agent.backend"
    assert "'claude' is not a backend: model, acp (agent.acp) or acp:<name>" in problem.message


def test_an_agent_name_is_letters_digits_dashes() -> None:
    problem = only_problem("agent:\n  acp_agents:\n    'my agent': {command: x}\n")
    assert "may hold only letters, digits, '_' and '-'" in problem.message
