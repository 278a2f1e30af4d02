"""``proxy:`` on a channel section and on ``model``: the forms it takes, the ones it refuses
(named with their key and line, never echoing a password), its password a secret."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from botd.config import ConfigError, load_config
from botd.config.proxy import shown
from botd.config.schema import ChatChannelSection
from botd.config.secrets import secret_values
from botd.ops.logging import add_secrets, mask_secrets
from botd.wiring import fallback_settings, provider_settings

PASSWORD = "Hq4vTz8mWk2p"
ENV = {"T": "1:a", "S_BOT": "xoxb-1", "S_APP": "xapp-1", "D": "d-token", "PROXY_PASS": PASSWORD}


def _load(tmp_path: Path, proxy: str, model_proxy: str = "direct") -> dict[str, str | None]:
    path = tmp_path / "botd.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            model:
              proxy: {model_proxy}
            channels:
              telegram: {{token: "${{T}}", proxy: {proxy}}}
              slack: {{bot_token: "${{S_BOT}}", app_token: "${{S_APP}}", proxy: {proxy}}}
              discord: {{token: "${{D}}", proxy: {proxy}}}
              support: {{platform: telegram, token: "${{T}}"}}
            """
        ),
        encoding="utf-8",
    )
    config = load_config(path, ENV)
    sections = config.channels.sections()
    found = {
        name: section.proxy
        for name, section in sections.items()
        if isinstance(section, ChatChannelSection)
    }
    return {**found, "model": config.model.proxy}


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("http://127.0.0.1:3128", "http://127.0.0.1:3128"),
        ("HTTPS://proxy.example:8443/", "https://proxy.example:8443"),
        ("socks5://127.0.0.1:1080", "socks5://127.0.0.1:1080"),
        (
            "socks5h://bob:${PROXY_PASS}@proxy.example:1080",
            f"socks5h://bob:{PASSWORD}@proxy.example:1080",
        ),
        ("direct", "direct"),
        ("none", "direct"),
    ],
)
def test_each_form_is_taken_on_every_platform_and_the_model(
    tmp_path: Path, given: str, kept: str
) -> None:
    found = _load(tmp_path, f'"{given}"', model_proxy=f'"{given}"')
    assert found == {
        "telegram": kept,
        "slack": kept,
        "discord": kept,
        "support": None,  # unset: the environment's
        "model": kept,
    }


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("ftp://127.0.0.1:21", "takes an http://, https://, socks5:// or socks5h:// URL"),
        ("socks4://127.0.0.1:1080", "got socks4 scheme"),
        ("http://127.0.0.1", "needs the proxy's port"),
        ("http://127.0.0.1:3128/path", "no path"),
        ("http://bob@127.0.0.1:3128", "has a user but no password"),
        ("off", "takes an http://"),
    ],
)
def test_a_wrong_proxy_is_named_with_its_key_and_line(
    tmp_path: Path, given: str, said: str
) -> None:
    path = tmp_path / "botd.yaml"
    path.write_text(f'channels:\n  telegram:\n    token: "1:a"\n    proxy: "{given}"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, {})
    [problem] = caught.value.problems
    assert (problem.path, problem.line) == ("channels.telegram.proxy", 4)
    assert said in problem.message


def test_a_wrong_proxy_with_a_password_does_not_echo_it(tmp_path: Path) -> None:
    path = tmp_path / "botd.yaml"
    path.write_text('model:\n  proxy: "gopher://bob:${PROXY_PASS}@127.0.0.1:70"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, {"PROXY_PASS": PASSWORD})
    [problem] = caught.value.problems
    assert problem.path == "model.proxy"
    assert PASSWORD not in str(caught.value)


def test_the_password_is_a_secret_masked_in_lines_and_shown_as_stars(tmp_path: Path) -> None:
    url = '"http://bob:${PROXY_PASS}@127.0.0.1:3128"'
    path = tmp_path / "botd.yaml"
    path.write_text(
        f'model:\n  proxy: {url}\nchannels:\n  telegram: {{token: "1:a", proxy: {url}}}\n'
    )
    config = load_config(path, {"PROXY_PASS": PASSWORD})
    assert PASSWORD in secret_values(config)
    add_secrets(secret_values(config))
    proxy = config.model.proxy
    assert proxy is not None
    assert PASSWORD not in mask_secrets(f"connecting through {proxy}")
    assert shown(proxy) == "http://bob:***@127.0.0.1:3128"
    assert shown("socks5://127.0.0.1:1080") == "socks5://127.0.0.1:1080"


def test_the_model_s_proxy_is_handed_to_the_primary_and_every_fallback(tmp_path: Path) -> None:
    path = tmp_path / "botd.yaml"
    path.write_text(
        textwrap.dedent(
            """
            model:
              provider: openai
              name: first
              proxy: socks5h://127.0.0.1:1080
              fallbacks:
                - {provider: openai, name: second}
            """
        ),
        encoding="utf-8",
    )
    config = load_config(path, {})
    assert provider_settings(config)["proxy"] == "socks5h://127.0.0.1:1080"
    assert fallback_settings(config, 0)["proxy"] == "socks5h://127.0.0.1:1080"
    path.write_text("model: {provider: openai, name: first}\n", encoding="utf-8")
    assert "proxy" not in provider_settings(load_config(path, {}))  # unset: the environment's
