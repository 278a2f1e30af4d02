"""Approvals over Discord, end to end: botd in-process with the real discord.py against the
loopback Discord fake and the real anthropic SDK against the fake Messages API; the model
calls a gated tool, the request is posted with Approve / Deny components, and a press (a
component interaction over the gateway, answered with the interaction callback) decides it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from botd.app import App
from botd.approvals import NOT_AN_APPROVER
from botd.inbound.router import NOT_ALLOWED
from tests.approvals.harness import (
    RAN,
    approvals_yaml,
    model_calls_the_tool,
    request_posted,
    states,
    tool_result,
)
from tests.buttons.discord_presses import answered, told
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.discord_api import (
    CHANNEL_ID,
    DM_CHANNEL_ID,
    GUILD_ID,
    USER_ID,
    FakeDiscordAPI,
    user,
)
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    discord_yaml,
)
from tests.support.waiting import until

ALICE = user(USER_ID, "alice")
MALLORY = user(1400000000000000008, "mallory")
"""In the channel, allowed to talk to the bot, not an approver."""
EVE = user(1400000000000000009, "eve")
"""In the channel, not allowed to talk to the bot."""


@asynccontextmanager
async def discord_botd(
    tmp_path: Path,
    discord: FakeDiscordAPI,
    model: FakeAnthropicAPI,
    *lines: str,
    options: Sequence[str] = ("dm_policy: open",),
) -> AsyncIterator[App]:
    config = config_yaml(
        tmp_path,
        anthropic_yaml(model),
        discord_yaml(discord, *options),
        approvals_yaml(*lines),
    )
    async with daemon_running(config) as daemon:
        yield daemon


class Request:
    """The bot's message asking to approve the call, as Discord keeps it."""

    def __init__(self, discord: FakeDiscordAPI, message_id: int, guild_id: int | None) -> None:
        self.discord, self.message_id, self.guild_id = discord, message_id, guild_id
        self.custom_ids = {
            button["label"]: button["custom_id"]
            for row in discord.components_of(message_id)
            for button in row["components"]
        }
        """Each button's custom id by its label, as posted."""

    @property
    def text(self) -> str:
        return self.discord.messages[self.message_id][1]

    @property
    def components(self) -> list[dict[str, Any]]:
        return self.discord.components_of(self.message_id)

    async def press(self, label: str, presser: dict[str, Any]) -> dict[str, Any]:
        """``presser`` presses the button ``label`` (as posted); the interaction."""
        return await self.discord.press(
            self.message_id, self.custom_ids[label], presser, guild_id=self.guild_id
        )

    async def answer(self, interaction: dict[str, Any]) -> str:
        """What the presser was told (an ephemeral callback), once answered."""
        return told(await answered(self.discord, interaction))


async def asked(tmp_path: Path, discord: FakeDiscordAPI, guild_id: int | None = None) -> Request:
    """The request, once posted (the run waits on it)."""
    message_id = await until(lambda: request_posted(tmp_path / "state"), "the request posted")
    assert message_id is not None
    request = Request(discord, int(message_id), guild_id)
    assert list(request.custom_ids) == ["Approve", "Deny"]
    return request


async def test_approved_in_discord_the_tool_runs_and_the_request_shows_who(
    tmp_path: Path,
) -> None:
    async with FakeDiscordAPI() as discord, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        async with discord_botd(tmp_path, discord, model):
            await discord.dispatch_message(
                discord.message(
                    "what is scheduled?", channel_id=DM_CHANNEL_ID, author=ALICE, guild=False
                )
            )
            request = await asked(tmp_path, discord)
            assert request.text == 'Approve `schedule(action="list")`?'
            assert len(model.requests) == 1  # the run waits: the tool has not run
            press = await request.press("Approve", ALICE)
            await discord.dispatch("INTERACTION_CREATE", press)  # delivered again
            assert await request.answer(press) == "Approved."
            await until(lambda: "All done." in discord.visible(DM_CHANNEL_ID), "the answer")
            assert tool_result(model) == RAN
            assert request.text.endswith("\nApproved by alice.")
            assert request.components == []  # the buttons are gone
            # A client still showing the buttons: told, nothing changes.
            late = await request.press("Deny", ALICE)
            assert await request.answer(late) == "Already approved by alice."
            assert states(tmp_path / "state") == ["approved"]
    # The redelivery reached no handler: two answers, the press's and the late one's.
    assert len(discord.commands.answers) == 2


async def test_in_a_discord_channel_only_an_approver_decides(tmp_path: Path) -> None:
    """Someone the channel's ``allow_from`` leaves out is refused by the access policy, a
    member who is no approver is told so; neither changes anything; the approver decides."""
    async with FakeDiscordAPI() as discord, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        model_calls_the_tool(model)
        allowed = f'["{USER_ID}", "{MALLORY["id"]}"]'
        options = [
            "groups:",
            f'  "{CHANNEL_ID}": {{require_mention: false, allow_from: {allowed}}}',
        ]
        async with discord_botd(
            tmp_path, discord, model, f'approvers: ["{USER_ID}"]', options=options
        ):
            await discord.dispatch_message(discord.message("what is scheduled?", author=ALICE))
            request = await asked(tmp_path, discord, GUILD_ID)
            assert await request.answer(await request.press("Approve", EVE)) == NOT_ALLOWED
            approve = await request.press("Approve", MALLORY)
            assert await request.answer(approve) == NOT_AN_APPROVER
            assert states(tmp_path / "state") == ["pending"]
            assert len(model.requests) == 1
            assert [b["label"] for b in request.components[0]["components"]] == ["Approve", "Deny"]
            assert await request.answer(await request.press("Deny", ALICE)) == "Denied."
            await until(lambda: "All done." in discord.visible(CHANNEL_ID), "the answer")
            is_error, said = tool_result(model)
            assert is_error and "denied by alice" in said
            assert request.text.endswith("\nDenied by alice.")
            assert request.components == []
            assert states(tmp_path / "state") == ["denied"]
