"""The Slack adapter's chat-admin lookup (``ChatAdmins``, for ``admins_are_owners``) over the
loopback Web API with the real slack_sdk: a workspace admin or owner (``users.info``'s
``is_admin`` / ``is_owner``) is an admin in any chat; a member is not; a user Slack does not
know is a ``ChannelError`` in Slack's words."""

from __future__ import annotations

import pytest

from botd.channels.errors import ChannelError
from tests.channels.slack.harness import slack_adapter
from tests.fakes.slack_api import FakeSlack


async def test_workspace_admins_and_owners_are_admins_everywhere() -> None:
    async with FakeSlack() as fake:
        fake.users = {who: {"display_name": who} for who in ("UADMIN", "UOWNER", "UMEMBER")}
        fake.admins.add("UADMIN")
        fake.workspace_owners.add("UOWNER")
        adapter = slack_adapter(fake)
        assert await adapter.is_chat_admin("C1", "UADMIN")
        assert await adapter.is_chat_admin("D1", "UOWNER")
        assert not await adapter.is_chat_admin("C1", "UMEMBER")
        with pytest.raises(ChannelError, match="user_not_found"):
            await adapter.is_chat_admin("C1", "UNOBODY")
