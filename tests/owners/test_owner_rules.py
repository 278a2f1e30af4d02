"""The owner rules as the config gives them, the admin lookups' memory and failures, and
``/pair``'s answers: no daemon, the real config parser, a fake adapter (no network: the
lookups' platform side is covered over the fakes in ``test_owners_in_the_chat.py``)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from botd.channels.base import ChannelAdapter
from botd.channels.errors import ChannelError
from botd.chat import InboundMessage
from botd.config import ConfigError, parse_config
from botd.owners import OWNERS_ONLY, AdminLookups, OwnerDesk, OwnerRules, owner_rules
from botd.store.pairing import PairingFile


def section(*lines: str) -> OwnerRules:
    text = "channels:\n  telegram:\n    token: '1:A'\n" + "".join(f"    {x}\n" for x in lines)
    return owner_rules(parse_config(text, {}).channels.section("telegram"))


def message(sender: str, text: str, *, direct: bool = False) -> InboundMessage:
    chat = sender if direct else "-100"
    return InboundMessage(
        channel="telegram",
        chat_id=chat,
        sender_id=sender,
        text=text,
        message_id="1",
        conversation_key=f"telegram:{chat}",
        is_direct=direct,
    )


def test_without_owners_nothing_is_owner_only() -> None:
    rules = section()
    assert not rules.configured
    assert not rules.guards("/model", direct=False)


def test_model_and_usage_are_the_owners_in_groups_and_open_in_a_direct_chat() -> None:
    rules = section("owners: [501]")
    assert rules.listed == {"501"} and rules.pairing
    assert rules.guards("/model", direct=False) and rules.guards("/usage", direct=False)
    assert not rules.guards("/status", direct=False)
    assert not rules.guards("/model", direct=True)
    everywhere = section(
        "owners: [501]", "commands: {owner_only: [stop], owner_only_in: everywhere}"
    )
    assert everywhere.guards("/stop", direct=True) and not everywhere.guards("/model", direct=False)


def test_an_unknown_owner_only_command_is_named_with_its_path() -> None:
    with pytest.raises(ConfigError) as caught:
        section("owners: [501]", "commands: {owner_only: [/sudo]}")
    [problem] = caught.value.problems
    assert problem.path.startswith("channels.telegram.commands.owner_only")
    assert "'/sudo' is not one of botd's chat commands" in problem.message


class Admins:
    """An adapter's ``ChatAdmins`` side: 601 is an admin; ``failing`` makes lookups fail."""

    def __init__(self) -> None:
        self.asked = 0
        self.failing = False

    async def is_chat_admin(self, chat_id: str, user_id: str) -> bool:
        self.asked += 1
        if self.failing:
            raise ChannelError("Telegram getChatAdministrators: Forbidden: bot was kicked")
        return user_id == "601"


async def test_lookups_are_remembered_and_a_failure_is_not_an_owner(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    adapter = Admins()
    adapters: dict[str, ChannelAdapter] = {"telegram": adapter}  # type: ignore[dict-item]
    lookups = AdminLookups(adapters, ttl=300, failed_ttl=30, clock=lambda: now[0])
    assert await lookups.is_admin("telegram", "-100", "601")
    assert await lookups.is_admin("telegram", "-100", "601")
    assert adapter.asked == 1  # remembered
    adapter.failing = True
    now[0] = 301.0
    with caplog.at_level(logging.WARNING, logger="botd.owners.admins"):
        assert not await lookups.is_admin("telegram", "-100", "601")
    assert "bot was kicked" in caplog.text and "not an owner" in caplog.text
    assert not await lookups.is_admin("telegram", "-100", "601")
    assert adapter.asked == 2  # a failure is remembered for a while too
    adapter.failing = False
    now[0] = 332.0
    assert await lookups.is_admin("telegram", "-100", "601")
    assert not await lookups.is_admin("slack", "C1", "601")  # no such adapter: not an owner


async def test_pair_answers(tmp_path: Path) -> None:
    pairing = PairingFile(tmp_path / "pairing.json")
    approved: list[bool] = []
    rules = {"telegram": section("owners: [501]"), "open": section("dm_policy: open")}
    desk = OwnerDesk(
        lambda channel: rules.get(channel, OwnerRules()),
        AdminLookups({}),
        pairing,
        approved=lambda: approved.append(True),
    )
    code, _ = await pairing.issue("telegram", "888")
    assert await desk.refusal("/pair", message("4242", f"/pair {code}")) == OWNERS_ONLY
    assert await desk.refusal("/pair", message("501", f"/pair {code}")) is None
    assert await desk.pair(message("501", "/pair"), "") == (
        "Usage: /pair <code>, the code a new user was given."
    )
    assert await desk.pair(message("501", "/pair NOPE2345"), "NOPE2345") == (
        "No pairing code NOPE2345 is waiting here (a code is good for an hour)."
    )
    assert approved == []
    answer = await desk.pair(message("501", ""), code.lower())
    assert answer == "Approved: user 888 can talk to me now." and approved == [True]
    assert pairing.is_approved("telegram", "888")
    elsewhere = InboundMessage(
        channel="open",
        chat_id="-1",
        sender_id="501",
        text="/pair X",
        message_id="2",
        conversation_key="open:-1",
    )
    assert (await desk.pair(elsewhere, "X")).startswith("This channel does not pair new users")
