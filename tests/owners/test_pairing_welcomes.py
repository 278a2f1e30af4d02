"""``PairingWelcomes`` over the real ``pairing.json``: an approval made while no daemon ran
is welcomed by the next one, a welcome whose line could not be sent stays for the next
look, and each welcome is done once."""

from __future__ import annotations

from pathlib import Path

from botd.chat import InboundMessage, Target
from botd.owners import YOU_CAN_TALK, PairingWelcomes
from botd.store.pairing import PairingFile
from botd.store.rows import inbound_json


def waiting(text: str, n: int) -> InboundMessage:
    return InboundMessage(
        channel="telegram",
        chat_id="888",
        sender_id="888",
        text=text,
        message_id=str(n),
        conversation_key="telegram:888",
        is_direct=True,
    )


class Chat:
    """Where the welcomes go: the lines told (``down``: refused) and the messages released."""

    def __init__(self) -> None:
        self.told: list[tuple[str, str]] = []
        self.released: list[str] = []
        self.down = False

    async def tell(self, target: Target, text: str) -> None:
        if self.down:
            raise ConnectionError("Telegram is down")
        self.told.append((target.chat_id, text))

    async def release(self, message: InboundMessage) -> bool:
        self.released.append(message.text)
        return True


async def test_an_approval_made_while_botd_was_down_is_welcomed_at_the_next_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "pairing.json"
    before = PairingFile(path)  # the daemon that issued the code and held the messages
    code, _ = await before.issue("telegram", "888")
    for n, text in enumerate(["what is 2+2?", "and 3+3?"]):
        assert await before.hold("telegram", "888", inbound_json(waiting(text, n)))
    assert await PairingFile(path).approve("telegram", code) == "888"  # botd pairing approve

    chat = Chat()
    after = PairingWelcomes(PairingFile(path), chat.tell, chat.release)  # the next start
    chat.down = True
    await after.deliver()
    assert chat.told == [] and chat.released == []  # left for the next look
    chat.down = False
    await after.deliver()
    assert [(where, line.startswith(YOU_CAN_TALK)) for where, line in chat.told] == [("888", True)]
    assert chat.released == ["what is 2+2?", "and 3+3?"]
    await after.deliver()
    assert len(chat.told) == 1 and len(chat.released) == 2  # once
    assert await PairingFile(path).welcomes() == []


async def test_a_sender_approved_before_messages_were_held_is_only_approved(
    tmp_path: Path,
) -> None:
    path = tmp_path / "pairing.json"
    pairing = PairingFile(path)
    code, _ = await pairing.issue("telegram", "888")
    await pairing.approve("telegram", code)
    chat = Chat()
    await PairingWelcomes(pairing, chat.tell, chat.release).deliver()
    assert chat.told == [] and await pairing.welcomes() == []
    assert pairing.is_approved("telegram", "888")
