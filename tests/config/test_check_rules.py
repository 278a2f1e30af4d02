"""`botd check`'s stricter rules: duplicate keys, blank secrets, no channel, every problem in
one pass (cross-section ones with field errors), and YAML syntax errors at the right key."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from botd.config import ChatChannelSection, ConfigError, ConfigProblem, load_config, parse_config
from tests.support.daemon_process import bare_env

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = "channels:\n  console: {enabled: true}\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "botd.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def problems(text: str, env: dict[str, str] | None = None, **options: Any) -> list[ConfigProblem]:
    with pytest.raises(ConfigError) as caught:
        parse_config(textwrap.dedent(text).lstrip("\n"), env or {}, **options)
    return caught.value.problems


def check(
    path: Path, *flags: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "botd", "check", "--config", str(path), *flags],
        capture_output=True,
        text=True,
        env=bare_env(**(env or {})),
        cwd=ROOT,
        timeout=60,
    )


# ---------------------------------------------------------------- duplicate keys


def test_a_duplicate_key_names_the_key_and_both_lines() -> None:
    text = """
    channels:
      telegram:
        token: first
        dm_policy: open
        token: second
    """
    assert problems(text) == [
        ConfigProblem(
            "channels.telegram.token",
            5,
            "key 'token' is written twice (lines 3 and 5); keep one",
        )
    ]


def test_a_problem_with_a_repeated_key_points_at_the_value_kept() -> None:
    # YAML keeps the last of the two: a problem with that value names its line, not the first.
    text = """
    channels:
      telegram:
        token: "123:abc"
        token: "  "
    """
    assert [(p.path, p.line, p.message.split(":")[0]) for p in problems(text)] == [
        ("channels.telegram.token", 4, "key 'token' is written twice (lines 3 and 4); keep one"),
        ("channels.telegram.token", 4, "is blank"),
    ]


def test_duplicate_keys_at_the_top_and_in_list_items_are_all_found() -> None:
    text = """
    channels:
      console: {enabled: true}
    logging: {level: INFO}
    scheduler:
      jobs:
        - id: a
          every: 1h
          every: 2h
          prompt: p
          deliver_to: {channel: console, chat: me}
    logging: {level: DEBUG}
    """
    found = [(p.path, p.line) for p in problems(text)]
    assert found == [("scheduler.jobs[0].every", 8), ("logging", 11)]


def test_merge_keys_are_not_duplicates() -> None:
    """A mapping merged in with << may be overridden by the keys written beside it."""
    text = """
    agent:
      block_streaming:
        <<: {min_chars: 10, max_chars: 20}
        max_chars: 30
    channels:
      console: {enabled: true}
    """
    config = parse_config(textwrap.dedent(text).lstrip("\n"), {})
    assert config.agent.block_streaming.max_chars == 30
    assert config.agent.block_streaming.min_chars == 10


# ---------------------------------------------------------------- blank secrets


@pytest.mark.parametrize("value", ['""', '"   "', "${EMPTY_TOKEN:-}", "${SET_BLANK}"])
def test_a_blank_secret_names_the_key_and_line(value: str) -> None:
    text = f"channels:\n  telegram:\n    dm_policy: open\n    token: {value}\n"
    (problem,) = problems(text, {"SET_BLANK": " "})
    assert problem.path == "channels.telegram.token"
    assert problem.line == 4
    assert problem.message.startswith("is blank: a secret needs a value")


def test_a_blank_optional_secret_is_refused_but_null_is_fine() -> None:
    text = "model:\n  provider: openai\n  name: gpt\n  api_key: ''\n" + CONSOLE
    (problem,) = problems(text)
    assert (problem.path, problem.line) == ("model.api_key", 4)
    config = parse_config(
        "model:\n  provider: openai\n  name: gpt\n  api_key: null\n" + CONSOLE, {}
    )
    assert config.model.api_key is None


# ---------------------------------------------------------------- no channel


def test_no_enabled_channel_is_an_error_unless_allowed(tmp_path: Path) -> None:
    for text in ("", "state_dir: ./var\n", "channels:\n  console: {enabled: false}\n"):
        path = write(tmp_path, text)
        refused = check(path)
        assert refused.returncode == 2, text
        assert "no channel is enabled, so nothing would answer" in refused.stderr
        assert "--allow-empty" in refused.stderr
        allowed = check(path, "--allow-empty")
        assert allowed.returncode == 0, allowed.stderr
        assert allowed.stdout.startswith("config OK: channels: none;")


def test_run_refuses_a_config_without_channels(tmp_path: Path) -> None:
    path = write(tmp_path, f"state_dir: {tmp_path / 'state'}\n")
    result = subprocess.run(
        [sys.executable, "-m", "botd", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        env=bare_env(),
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 2
    assert "no channel is enabled" in result.stderr
    assert not (tmp_path / "state").exists()  # refused before anything started


def test_the_library_default_allows_no_channel(tmp_path: Path) -> None:
    """Loading for other purposes (a reload, tests) does not need a channel."""
    assert load_config(write(tmp_path, "state_dir: ./x\n"), {}).channels.enabled() == []


# ---------------------------------------------------------------- one pass


def test_every_problem_in_one_pass_cross_section_ones_too(tmp_path: Path) -> None:
    text = """
    channels:
      console: {enabled: true}
      telegram:
        token: ""
    agent:
      message_targets: [slack/C1]
      max_concurrent_runs: 0
    scheduler:
      jobs:
        - id: a
          every: 1h
          prompt: p
          deliver_to: {channel: discord, chat: "1"}
        - id: a
          cron: "61 * * * *"
          prompt: p
          deliver_to: {channel: console, chat: me}
    logging:
      level: LOUD
      level: INFO
    """
    found = [(p.path, p.line, p.message) for p in problems(text)]
    found[0] = (*found[0][:2], found[0][2].split(":")[0])
    found[5] = (*found[5][:2], "bad cron" if "61" in found[5][2] else found[5][2])
    assert found == [
        ("channels.telegram.token", 4, "is blank"),
        ("agent.message_targets[0].channel", 6, "channel 'slack' is not configured"),
        ("agent.max_concurrent_runs", 7, "must be at least 1, got 0"),
        ("scheduler.jobs[0].deliver_to.channel", 13, "channel 'discord' is not configured"),
        ("scheduler.jobs[1].id", 14, "job id 'a' is used twice (first on line 10)"),
        ("scheduler.jobs[1].cron", 15, "bad cron"),
        ("logging.level", 20, "key 'level' is written twice (lines 19 and 20); keep one"),
    ]
    result = check(write(tmp_path, text))
    assert result.returncode == 2
    assert "config invalid: 7 problems" in result.stderr


def test_cross_checks_survive_sections_of_the_wrong_shape() -> None:
    text = "channels: [console]\nagent: 3\nscheduler:\n  jobs: {a: 1}\n"
    found = {p.path for p in problems(text)}
    assert found == {"channels", "agent", "scheduler.jobs"}


# ---------------------------------------------------------------- YAML syntax


def test_an_unclosed_quote_is_named_at_its_key_and_line() -> None:
    text = """
    model:
      provider: scripted
    channels:
      telegram:
        token: "abc
        dm_policy: open
    logging:
      level: INFO
    """
    (problem,) = problems(text)
    assert (problem.path, problem.line) == ("channels.telegram.token", 5)
    assert problem.message.startswith("not valid YAML: while scanning a quoted scalar")
    assert "abc" not in problem.message


def test_a_missing_colon_points_at_its_own_line() -> None:
    (problem,) = problems("model:\n  provider anthropic\n  name: x\n")
    assert (problem.path, problem.line) == ("model", 2)
    assert "is the ':' after a key missing?" in problem.message


def test_bad_indentation_is_named_at_the_offending_line() -> None:
    (problem,) = problems("channels:\n  telegram:\n    token: x\n   slack: y\n")
    assert problem.line == 4
    assert problem.path.endswith("slack")


def test_an_unclosed_list_in_a_job_is_named_with_its_index() -> None:
    text = """
    scheduler:
      jobs:
        - id: a
          prompt: p
        - id: b
          prompt: [unclosed
          every: 1h
    """
    (problem,) = problems(text)
    assert (problem.path, problem.line) == ("scheduler.jobs[1].prompt", 6)


class PluginSection(ChatChannelSection):
    token: str  # a secret by its name only, not marked


class PluginEntry:
    section = PluginSection

    def missing(self) -> str | None:
        return None


def test_a_blank_secret_by_name_only_is_refused_too() -> None:
    text = "channels:\n  matrix:\n    dm_policy: open\n    token: '  '\n"
    found = problems(text, channels={"matrix": PluginEntry()})
    assert [(p.path, p.line, p.message.split(":")[0]) for p in found] == [
        ("channels.matrix.token", 4, "is blank"),
    ]
    config = parse_config(
        "channels:\n  matrix:\n    token: t\n", {}, channels={"matrix": PluginEntry()}
    )
    assert config.channels.enabled() == ["matrix"]


# ---------------------------------------------------------------- media.outbound_dir


def outbound_config(tmp_path: Path, outbound_dir: str, state_dir: Path | None = None) -> Path:
    """A config (console channel) with ``outbound_dir`` on line 6, in ``tmp_path/conf``."""
    state = tmp_path / "state" if state_dir is None else state_dir
    conf = tmp_path / "conf"
    conf.mkdir(exist_ok=True)
    path = conf / "botd.yaml"
    path.write_text(
        f"state_dir: {state}\n{CONSOLE}media:\n  max_bytes: 1000\n  outbound_dir: {outbound_dir}\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("outbound_dir", "says"),
    [
        ("/", "is /, so the agent could send any file botd can read"),
        ("'~'", "is the home directory of the user botd runs as"),  # bare ~ is YAML's null
        ("{tmp}", "holds the state dir ({tmp}/state), botd's database"),
        ("{tmp}/conf", "holds the config file ({tmp}/conf/botd.yaml) with its secrets"),
        ("/proc", "is /proc"),
    ],
)
def test_check_refuses_an_outbound_dir_that_exposes_secrets(
    tmp_path: Path, outbound_dir: str, says: str
) -> None:
    tmp = tmp_path.resolve()
    path = outbound_config(tmp, outbound_dir.format(tmp=tmp))
    result = check(path)
    assert result.returncode == 2
    [problem, summary] = result.stderr.splitlines()
    assert problem.startswith(f"{path}:6: media.outbound_dir: {says.format(tmp=tmp)};")
    assert problem.endswith("point it at a directory that holds only files meant to be sent")
    assert summary == "config invalid: 1 problem"


def test_check_takes_an_outbound_dir_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    result = check(outbound_config(tmp_path, str(tmp_path / "out")))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("config OK:")


def test_run_refuses_an_outbound_dir_that_holds_the_state_dir(tmp_path: Path) -> None:
    path = outbound_config(tmp_path, str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-m", "botd", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        env=bare_env(),
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"{path}:6: media.outbound_dir: holds the state dir" in result.stderr
    assert not (tmp_path / "state").exists()  # refused before anything started


def test_relative_paths_are_taken_from_the_config_files_directory(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    path = conf / "botd.yaml"
    path.write_text(f"{CONSOLE}state_dir: ./var\nmedia: {{outbound_dir: .}}\n", encoding="utf-8")
    result = check(path)  # run from the checkout, not from conf/
    assert result.returncode == 2
    [problem, _] = result.stderr.splitlines()
    assert problem.startswith(
        f"{path}:4: media.outbound_dir: holds the state dir ({conf.resolve()}/var), "
    )
    path.write_text(f"{CONSOLE}state_dir: ./var\nmedia: {{outbound_dir: out}}\n", encoding="utf-8")
    config = load_config(path, {})
    assert config.state_dir == conf / "var"
    assert config.media.outbound_dir == conf / "out"


def outbound_problem(text: str) -> tuple[int | None, str]:
    """The line and message of the one problem ``text`` has, which is ``media.outbound_dir``'s."""
    [problem] = problems(text)
    assert problem.path == "media.outbound_dir"
    return problem.line, problem.message.split(";")[0]


@pytest.mark.parametrize(
    ("outbound_dir", "says"),
    [
        ("/etc", "is /etc"),
        ("/run", "is /run"),
        ("/root", "is"),  # the home directory too, when the tests run as root
        ("/sys", "is /sys"),
        ("/dev", "is /dev"),
        ("/proc/self", "lies inside /proc"),
        ("/sys/kernel", "lies inside /sys"),
        ("/dev/shm", "lies inside /dev"),
        ("/run/credentials/botd.service", "lies inside /run/credentials"),
        ("/run/secrets/bot", "lies inside /run/secrets"),
    ],
)
def test_system_directories_are_refused(outbound_dir: str, says: str) -> None:
    line, message = outbound_problem(
        f"{CONSOLE}state_dir: /srv/botd\nmedia:\n  outbound_dir: {outbound_dir}\n"
    )
    assert line == 5
    assert message.startswith(says)


def test_a_directory_of_its_own_inside_etc_or_run_is_fine() -> None:
    for outbound_dir in ("/run/botd/out", "/etc/botd/out"):
        config = parse_config(f"{CONSOLE}media:\n  outbound_dir: {outbound_dir}\n", {})
        assert config.media.outbound_dir == Path(outbound_dir)


def test_relative_and_linked_paths_are_compared_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # Both relative to the working directory, as botd uses them.
    line, message = outbound_problem(f"{CONSOLE}state_dir: ./var\nmedia: {{outbound_dir: .}}\n")
    assert (line, message) == (
        4,
        f"holds the state dir ({tmp_path.resolve()}/var), botd's database",
    )
    # A link to the directory that holds the state dir.
    (tmp_path / "real" / "state").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    text = f"{CONSOLE}state_dir: {tmp_path}/real/state\nmedia: {{outbound_dir: ./link}}\n"
    assert outbound_problem(text)[1].startswith("holds the state dir")
    # `~` is the home directory in both keys.
    text = f"{CONSOLE}state_dir: ~/botd-state\nmedia: {{outbound_dir: ~/botd-out}}\n"
    config = parse_config(text, {})
    assert config.state_dir == Path.home() / "botd-state"
    assert config.media.outbound_dir == Path.home() / "botd-out"


# ---------------------------------------------------------------- agent.approvals


def test_an_approval_for_a_tool_that_cannot_exist_is_refused_at_its_line() -> None:
    """A misspelt tool would run unasked: refused, as is an MCP tool of no configured server;
    a built-in and a tool (or all tools) of a configured server pass."""
    text = """
    channels:
      console: {enabled: true}
    agent:
      mcp_servers:
        docs: {command: docs-server}
      approvals:
        tools:
          - web_fetch
          - mcp__docs__search
          - mcp__docs__*
          - webfetch
          - mcp__files__write
    """
    found = problems(text)
    assert [(p.path, p.line) for p in found] == [
        ("agent.approvals.tools[3]", 7),  # a block list's items are told at its key's line
        ("agent.approvals.tools[4]", 7),
    ]
    assert "unknown tool 'webfetch'" in found[0].message
    assert "no MCP server 'files' under agent.mcp_servers (docs)" in found[1].message


def test_an_approval_timeout_is_an_interval_or_seconds_and_asking_approvers_needs_them() -> None:
    base = "channels:\n  console: {enabled: true}\nagent:\n  approvals:\n"
    assert parse_config(base + "    timeout: 10m\n").agent.approvals.timeout == 600
    assert parse_config(base + "    timeout: 90\n").agent.approvals.timeout == 90
    assert parse_config(base + "    tools: [web_fetch]\n").agent.approvals.timeout == 600
    (wrong,) = problems(base + "    timeout: soon\n")
    assert wrong.path == "agent.approvals.timeout"
    (alone,) = problems(base + "    ask_in: approvers\n")
    assert "needs approvers" in alone.message
