"""Config loading: every error names its key and line, secrets stay hidden, helpers work."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from botd import wiring
from botd.config import (
    BotdConfig,
    ConfigError,
    ConfigProblem,
    default_config,
    load_config,
    parse_config,
    parse_every,
    registered_channels,
)
from botd.config.cron import cron_trigger
from botd.config.schema import WEB_CHANNEL, ChannelsSection
from tests.support.config_reference import (
    EXAMPLE,
    EXAMPLES_ENV,
    REFERENCE,
    REFERENCE_ENV,
    ROOT,
    switched_on,
    with_examples,
)
from tests.support.daemon_process import bare_env, run_botd


def write(tmp_path: Path, text: str, name: str = "botd.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def problems(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> list[ConfigProblem]:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, env or {})
    return caught.value.problems


def only(found: list[ConfigProblem]) -> ConfigProblem:
    assert len(found) == 1, found
    return found[0]


# ---------------------------------------------------------------- error classes


def test_unknown_top_level_key_suggests(tmp_path: Path) -> None:
    problem = only(problems(tmp_path, "state_dir: ./var\nmodle:\n  provider: scripted\n"))
    assert problem == ConfigProblem("modle", 2, "unknown key 'modle'; did you mean 'model'?")


def test_unknown_nested_key_suggests(tmp_path: Path) -> None:
    text = """
    agent:
      block_streaming:
        min_chars: 100
        max_char: 500
    """
    problem = only(problems(tmp_path, text))
    assert problem.path == "agent.block_streaming.max_char"
    assert problem.line == 4
    assert problem.message == "unknown key 'max_char'; did you mean 'max_chars'?"


def test_unknown_key_without_close_match_lists_known(tmp_path: Path) -> None:
    problem = only(problems(tmp_path, "health:\n  zzz: 1\n"))
    assert problem.line == 2
    assert problem.message == (
        "unknown key 'zzz' (known: enabled, host, port, down_after, stuck_after)"
    )


def test_unknown_key_inside_group_and_alias_field(tmp_path: Path) -> None:
    text = """
    channels:
      telegram:
        token: t
        groups:
          -100123:
            require_mentoin: false
    agent:
      block_streaming:
        braek: text_end
    """
    found = problems(tmp_path, text)
    assert [(p.line, p.message) for p in found] == [
        (6, "unknown key 'require_mentoin'; did you mean 'require_mention'?"),
        (9, "unknown key 'braek'; did you mean 'break'?"),
    ]


def test_wrong_type_is_readable(tmp_path: Path) -> None:
    text = """
    model:
      provider: scripted
      max_tokens: ten
    """
    problem = only(problems(tmp_path, text))
    assert problem == ConfigProblem("model.max_tokens", 3, "expected a whole number, got 'ten'")


def test_wrong_choice_and_bool_and_range(tmp_path: Path) -> None:
    text = """
    agent:
      queue_mode: later
      record_events: maybe
      max_concurrent_runs: 0
    """
    found = {p.path: p for p in problems(tmp_path, text)}
    assert found["agent.queue_mode"].line == 2
    assert "expected 'steer', 'followup', 'collect' or 'interrupt'" in (
        found["agent.queue_mode"].message
    )
    assert found["agent.record_events"].message == "expected true or false, got 'maybe'"
    assert found["agent.max_concurrent_runs"].message == "must be at least 1, got 0"


def test_missing_required_key(tmp_path: Path) -> None:
    problem = only(problems(tmp_path, "channels:\n  discord:\n    allow_bots: true\n"))
    assert problem == ConfigProblem("channels.discord.token", 2, "required key is missing")


def test_telegram_webhook_mode_needs_its_url_and_secret(tmp_path: Path) -> None:
    text = """
    channels:
      telegram:
        token: ${T}
        mode: webhook
    """
    found = problems(tmp_path, text, env={"T": "1:a"})
    assert sorted((p.path, p.line, p.message) for p in found) == [
        ("channels.telegram.webhook_secret", 2, "mode webhook needs webhook_secret"),
        ("channels.telegram.webhook_url", 2, "mode webhook needs webhook_url"),
    ]
    text = """
    channels:
      telegram:
        token: ${T}
        mode: webhook
        webhook_url: http://bot.example.org/telegram
        webhook_secret: ${HOOK}
    """
    found = problems(tmp_path, text, env={"T": "1:a", "HOOK": "not a valid secret!"})
    lines = {p.path: (p.line, p.message) for p in found}
    assert lines.keys() == {"channels.telegram.webhook_url", "channels.telegram.webhook_secret"}
    assert lines["channels.telegram.webhook_url"][0] == 5
    assert "https://" in lines["channels.telegram.webhook_url"][1]
    assert lines["channels.telegram.webhook_secret"][0] == 6
    assert "not a valid secret" not in str(found)  # secrets never echoed


def test_missing_secret_variable_names_key_line_and_variable(tmp_path: Path) -> None:
    text = """
    channels:
      telegram:
        token: ${TELEGRAM_TOKEN}
    """
    problem = only(problems(tmp_path, text, env={}))
    assert problem.path == "channels.telegram.token"
    assert problem.line == 3
    assert "TELEGRAM_TOKEN is not set" in problem.message


def test_variable_default_and_value(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        state_dir: ${STATE:-/srv/botd}
        model:
          provider: anthropic
          api_key: ${KEY}
          max_tokens: ${TOKENS:-2048}
          base_url: "http://${HOST:-localhost}:${PORT:-8080}/v1"
        agent:
          system_prompt: "costs $$5"
        """,
    )
    config = load_config(path, {"KEY": "sk-secret", "PORT": "9000"})
    assert config.state_dir == Path("/srv/botd")
    assert config.model.api_key == "sk-secret"
    assert config.model.max_tokens == 2048
    assert config.model.base_url == "http://localhost:9000/v1"
    assert config.agent.system_prompt == "costs $5"


def test_bad_cron(tmp_path: Path) -> None:
    text = """
    channels:
      console: {enabled: true}
    scheduler:
      jobs:
        - id: standup
          cron: "0 25 * * 1"
          prompt: hi
          deliver_to: {channel: console, chat: me}
        - id: sixfields
          cron: "0 9 * * 1 2"
          prompt: hi
          deliver_to: {channel: console, chat: me}
    """
    found = problems(tmp_path, text)
    assert [(p.path, p.line) for p in found] == [
        ("scheduler.jobs[0].cron", 6),
        ("scheduler.jobs[1].cron", 10),
    ]
    assert "hour" in found[0].message
    assert "needs 5 fields" in found[1].message


def test_bad_every_and_at_and_schedule_count(tmp_path: Path) -> None:
    text = """
    channels:
      console: {enabled: true}
    scheduler:
      timezone: Mars/Olympus
      jobs:
        - id: a
          every: 10 minutes
          prompt: hi
          deliver_to: {channel: console, chat: me}
        - id: b
          at: next tuesday
          prompt: hi
          deliver_to: {channel: console, chat: me}
        - id: c
          every: 1h
          cron: "* * * * *"
          prompt: hi
          deliver_to: {channel: console, chat: me}
    """
    found = {p.path: p for p in problems(tmp_path, text)}
    assert found["scheduler.timezone"].line == 4
    assert "unknown time zone" in found["scheduler.timezone"].message
    every = found["scheduler.jobs[0].every"]
    assert every.line == 7
    assert every.message == "expected an interval like 10m, 2h, 30s or 1d, got '10 minutes'"
    at = found["scheduler.jobs[1].at"]
    assert at.line == 11
    assert "expected an ISO datetime" in at.message
    both = found["scheduler.jobs[2]"]
    assert both.line == 14
    assert "exactly one of cron, every or at (got cron, every)" in both.message


def test_heartbeat_jobs_are_checked_with_key_and_line(tmp_path: Path) -> None:
    text = """
    channels:
      console: {enabled: true}
    scheduler:
      jobs:
        - id: a
          every: 30m
          prompt: check
          heartbeat: sometimes
          deliver_to: {channel: console, chat: me}
        - id: b
          every: 30m
          prompt: check
          heartbeat:
            ack_max_chars: -1
          deliver_to: {channel: console, chat: me}
        - id: c
          every: 30m
          prompt: check
          heartbeat: {ack_chars: 10}
          deliver_to: {channel: console, chat: me}
    """
    found = {p.path: p for p in problems(tmp_path, text)}
    switch = found["scheduler.jobs[0].heartbeat"]
    assert switch.line == 8
    assert switch.message == (
        "expected true, false or a mapping with ack_max_chars, got 'sometimes'"
    )
    bound = found["scheduler.jobs[1].heartbeat.ack_max_chars"]
    assert (bound.line, bound.message) == (14, "must be at least 0, got -1")
    unknown = found["scheduler.jobs[2].heartbeat.ack_chars"]
    assert unknown.line == 19 and "ack_max_chars" in unknown.message  # did you mean


def test_heartbeat_switch_takes_the_defaults(tmp_path: Path) -> None:
    text = """
    channels:
      console: {enabled: true}
    scheduler:
      jobs:
        - {id: a, every: 1h, prompt: p, heartbeat: true, deliver_to: {channel: console, chat: me}}
        - {id: b, every: 1h, prompt: p, heartbeat: false, deliver_to: {channel: console, chat: me}}
    """
    config = load_config(write(tmp_path, text), {})
    quiet, plain = wiring.scheduler_jobs(config)
    assert quiet.heartbeat == 300 and plain.heartbeat is None


def test_cross_section_checks(tmp_path: Path) -> None:
    text = """
    channels:
      console: {enabled: true}
    scheduler:
      jobs:
        - id: a
          every: 1h
          prompt: hi
          deliver_to: {channel: slack, chat: C1}
        - id: a
          every: 2h
          prompt: hi
          deliver_to: {channel: console, chat: me}
    """
    found = problems(tmp_path, text)
    assert [(p.path, p.line, p.message) for p in found] == [
        ("scheduler.jobs[0].deliver_to.channel", 8, "channel 'slack' is not configured"),
        ("scheduler.jobs[1].id", 9, "job id 'a' is used twice (first on line 5)"),
    ]


def test_every_error_listed_at_once(tmp_path: Path) -> None:
    text = """
    stat_dir: ./var
    model:
      provider: scripted
      max_tokens: lots
    agent:
      reset:
        mode: weekly
    channels:
      telegram:
        token: ${TG}
        delivery: live
    logging:
      level: LOUD
    """
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, {})
    lines = str(caught.value).splitlines()
    assert lines == [
        f"{path}:1: stat_dir: unknown key 'stat_dir'; did you mean 'state_dir'?",
        f"{path}:4: model.max_tokens: expected a whole number, got 'lots'",
        f"{path}:7: agent.reset.mode: expected 'off', 'idle' or 'daily', got 'weekly'",
        f"{path}:10: channels.telegram.token: environment variable TG is not set "
        "(set it, or write ${TG:-default})",
        f"{path}:11: channels.telegram.delivery: expected 'blocks', 'edit', 'final' or "
        "'stream', got 'live'",
        f"{path}:13: logging.level: expected 'DEBUG', 'INFO', 'WARNING' or 'ERROR', got 'LOUD'",
    ]


def test_yaml_syntax_error_has_line_and_no_snippet(tmp_path: Path) -> None:
    text = "model:\n  api_key: sk-very-secret\n  name: [unclosed\n"
    problem = only(problems(tmp_path, text))
    assert problem.line is not None
    assert problem.message.startswith("not valid YAML")
    assert "sk-very-secret" not in problem.message


def test_unreadable_and_non_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml", {})
    assert "must be a mapping" in only(problems(tmp_path, "- a\n- b\n")).message


# ---------------------------------------------------------------- secrets


def test_secret_values_never_appear_in_errors(tmp_path: Path) -> None:
    secret = "s3cr3t-value-1234"
    text = """
    model:
      provider: anthropic
      api_key: ${KEY}
      max_tokens: ${KEY}
    channels:
      slack:
        bot_token: ["${KEY}"]
        app_token: 12345
        mode: ${KEY}
      telegram:
        token: ${KEY}
        allow_from: {a: 1}
    scheduler:
      jobs:
        - id: j
          every: ${KEY}
          prompt: p
          deliver_to: {channel: telegram, chat: "1"}
    """
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, {"KEY": secret})
    rendered = str(caught.value)
    assert secret not in rendered
    assert "12345" not in rendered
    assert "got the value of ${KEY}" in rendered
    assert len(caught.value.problems) >= 5


# ---------------------------------------------------------------- the example and defaults


def test_the_reference_validates_and_starts_nothing_but_its_channels() -> None:
    config = load_config(REFERENCE, REFERENCE_ENV)
    assert config.channels.enabled() == ["telegram", "slack", "discord"]
    assert config.model.api_key == "sk-ant-example"
    # Copied whole it posts nowhere on its own, starts no server and asks no other model.
    assert config.scheduler.jobs == []
    assert config.agent.mcp_servers == {}
    assert config.model.fallbacks == []
    assert config.agent.message_targets == []
    assert all(
        not section.groups
        for section in config.channels.sections().values()
        if hasattr(section, "groups")
    )


def test_the_references_examples_validate(tmp_path: Path) -> None:
    config = load_config(switched_on(tmp_path), EXAMPLES_ENV)
    assert len(config.scheduler.jobs) == 4
    assert config.scheduler.jobs[2].at == datetime(2026, 12, 1, 10, 0)
    heartbeat = config.scheduler.jobs[3].heartbeat
    assert heartbeat is not None and heartbeat.ack_max_chars == 300
    assert set(config.agent.mcp_servers) == {"files", "search"}
    assert config.model.fallbacks[0].base_url == "http://localhost:11434/v1"
    assert config.media.transcription is not None
    assert config.agent.block_streaming.coalesce is not None


def test_the_reference_shows_every_key() -> None:
    """Every key of every section, with the examples switched on (the lists' keys are in
    their examples)."""
    import yaml

    example = yaml.safe_load(with_examples(REFERENCE.read_text(encoding="utf-8")))

    def missing(model: type, data: object, where: str) -> list[str]:
        from pydantic import BaseModel

        from botd.config.problems import unwrap_model

        out = []
        assert isinstance(data, dict), where
        if model is ChannelsSection:  # one section per registered channel, by its own model
            fields = {
                name: entry.section
                for name, entry in registered_channels().items()
                if name != WEB_CHANNEL  # web.enabled's own, never written under channels
            }
        else:
            fields = {
                field.alias or name: unwrap_model(field.annotation)
                for name, field in model.model_fields.items()  # type: ignore[attr-defined]
            }
        for key, inner in fields.items():
            if key not in data:
                out.append(f"{where}{key}")
                continue
            value = data[key]
            if isinstance(value, list):  # a list of mappings: keys shown across its items
                items = [item for item in reversed(value) if isinstance(item, dict)]
                value = {k: v for item in items for k, v in item.items()}
            elif isinstance(value, dict) and key in ("groups", "topics"):  # by id
                value = next(iter(value.values()), None)
            elif isinstance(value, dict) and key in ("mcp_servers", "acp_agents"):  # by name
                value = {k: v for item in value.values() for k, v in item.items()}
            if inner is not None and isinstance(value, dict) and issubclass(inner, BaseModel):
                out.extend(missing(inner, value, f"{where}{key}."))
        return out

    assert missing(BotdConfig, example, "") == []


# Keys the reference sets to other than their default, each saying its default in a comment:
# the scripted provider would give canned replies on real channels.
NOT_DEFAULT = {
    "model.provider",
    "model.name",
    "model.api_key",
    "agent.system_prompt",
    "channels.slack.app_token",
    "store.node_id",  # its default is the host name
}


def test_the_reference_shows_each_key_with_its_default() -> None:
    import yaml
    from pydantic import BaseModel

    text = REFERENCE.read_text(encoding="utf-8")
    written = yaml.safe_load(text)
    config = parse_config(text, REFERENCE_ENV)  # no file: state_dir stays as written

    def differing(model: BaseModel, data: dict[str, object], where: str) -> list[str]:
        out = []
        fields = type(model).model_fields
        if isinstance(model, ChannelsSection):
            for name, section in model.sections().items():
                inner = data[name]
                assert isinstance(inner, dict)
                out.extend(differing(section, inner, f"{where}{name}."))
            return out
        for name, field in fields.items():
            key = field.alias or name
            if key not in data or field.is_required():
                continue
            value = getattr(model, name)
            if isinstance(value, BaseModel) and isinstance(data[key], dict):
                out.extend(differing(value, data[key], f"{where}{key}."))  # type: ignore[arg-type]
            elif value != field.get_default(call_default_factory=True):
                out.append(f"{where}{key}")
        return out

    assert set(differing(config, written, "")) == NOT_DEFAULT


def test_the_example_is_one_platform_and_nothing_else() -> None:
    env = {"ANTHROPIC_API_KEY": "sk-ant-x", "TELEGRAM_TOKEN": "1:x"}
    config = load_config(EXAMPLE, env)
    assert config.channels.enabled() == ["telegram"]
    assert config.model.provider == "anthropic" and config.model.fallbacks == []
    assert config.model.base_url == "https://api.anthropic.com"
    assert config.scheduler.jobs == [] and config.agent.mcp_servers == {}
    assert config.agent.message_targets == []
    assert config.state_dir == ROOT / "var"  # next to the file, wherever botd runs from
    # Its URLs come from the environment, so a test (or a proxy) points it elsewhere.
    moved = load_config(
        EXAMPLE,
        {**env, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "TELEGRAM_API_BASE_URL": "http://x"},
    )
    assert moved.model.base_url == "http://127.0.0.1:9"
    telegram = moved.channels.section("telegram")
    assert telegram is not None and getattr(telegram, "api_base_url", None) == "http://x"


def test_empty_file_is_all_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""), {})
    assert config == BotdConfig(state_dir=tmp_path / "var")  # ./var, next to the file
    assert config.channels.enabled() == []
    assert parse_config("", {}) == BotdConfig()  # text without a file: ./var as it is
    assert BotdConfig().state_dir == Path("./var")


def test_default_config() -> None:
    scripted = default_config({})
    assert scripted.model.provider == "scripted"
    assert scripted.channels.enabled() == ["console"]
    assert scripted.state_dir == Path("./var")
    anthropic = default_config({"ANTHROPIC_API_KEY": "sk-x"})
    assert anthropic.model.provider == "anthropic"
    assert wiring.provider_settings(anthropic)["api_key"] == "sk-x"


# ---------------------------------------------------------------- runtime helpers


def test_runtime_helpers(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        model:
          provider: openai
          name: gpt-test
          thinking: 2048
        agent:
          system_prompt: be brief
          queue_mode: steer
          record_events: true
          reset: {mode: idle, idle_minutes: 30}
          block_streaming:
            break: message_end
            min_chars: 10
            max_chars: 20
            enabled: true
        channels:
          telegram:
            token: t
            dm_policy: allowlist
            allow_from: [12345]
            groups:
              -100200: {require_mention: false, allow_from: [7]}
            delivery: edit
          slack:
            bot_token: b
            mode: http
            signing_secret: s
            reply_to_mode: off
        """,
    )
    config = load_config(path, {})
    loop = wiring.loop_config(config)
    assert (loop.model, loop.system, loop.thinking_budget) == ("gpt-test", "be brief", 2048)
    subscriber = wiring.subscriber_config(config)
    assert subscriber.block_break == "message_end"
    assert subscriber.chunking is not None and subscriber.chunking.max_chars == 20
    settings = wiring.session_settings(config, tmp_path)
    assert settings.queue_mode == "steer"
    assert settings.reset.mode == "idle" and settings.reset.idle_minutes == 30
    assert settings.record_events_dir == tmp_path / "events"
    policies = wiring.access_policies(config)
    telegram = policies["telegram"]
    assert telegram.dm_policy == "allowlist"
    assert telegram.allow_from == frozenset({"12345"})
    rule = telegram.group_rule("-100200")
    assert rule is not None and not rule.require_mention and rule.allow_from == {"7"}
    assert wiring.delivery_modes(config) == {"telegram": "edit", "slack": "blocks"}
    assert config.channels.slack is not None and config.channels.slack.reply_to_mode == "off"
    assert wiring.provider_settings(config)["base_url"] == "https://api.openai.com/v1"


def test_scheduler_jobs(tmp_path: Path) -> None:
    config = load_config(switched_on(tmp_path), EXAMPLES_ENV)
    standup, inbox, launch, watch = wiring.scheduler_jobs(config)
    assert standup.id == "weekday-standup" and standup.cron == "0 9 * * 1-5"
    assert standup.timezone == "Europe/Berlin"
    assert standup.target.channel == "telegram" and standup.target.chat_id == "-1001234567890"
    assert inbox.every == 7200.0 and inbox.target.chat_id == "C0123456789"
    assert launch.at == datetime(2026, 12, 1, 10, 0) and launch.cron is None
    assert watch.heartbeat == 300 and standup.heartbeat is None


def test_chunking_disabled_and_min_above_max(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "agent:\n  block_streaming: {enabled: false}\n"), {})
    assert wiring.subscriber_config(config).chunking is None
    problem = only(
        problems(tmp_path, "agent:\n  block_streaming:\n    min_chars: 50\n    max_chars: 10\n")
    )
    assert problem.path == "agent.block_streaming" and problem.line == 2
    assert "min_chars (50) is above max_chars (10)" in problem.message


# ---------------------------------------------------------------- standard cron


def test_sunday_zero_fires_on_sunday() -> None:
    # The day-of-week table itself is tested with the scheduler, whose parser config uses.
    berlin = ZoneInfo("Europe/Berlin")
    trigger = cron_trigger("0 9 * * 0", "Europe/Berlin")
    start = datetime(2026, 11, 18, 12, 0, tzinfo=berlin)  # a Wednesday
    fire = trigger.get_next_fire_time(None, start)
    assert fire == datetime(2026, 11, 22, 9, 0, tzinfo=berlin)
    assert fire.strftime("%A") == "Sunday"


def test_parse_every() -> None:
    assert parse_every("30s").total_seconds() == 30
    assert parse_every("10m").total_seconds() == 600
    assert parse_every("1h30m").total_seconds() == 5400
    assert parse_every("1d").days == 1
    for bad in ("", "10", "m", "10 minutes", "0m", "-5m"):
        with pytest.raises(ValueError):
            parse_every(bad)


# ---------------------------------------------------------------- botd check


def run_check(path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "botd", "check", "--config", str(path)],
        capture_output=True,
        text=True,
        env=bare_env(**env),
        cwd=ROOT,
        timeout=60,
    )


def test_check_ok() -> None:
    result = run_check(REFERENCE, REFERENCE_ENV)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("config OK: channels: telegram, slack, discord;")
    assert "provider: anthropic" in result.stdout
    assert "0 scheduled jobs" in result.stdout
    assert "sk-ant-example" not in result.stdout
    assert result.stderr == ""  # no placeholder left in: nothing to warn about


def test_check_reports_every_problem(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        modle: {}
        channels:
          telegram:
            token: ${NOPE_TOKEN}
        scheduler:
          jobs:
            - id: x
              cron: "61 * * * *"
              prompt: p
              deliver_to: {channel: telegram, chat: "1"}
        """,
    )
    result = run_check(path, {})
    assert result.returncode == 2
    assert result.stdout == ""
    assert f"{path}:1: modle: unknown key 'modle'; did you mean 'model'?" in result.stderr
    assert f"{path}:4: channels.telegram.token: environment variable NOPE_TOKEN" in (result.stderr)
    assert f"{path}:8: scheduler.jobs[0].cron:" in result.stderr
    assert "3 problems" in result.stderr


def test_agent_tools_default_to_the_builtins_and_unknown_names_are_refused(tmp_path: Path) -> None:
    assert default_config({}).agent.tools == ["message", "schedule"]
    problem = only(problems(tmp_path, "agent:\n  tools: [message, shedule]\n"))
    assert (problem.path, problem.line) == ("agent.tools[1]", 2)
    assert "'shedule'" in problem.message


def test_a_fallback_that_repeats_a_model_on_the_same_server_is_refused(tmp_path: Path) -> None:
    text = """
        model:
          provider: openai
          name: gpt-x
          base_url: http://gw.example/v1
          fallbacks:
            - {provider: openai, name: gpt-y, base_url: http://gw.example/v1}
            - {provider: openai, name: gpt-x, base_url: http://other.example/v1}
            - {provider: openai, name: gpt-y, base_url: http://gw.example/v1}
        """
    problem = only(problems(tmp_path, text))
    assert problem.path == "model" and problem.line == 1
    assert "fallbacks[2] (openai gpt-y) repeats fallbacks[0]" in problem.message
    # The same model through another server is a real fallback.
    path = write(
        tmp_path,
        text.replace(
            "- {provider: openai, name: gpt-y, base_url: http://gw",
            "- {provider: openai, name: gpt-z, base_url: http://gw",
            1,
        ),
    )
    assert len(load_config(path, {}).model.fallbacks) == 3
    repeated_primary = text.replace(
        "name: gpt-y, base_url: http://gw.example/v1}\n",
        "name: gpt-x, base_url: http://gw.example/v1}\n",
        1,
    )
    assert "repeats the primary model" in only(problems(tmp_path, repeated_primary)).message


def test_run_keeps_a_relative_state_dir_next_to_its_config(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    config = conf / "botd.yaml"
    config.write_text(
        "state_dir: ./var\nhealth: {enabled: false}\nchannels:\n  console: {enabled: true}\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The console ends at the end of its input (stdin is /dev/null): botd starts and stops.
    result = run_botd("run", "--config", str(config), cwd=elsewhere, env=bare_env())
    assert result.returncode == 0, result.stderr
    assert (conf / "var" / "botd.sqlite3").exists()
    assert not (elsewhere / "var").exists()


def test_a_group_sets_its_own_delivery_by_its_id(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        channels:
          telegram:
            token: t
            delivery: blocks
            groups:
              -100200: {delivery: edit}
              -100300: {require_mention: false}
        """,
    )
    config = load_config(path, {})
    assert wiring.delivery_modes(config)["telegram"] == "blocks"
    assert wiring.group_delivery_modes(config)["telegram"] == {"-100200": "edit"}


def test_delivery_for_every_group_is_refused_in_one_line(tmp_path: Path) -> None:
    text = """
    channels:
      telegram:
        token: t
        groups:
          "*": {delivery: stream}
    """
    (problem,) = problems(tmp_path, text)
    assert (problem.path, problem.line) == ("channels.telegram.groups", 4)  # its groups key
    assert 'delivery cannot be set for "*"' in problem.message
    assert "by its id" in problem.message
