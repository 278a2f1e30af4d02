"""``session_scope: user`` end to end: in one Telegram group two members each have their own
conversation (the model is sent their own exchanges, never the other's), the group's chatter
reaches both, a ``/new`` by one leaves the other's history, the answers go to the group,
and a group left at the default keeps one conversation.
One daemon (real python-telegram-bot and anthropic SDKs over the loopback fakes) for all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import BOT_USERNAME, FakeTelegramAPI, user
from tests.support.daemon_inprocess import (
    HANG_GUARD,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)

SCOPED, SHARED = -100777, -100888
ALICE, BOB, EVE = 111, 222, 333


def _said(body: dict[str, Any]) -> str:
    """Everything a Messages API request carries of the conversation, as one text."""
    parts: list[str] = []
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            parts.append(content)
        else:
            parts.extend(block.get("text", "") for block in content)
    return "\n".join(parts)


async def test_each_member_of_a_user_scoped_group_has_their_own_conversation(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI
) -> None:
    config = config_yaml(
        tmp_path,
        anthropic_yaml(model),
        telegram_yaml(
            telegram,
            "poll_timeout: 1",
            "group_policy: open",
            "session_scope: user",
            f'groups: {{"{SHARED}": {{session_scope: group}}}}',
        ),
    )
    answers = 0

    async def ask(chat: int, who: int, name: str, question: str, answer: str) -> str:
        nonlocal answers
        model.push(stream(text(answer)))
        telegram.push_text(chat, f"@{BOT_USERNAME} {question}", sender=user(who, name))
        answers += 1
        [*_, reply] = await telegram.wait_for_call("sendMessage", answers, timeout=HANG_GUARD)
        assert int(reply.params["chat_id"]) == chat  # the answer goes to the group
        return _said(model.requests[-1].body)

    async with daemon_running(config):
        telegram.push_text(SCOPED, "lunch at noon?", sender=user(EVE, "Eve"))
        alice_first = await ask(SCOPED, ALICE, "Alice", "my word is heron", "Noted, heron.")
        bob_first = await ask(SCOPED, BOB, "Bob", "my word is otter", "Noted, otter.")
        # The chatter line reached both members' runs.
        assert "lunch at noon?" in alice_first and "lunch at noon?" in bob_first
        assert "heron" not in bob_first
        alice = await ask(SCOPED, ALICE, "Alice", "what is my word?", "heron")
        assert "Noted, heron." in alice and "otter" not in alice
        bob = await ask(SCOPED, BOB, "Bob", "what is my word?", "otter")
        assert "Noted, otter." in bob and "heron" not in bob
        # /new by Alice starts her over; Bob's history stays.
        telegram.push_text(SCOPED, f"/new@{BOT_USERNAME}", sender=user(ALICE, "Alice"))
        answers += 1
        await telegram.wait_for_call("sendMessage", answers, timeout=HANG_GUARD)
        alice = await ask(SCOPED, ALICE, "Alice", "what is my word?", "I do not know.")
        assert "heron" not in alice.replace("what is my word?", "")
        bob = await ask(SCOPED, BOB, "Bob", "and again?", "otter")
        assert "Noted, otter." in bob
        # The group left at the default: one conversation, both members in it.
        await ask(SHARED, ALICE, "Alice", "the plan is kites", "Kites it is.")
        shared = await ask(SHARED, BOB, "Bob", "what is the plan?", "kites")
        assert "the plan is kites" in shared and "Kites it is." in shared
