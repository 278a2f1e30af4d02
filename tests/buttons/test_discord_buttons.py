"""Buttons on Discord, end to end: the daemon with the real discord.py and anthropic SDKs over
the loopback fakes. The directive becomes message components (an action row of buttons per
row); a press (a component interaction over the gateway) reaches the model once even when
delivered twice, is acknowledged with the interaction callback, and replaces the buttons with
the choice made; a second press and a presser the access policy refuses are told so in a
message only they see.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from botd.inbound.router import ALREADY_ANSWERED, NOT_ALLOWED, NOT_OFFERED
from tests.buttons.discord_presses import DEFERRED_UPDATE_MESSAGE, answered, told
from tests.buttons.prompts import prompts
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.discord_api import (
    CHANNEL_ID,
    DM_CHANNEL_ID,
    GUILD_ID,
    USER_ID,
    FakeDiscordAPI,
    user,
)
from tests.support.daemon_inprocess import anthropic_yaml, config_yaml, daemon_running, discord_yaml
from tests.support.waiting import until

ALICE = user(USER_ID, "alice")
EVE = user(1400000000000000009, "eve")


async def with_buttons(discord: FakeDiscordAPI, channel: int) -> tuple[int, list[dict[str, Any]]]:
    """The id of the bot's first message in ``channel`` that has components, and them."""

    def found() -> int | None:
        return next(
            (
                message_id
                for message_id, (chat, _) in sorted(discord.messages.items())
                if chat == str(channel) and discord.components_of(message_id)
            ),
            None,
        )

    message_id = await until(found, "a message with buttons")
    assert message_id is not None
    return message_id, discord.components_of(message_id)


async def test_a_directive_shows_components_and_a_press_reaches_the_model_once(
    tmp_path: Path,
) -> None:
    async with FakeDiscordAPI() as discord, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(
            stream(text("Deploy now?\n[[buttons: Yes | No || Later]]")),
            stream(text("Deploying.")),
        )
        config = config_yaml(
            tmp_path, anthropic_yaml(model), discord_yaml(discord, "dm_policy: open")
        )
        async with daemon_running(config) as daemon:
            await discord.dispatch_message(
                discord.message("deploy?", channel_id=DM_CHANNEL_ID, author=ALICE, guild=False)
            )
            message_id, rows = await with_buttons(discord, DM_CHANNEL_ID)
            assert discord.visible(DM_CHANNEL_ID) == ["Deploy now?"]  # no directive shown
            assert [row["type"] for row in rows] == [1, 1]  # action rows
            buttons = [
                [(b["type"], b["style"], b["label"]) for b in row["components"]] for row in rows
            ]
            assert buttons == [[(2, 1, "Yes"), (2, 2, "No")], [(2, 2, "Later")]]
            yes = rows[0]["components"][0]["custom_id"]

            press = await discord.press(message_id, yes, ALICE)
            await discord.dispatch("INTERACTION_CREATE", press)  # delivered again
            assert (await answered(discord, press))["type"] == DEFERRED_UPDATE_MESSAGE
            await until(lambda: discord.visible(DM_CHANNEL_ID)[-1:] == ["Deploying."], "the answer")
            # The buttons gave way to the choice made, and who made it.
            [[chosen]] = [row["components"] for row in discord.components_of(message_id)]
            assert (chosen["label"], chosen["disabled"]) == ("✔ Yes (alice)", True)
            assert discord.visible(DM_CHANNEL_ID)[0] == "Deploy now?"  # the text stays

            again = await discord.press(message_id, yes, ALICE)  # a client not yet refreshed
            assert told(await answered(discord, again)) == ALREADY_ANSWERED
            assert daemon.runtime is not None
            await daemon.runtime.dispatcher.drain()
    assert prompts(model) == ["deploy?", "(pressed: Yes)"]
    assert len(discord.commands.answers) == 2  # the redelivery was not answered twice


async def test_a_presser_the_policy_refuses_is_told_and_never_reaches_the_model(
    tmp_path: Path,
) -> None:
    async with FakeDiscordAPI() as discord, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(stream(text("Ship it?\n[[buttons: Ship | Wait]]")))
        group = f'  "{CHANNEL_ID}": {{require_mention: false, allow_from: ["{USER_ID}"]}}'
        config = config_yaml(
            tmp_path, anthropic_yaml(model), discord_yaml(discord, "groups:", group)
        )
        async with daemon_running(config) as daemon:
            await discord.dispatch_message(discord.message("ship?", author=ALICE))
            message_id, rows = await with_buttons(discord, CHANNEL_ID)
            ship = rows[0]["components"][0]["custom_id"]
            press = await discord.press(message_id, ship, EVE, guild_id=GUILD_ID)
            assert told(await answered(discord, press)) == NOT_ALLOWED
            # The buttons stay for someone allowed.
            assert discord.components_of(message_id) == rows
            assert daemon.runtime is not None
            await daemon.runtime.dispatcher.drain()
    assert prompts(model) == ["[alice (id 1400000000000000001)] ship?"]


async def test_forged_presses_are_refused_and_the_real_press_still_counts(
    tmp_path: Path,
) -> None:
    """An interaction naming the bot's message with a ``custom_id`` that is none of its
    buttons, and one naming a plain answer, reach nothing; the real button then counts."""
    async with FakeDiscordAPI() as discord, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        model.push(
            stream(text("Refunds go through the desk.")),
            stream(text("Refund?\n[[buttons: Yes | No]]")),
            stream(text("Refunded.")),
        )
        config = config_yaml(
            tmp_path, anthropic_yaml(model), discord_yaml(discord, "dm_policy: open")
        )
        async with daemon_running(config) as daemon:
            await discord.dispatch_message(
                discord.message("refunds?", channel_id=DM_CHANNEL_ID, author=ALICE, guild=False)
            )
            await until(lambda: discord.visible(DM_CHANNEL_ID), "the answer")
            [plain] = [m for m, (chat, _) in discord.messages.items() if chat == str(DM_CHANNEL_ID)]
            await discord.dispatch_message(
                discord.message("refund me", channel_id=DM_CHANNEL_ID, author=ALICE, guild=False)
            )
            message_id, rows = await with_buttons(discord, DM_CHANNEL_ID)
            assert [b["custom_id"] for b in rows[0]["components"]] == ["b:0", "b:1"]

            on_plain = await discord.press(plain, "b:0", ALICE)
            assert told(await answered(discord, on_plain)) == NOT_OFFERED
            seven = await discord.press(message_id, "b:7", ALICE)
            assert told(await answered(discord, seven)) == NOT_OFFERED
            assert discord.components_of(plain) == []
            assert discord.components_of(message_id) == rows
            assert len(model.requests) == 2

            real = await discord.press(message_id, "b:0", ALICE)
            assert (await answered(discord, real))["type"] == DEFERRED_UPDATE_MESSAGE
            await until(lambda: "Refunded." in discord.visible(DM_CHANNEL_ID), "the answer")
            assert daemon.runtime is not None
            await daemon.runtime.dispatcher.drain()
    assert prompts(model) == ["refunds?", "refund me", "(pressed: Yes)"]
