"""The channel registry: botd's own channels and entry points, section validation, missing
extras, plugins, accounts."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

import pytest

from botd import wiring
from botd.channels.acp.spec import SPEC as ACP
from botd.channels.base import InboundSink, SendScope
from botd.channels.console.spec import SPEC as CONSOLE
from botd.channels.discord.spec import SPEC as DISCORD
from botd.channels.registry import (
    ChannelContext,
    ChannelSpec,
    ChannelUnavailable,
    channel_instances,
    channel_specs,
    load_channel_specs,
)
from botd.channels.slack.spec import SPEC as SLACK
from botd.channels.telegram.spec import SPEC as TELEGRAM
from botd.channels.web.spec import SPEC as WEB
from botd.chat import Capabilities, ChannelId, MessageRef, Target
from botd.cli import main
from botd.config import ChatChannelSection, ConfigError, parse_config, registered_channels
from botd.config.channels import registrations
from botd.runtime import build_runtime
from botd.store.sqlite import SqliteStore
from botd.text.markup import PLAIN

ROOT = Path(__file__).resolve().parents[2]
BUILTINS = {
    "telegram": TELEGRAM,
    "slack": SLACK,
    "discord": DISCORD,
    "console": CONSOLE,
    "acp": ACP,
    "web": WEB,
}


# ---------------------------------------------------------------- a plugin channel


class RoomSection(ChatChannelSection):
    """A plugin's section: the access settings of every chat channel, and its own key."""

    room: str


class RoomAdapter:
    name = "room"
    capabilities = Capabilities(text_limit=1000, markup=PLAIN, can_edit=False)

    def __init__(self, room: str, account_id: str) -> None:
        self.room = room
        self.account_id = account_id

    async def start(self, sink: InboundSink) -> None: ...

    async def stop_inbound(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        return [MessageRef(target, "1")]

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> None: ...

    async def react(self, ref: MessageRef, emoji: str) -> None: ...

    async def typing(self, target: Target) -> None: ...


def _room(section: RoomSection, context: ChannelContext) -> RoomAdapter:
    return RoomAdapter(section.room, section.account)


ROOM = ChannelSpec(name="room", section=RoomSection, factory=_room)
ROOM_WITHOUT_SDK = ChannelSpec(
    name="room",
    section=RoomSection,
    factory=_room,
    requirement="botd-room",
    modules=("botd_room_sdk_that_is_not_installed",),
)


def channels(**extra: ChannelSpec[Any]) -> dict[str, ChannelSpec[Any]]:
    return {**BUILTINS, **extra}


# ---------------------------------------------------------------- registration


def test_botds_own_channels_are_found_in_their_packages() -> None:
    own = [(r.name, r.value) for r in registrations() if r.builtin]
    assert own == [(name, f"botd.channels.{name}.spec:SPEC") for name in sorted(BUILTINS)]
    loaded = load_channel_specs()
    assert all(loaded[name] is spec for name, spec in BUILTINS.items())
    assert all(channel_specs()[name] is spec for name, spec in BUILTINS.items())
    assert set(BUILTINS) <= set(registered_channels())


def test_an_entry_point_named_like_a_builtin_is_not_loaded(tmp_path: Path) -> None:
    """botd's own entry in an install's metadata older than the code (a module that is gone)
    is passed over quietly; another distribution's does not replace the built-in."""
    dist = tmp_path / "shadow-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: shadow\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[botd.channels]\ntelegram = botd.channels.builtin:TELEGRAM\nslack = shadow_slack:SPEC\n"
    )
    code = textwrap.dedent(
        """
        import logging, sys
        shown = "%(levelname)s %(message)s"
        logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format=shown)
        from botd.channels.registry import load_channel_specs
        from botd.channels.slack.spec import SPEC as SLACK
        from botd.channels.telegram.spec import SPEC as TELEGRAM
        from botd.config import registered_channels
        specs = load_channel_specs()
        print(specs["telegram"] is TELEGRAM, specs["slack"] is SLACK)
        print(registered_channels()["telegram"] is TELEGRAM)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-2:] == ["True True", "True"]
    assert (
        "DEBUG channel plugin telegram (botd.channels.builtin:TELEGRAM) is not loaded: "
        "telegram is one of botd's own channels"
    ) in lines
    assert (
        "WARNING channel plugin slack (shadow_slack:SPEC) is not loaded: "
        "slack is one of botd's own channels"
    ) in lines
    assert "cannot be loaded" not in result.stdout + result.stderr


def test_builtin_specs_name_their_extras_and_are_installed_here() -> None:
    assert TELEGRAM.requirement == "botd[telegram]"
    assert SLACK.requirement == "botd[slack]"
    assert DISCORD.requirement == "botd[discord]"
    assert CONSOLE.requirement is None and CONSOLE.modules == ()
    assert all(spec.missing() is None for spec in BUILTINS.values())


def test_config_and_check_load_no_runtime() -> None:
    heavy = [
        "botd.conversation",
        "botd.inbound.router",
        "botd.delivery",
        "botd.agent.loop",
        "botd.scheduler",
        "botd.wiring",
        "sqlalchemy",
        "aiohttp",
        "telegram",
        "slack_bolt",
        "slack_sdk",
        "discord",
        "anthropic",
    ]
    code = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        import botd.config
        after_import = [m for m in {heavy!r} if m in sys.modules]
        others = [
            m for m in sys.modules
            if m.startswith("botd.") and not m.startswith("botd.config")
            and m != "botd._version"  # botd's version, read by ``import botd`` itself
        ]
        assert not others, others  # the config package imports nothing else of botd
        botd.config.load_config(
            Path("config.example.yaml"),
            {{"ANTHROPIC_API_KEY": "k", "TELEGRAM_TOKEN": "t", "SLACK_BOT_TOKEN": "b",
              "SLACK_APP_TOKEN": "a", "DISCORD_TOKEN": "d"}},
        )
        after_load = [m for m in {heavy!r} if m in sys.modules]
        print(after_import, after_load)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[] []"


# ---------------------------------------------------------------- validation by the registry


def test_an_unknown_channel_is_an_error_with_did_you_mean() -> None:
    """A section not named after a platform must name its platform (``platform:``): a
    misspelt platform's name is told as that missing key, with the name it resembles."""
    text = "channels:\n  console: {enabled: true}\n  telgram:\n    token: t\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, {}, "botd.yaml")
    [problem] = caught.value.problems
    assert (problem.path, problem.line) == ("channels.telgram.platform", 3)
    assert problem.message == (
        "required key is missing: 'telgram' is no platform's name (did you mean 'telegram'?), "
        "so the section says which platform it runs on (one of acp, console, discord, slack, "
        "telegram)"
    )
    with pytest.raises(ConfigError) as caught:
        parse_config("channels:\n  matrix: {}\n", {}, "botd.yaml")
    [problem] = caught.value.problems
    assert (problem.path, problem.line) == ("channels.matrix.platform", 2)
    assert problem.message.startswith("required key is missing: 'matrix' is no platform's name,")


def test_a_job_for_an_unregistered_channel_is_an_error_with_did_you_mean() -> None:
    text = """
channels:
  console: {enabled: true}
scheduler:
  jobs:
    - id: a
      every: 1h
      prompt: hi
      deliver_to: {channel: consol, chat: me}
"""
    with pytest.raises(ConfigError) as caught:
        parse_config(text, {}, "botd.yaml")
    [problem] = caught.value.problems
    assert (problem.path, problem.line) == ("scheduler.jobs[0].deliver_to.channel", 9)
    assert problem.message == "unknown channel 'consol'; did you mean 'console'?"


def test_a_plugin_section_is_validated_by_its_own_model() -> None:
    text = """
channels:
  room:
    room: lobby
    account: work
    dm_policy: open
    delivery: final
scheduler:
  jobs:
    - {id: a, every: 1h, prompt: hi, deliver_to: {channel: room, chat: lobby}}
"""
    config = parse_config(text, {}, channels=channels(room=ROOM))
    section = config.channels.section("room")
    assert isinstance(section, RoomSection) and section.room == "lobby"
    assert config.channels.enabled() == ["room"]
    assert wiring.delivery_modes(config) == {"room": "final"}
    assert wiring.access_policies(config)["room"].dm_policy == "open"
    with pytest.raises(ConfigError) as caught:
        parse_config("channels:\n  room:\n    rooom: lobby\n", {}, channels=channels(room=ROOM))
    assert [(p.path, p.line, p.message) for p in caught.value.problems] == [
        ("channels.room.room", 2, "required key is missing"),
        ("channels.room.rooom", 3, "unknown key 'rooom'; did you mean 'room'?"),
    ]


def test_a_plugin_adapter_is_built_through_its_factory(tmp_path: Path) -> None:
    config = parse_config(
        "channels:\n  room: {room: lobby, account: work}\n", {}, channels=channels(room=ROOM)
    )
    store = SqliteStore.open(tmp_path)
    try:
        adapters = wiring.build_adapters(config, ChannelContext(store), channels(room=ROOM))
    finally:
        store.close()
    adapter = adapters["room"]
    assert isinstance(adapter, RoomAdapter)
    assert (adapter.room, adapter.account_id) == ("lobby", "work")


# ---------------------------------------------------------------- missing extras


def test_a_channel_without_its_sdk_is_one_clear_error_at_check(tmp_path: Path) -> None:
    text = "state_dir: ./var\nchannels:\n  room:\n    room: lobby\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, {}, "botd.yaml", channels=channels(room=ROOM_WITHOUT_SDK))
    [problem] = caught.value.problems
    assert (problem.path, problem.line) == ("channels.room", 3)
    assert problem.message == (
        "the room channel needs botd-room (botd_room_sdk_that_is_not_installed not installed): "
        "pip install 'botd-room'"
    )


def test_a_channel_without_its_sdk_is_refused_at_start(tmp_path: Path) -> None:
    config = parse_config("channels:\n  room: {room: lobby}\n", {}, channels=channels(room=ROOM))
    store = SqliteStore.open(tmp_path)
    try:
        with pytest.raises(ChannelUnavailable, match=r"pip install 'botd-room'"):
            wiring.build_adapters(config, ChannelContext(store), channels(room=ROOM_WITHOUT_SDK))
    finally:
        store.close()


def without(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``module`` look not installed to the registry's probe."""
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name == module else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_botd_check_and_run_name_the_missing_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    without("telegram", monkeypatch)
    path = tmp_path / "botd.yaml"
    path.write_text(f"state_dir: {tmp_path}\nchannels:\n  telegram:\n    token: t\n")
    assert main(["check", "--config", str(path)]) == 2
    expected = (
        f"{path}:3: channels.telegram: the telegram channel needs botd[telegram] "
        "(telegram not installed): pip install 'botd[telegram]'"
    )
    assert expected in capsys.readouterr().err
    assert main(["run", "--config", str(path)]) == 2
    assert expected in capsys.readouterr().err


def test_the_runtime_refuses_a_channel_without_its_sdk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = parse_config(
        f"state_dir: {tmp_path}\nchannels:\n  slack: {{bot_token: b, app_token: a}}\n", {}
    )
    without("slack_bolt", monkeypatch)
    store = SqliteStore.open(tmp_path)
    try:
        with pytest.raises(ChannelUnavailable, match=r"pip install 'botd\[slack\]'"):
            build_runtime(config, store=store)
    finally:
        store.close()


# ---------------------------------------------------------------- accounts


def test_the_account_reaches_each_platform_adapter(tmp_path: Path) -> None:
    text = """
channels:
  telegram: {token: "1:t", account: support}
  slack: {bot_token: b, app_token: a, account: support}
  discord: {token: d, account: support}
"""
    config = parse_config(text, {})
    store = SqliteStore.open(tmp_path)
    try:
        adapters = wiring.build_adapters(config, ChannelContext(store))
    finally:
        store.close()
    assert {name: getattr(a, "account_id", None) for name, a in adapters.items()} == {
        "telegram": "support",
        "slack": "support",
        "discord": "support",
    }
    default = parse_config("channels:\n  telegram: {token: '1:t'}\n", {})
    section = default.channels.section("telegram")
    assert isinstance(section, ChatChannelSection) and section.account == "default"


# ---------------------------------------------------------------- instances


def test_each_instance_is_built_by_its_platform_and_named_after_its_section(
    tmp_path: Path,
) -> None:
    """A channel of another name is its platform's adapter under its own name: its messages,
    targets, keys, offsets and leases are its own; the one named after its platform keeps
    the names it always had."""
    from botd.channels.discord.adapter import DiscordAdapter
    from botd.channels.slack.adapter import SlackAdapter
    from botd.channels.telegram.adapter import TelegramAdapter

    text = """
channels:
  telegram: {token: "1:t"}
  support: {platform: telegram, token: "2:t"}
  slack: {bot_token: b, app_token: a}
  ops: {platform: slack, bot_token: b2, app_token: a2}
  discord: {token: d}
  guild: {platform: discord, token: d2, account: other}
"""
    config = parse_config(text, {})
    store = SqliteStore.open(tmp_path)
    try:
        adapters = wiring.build_adapters(config, ChannelContext(store))
    finally:
        store.close()
    kinds = {name: type(adapter) for name, adapter in adapters.items()}
    assert kinds == {
        "telegram": TelegramAdapter,
        "support": TelegramAdapter,
        "slack": SlackAdapter,
        "ops": SlackAdapter,
        "discord": DiscordAdapter,
        "guild": DiscordAdapter,
    }
    assert {name: adapter.name for name, adapter in adapters.items()} == {
        name: name for name in kinds
    }
    telegram, support = adapters["telegram"], adapters["support"]
    assert isinstance(telegram, TelegramAdapter) and isinstance(support, TelegramAdapter)
    assert (telegram.lease_name, support.lease_name) == ("telegram:default", "support:default")
    assert channel_instances(config.channels)["guild"] == ChannelId("guild", "discord")


def test_a_plugin_factory_that_ignores_the_instance_still_builds(tmp_path: Path) -> None:
    config = parse_config(
        "channels:\n  room: {room: lobby}\n  hall: {platform: room, room: hall}\n",
        {},
        channels=channels(room=ROOM),
    )
    store = SqliteStore.open(tmp_path)
    try:
        adapters = wiring.build_adapters(config, ChannelContext(store), channels(room=ROOM))
    finally:
        store.close()
    rooms = {name: getattr(adapter, "room", None) for name, adapter in adapters.items()}
    assert rooms == {"room": "lobby", "hall": "hall"}
