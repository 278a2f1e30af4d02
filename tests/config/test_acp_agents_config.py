"""Which ACP agent answers a chat: ``agent.acp`` for ``backend: acp`` (as before), a named
one of ``agent.acp_agents`` for ``backend: acp:<name>``; a backend naming an agent the
config does not have is a problem under its own key and line."""

from __future__ import annotations

from pathlib import Path

from botd.config import load_config
from botd.config.problems import ConfigProblem
from tests.config.test_config import only, problems, write

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


def test_groups_name_the_agent_that_answers_them(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, AGENTS), {})
    sections = config.agent.acp_sections()
    assert sorted(sections) == ["acp", "acp:gemini"]
    assert sections["acp"].command == "claude-code-acp"
    assert (sections["acp:gemini"].command, sections["acp:gemini"].terminals) == ("gemini", True)
    assert sections["acp"].terminals is False  # off unless said


def test_the_one_agent_config_means_what_it_meant(tmp_path: Path) -> None:
    text = "agent:\n  backend: acp\n  acp: {command: claude-code-acp}\n"
    config = load_config(write(tmp_path, text), {})
    assert config.agent.backend == "acp"
    assert list(config.agent.acp_sections()) == ["acp"]


def test_a_backend_naming_an_unknown_agent_is_a_problem_at_its_line(tmp_path: Path) -> None:
    text = AGENTS.replace('"acp:gemini"', '"acp:gemnii"')
    problem = only(problems(tmp_path, text))
    assert problem == ConfigProblem(
        "channels.telegram.groups.-200.backend",
        11,
        "acp:gemnii names the ACP agent agent.acp_agents.gemnii, which is not set",
    )


def test_backend_acp_without_agent_acp_is_a_problem_at_its_line(tmp_path: Path) -> None:
    text = "agent:\n  backend: acp\n"
    problem = only(problems(tmp_path, text))
    assert problem == ConfigProblem(
        "agent.backend", 2, "acp names the ACP agent agent.acp, which is not set"
    )


def test_a_backend_spelled_wrong_is_a_problem(tmp_path: Path) -> None:
    problem = only(problems(tmp_path, "agent:\n  backend: claude\n"))
    assert problem.path == "agent.backend"
    assert "'claude' is not a backend: model, acp (agent.acp) or acp:<name>" in problem.message


def test_an_agent_name_is_letters_digits_dashes(tmp_path: Path) -> None:
    problem = only(problems(tmp_path, "agent:\n  acp_agents:\n    'my agent': {command: x}\n"))
    assert "may hold only letters, digits, '_' and '-'" in problem.message
