"""The Discord adapter's chat-admin lookup (``ChatAdmins``, for ``admins_are_owners``) over
the loopback fake with the real discord.py: the server's owner and a member with Manage
Server are admins of its channels; another member is not; a DM has none; a member Discord
does not know is a ``ChannelError`` in Discord's words."""

from __future__ import annotations

import asyncio

import pytest

from botd.channels.errors import ChannelError
from tests.channels.discord.harness import Sink, make_adapter
from tests.fakes.discord_api import CHANNEL_ID, DM_CHANNEL_ID, USER_ID, FakeDiscordAPI
from tests.support.waiting import HANG_GUARD

MANAGER, MEMBER = 1400000000000000009, 1400000000000000008


async def test_owner_and_managers_are_admins_of_the_server_s_channels() -> None:
    async with FakeDiscordAPI() as fake:
        fake.managers.add(MANAGER)
        fake.members.add(MEMBER)
        adapter = make_adapter(fake)
        await asyncio.wait_for(adapter.start(Sink()), HANG_GUARD)
        try:
            assert await adapter.is_chat_admin(str(CHANNEL_ID), str(USER_ID))  # the owner
            assert await adapter.is_chat_admin(str(CHANNEL_ID), str(MANAGER))
            assert not await adapter.is_chat_admin(str(CHANNEL_ID), str(MEMBER))
            assert not await adapter.is_chat_admin(str(DM_CHANNEL_ID), str(MANAGER))
            with pytest.raises(ChannelError, match="Unknown Member"):
                await adapter.is_chat_admin(str(CHANNEL_ID), "1400000000000000077")
        finally:
            await asyncio.wait_for(adapter.stop(), HANG_GUARD)
