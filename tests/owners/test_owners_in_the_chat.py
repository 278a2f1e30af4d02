"""Owners over the real python-telegram-bot and the loopback Bot API, in one daemon: an
owner-only command refused for a member and done for an owner (listed, or a chat admin by
``getChatAdministrators``), ``/whoami`` for each, and a pairing approved in the chat by an
owner and by ``botd pairing approve`` (another process) while the daemon runs: the user is
told they can talk now and what they wrote while waiting is answered."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from botd.owners import OWNERS_ONLY, YOU_CAN_TALK
from tests.fakes.telegram_api import FakeTelegramAPI, user
from tests.support.chat import Chat, chatting
from tests.support.daemon_process import bare_env, run_botd
from tests.support.waiting import until

GROUP = -1001
MEMBER, OWNER, ADMIN = 4242, 501, 601
ROOT = Path(__file__).resolve().parents[2]


def said_by(telegram: FakeTelegramAPI, who: int, text: str) -> None:
    telegram.push_text(GROUP, text, sender=user(who))


async def code_given(stranger: Chat) -> str:
    line = await stranger.reply()
    found = re.search(r"pairing code (\w+)", line)
    assert found is not None, line
    return found.group(1)


async def test_owners_in_a_group_and_pairing_approved_in_the_chat_and_by_the_cli(
    tmp_path: Path, telegram: FakeTelegramAPI
) -> None:
    telegram.chat_admins[GROUP] = [700, ADMIN]
    options = (
        "dm_policy: pairing",
        "group_policy: open",
        f"owners: ['{OWNER}']",
        "admins_are_owners: true",
        "commands: {owner_only: [/model, /usage, /new]}",
    )
    async with chatting(tmp_path, telegram, telegram_options=options) as dm:
        group = Chat(dm.daemon, telegram, GROUP)
        # Owners approve pairing codes here: the menu lists /pair.
        await until(lambda: "pair" in [c["command"] for c in telegram.my_commands], "/pair")

        said_by(telegram, MEMBER, "/model")
        assert await group.reply() == OWNERS_ONLY
        said_by(telegram, MEMBER, "/new tell me a joke")  # not started over, not answered
        assert await group.reply() == OWNERS_ONLY
        assert group.unread() == []
        said_by(telegram, OWNER, "/model")
        assert "model" in (answer := await group.reply()) and answer != OWNERS_ONLY
        said_by(telegram, ADMIN, "/usage")
        assert await group.reply() != OWNERS_ONLY
        assert telegram.calls_to("getChatAdministrators")  # asked of Telegram

        said_by(telegram, MEMBER, "/whoami")
        assert "owner" not in await group.reply()
        said_by(telegram, OWNER, "/whoami")
        assert "You are an owner of this bot (listed in owners)." in await group.reply()
        said_by(telegram, ADMIN, "/whoami")
        assert "You are an owner of this bot (an admin here" in await group.reply()

        # A stranger's DM: a code, and what they write meanwhile is kept.
        stranger = Chat(dm.daemon, telegram, 888)
        telegram.push_text(888, "what is 2+2?")
        code = await code_given(stranger)
        telegram.push_text(888, "and 3+3?")
        said_by(telegram, MEMBER, f"/pair {code}")
        assert await group.reply() == OWNERS_ONLY  # a member cannot approve
        said_by(telegram, OWNER, f"/pair {code}")
        assert await group.reply() == "Approved: user 888 can talk to me now."
        assert (await stranger.reply()).startswith(YOU_CAN_TALK)
        await until(
            lambda: (
                any("2+2" in t for t in stranger.unread())
                and any("3+3" in t for t in stranger.unread())
            ),
            "both waiting messages answered",
        )

        # The same approved from the admin's shell, while the daemon runs.
        other = Chat(dm.daemon, telegram, 889)
        telegram.push_text(889, "hello there")
        code = await code_given(other)
        state = str(tmp_path / "state")
        done = await asyncio.to_thread(
            run_botd,
            "pairing",
            "approve",
            "telegram",
            code,
            "--state-dir",
            state,
            cwd=ROOT,
            env=bare_env(),
        )
        assert done.returncode == 0, done.stderr
        assert (await other.reply()).startswith(YOU_CAN_TALK)
        assert "hello there" in await other.reply()
