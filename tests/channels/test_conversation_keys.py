"""Each platform spells its conversation keys with one function, registered on its spec: the
instance named after its platform spells exactly the keys botd always stored (nothing stored
moves), a channel of another name spells keys of its own."""

from __future__ import annotations

import pytest

from botd.channels.registry import channel_specs
from botd.chat import ConversationKeyOf


def key_of(platform: str) -> ConversationKeyOf:
    spelled = channel_specs()[platform].conversation_key
    assert spelled is not None, f"{platform} registers no conversation-key function"
    return spelled


@pytest.mark.parametrize(
    ("platform", "chat", "thread", "dm_user", "stored"),
    [
        ("telegram", "777", None, None, "telegram:777"),
        ("telegram", "-1001234567890", None, None, "telegram:-1001234567890"),
        ("telegram", "-1001234567890", "1", None, "telegram:-1001234567890:topic:1"),
        ("slack", "C0ABC", None, None, "slack:C0ABC"),
        ("slack", "D0ABC", None, None, "slack:D0ABC"),
        ("slack", "C0ABC", "1700000000.000100", None, "slack:C0ABC:thread:1700000000.000100"),
        ("discord", "111", None, "42", "discord:dm:42"),
        ("discord", "111", None, None, "discord:111"),
        ("discord", "111", "222", None, "discord:222"),
        ("console", "local", None, None, "console:local"),
    ],
)
def test_the_instance_named_after_its_platform_spells_the_stored_keys(
    platform: str, chat: str, thread: str | None, dm_user: str | None, stored: str
) -> None:
    assert key_of(platform)(platform, chat, thread, dm_user=dm_user) == stored


@pytest.mark.parametrize(
    ("platform", "chat", "thread", "dm_user", "own"),
    [
        ("telegram", "-100123", None, None, "support:-100123"),
        ("telegram", "-100123", "7", None, "support:-100123:topic:7"),
        ("slack", "C0ABC", "1700000000.000100", None, "support:C0ABC:thread:1700000000.000100"),
        ("discord", "111", None, "42", "support:dm:42"),
        ("discord", "111", "222", None, "support:222"),
        ("console", "local", None, None, "support:local"),
    ],
)
def test_another_instance_spells_keys_of_its_own(
    platform: str, chat: str, thread: str | None, dm_user: str | None, own: str
) -> None:
    spelled = key_of(platform)
    assert spelled("support", chat, thread, dm_user=dm_user) == own
    assert spelled(platform, chat, thread, dm_user=dm_user) != own
