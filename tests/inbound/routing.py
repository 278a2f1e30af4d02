"""A router under test and what it hands on: the recorder of its outlets and Telegram
messages to feed it."""

from __future__ import annotations

from botd.chat import InboundMessage, Target
from botd.inbound.access import AccessPolicy
from botd.inbound.router import Router
from botd.store import Store


class Recorder:
    """The router's two outlets: what it submitted for an answer and what it replied itself."""

    def __init__(self) -> None:
        self.submitted: list[InboundMessage] = []
        self.replies: list[tuple[Target, str]] = []

    async def submit(self, message: InboundMessage) -> None:
        self.submitted.append(message)

    async def reply(self, target: Target, text: str) -> None:
        self.replies.append((target, text))


def dm(text: str, sender: str = "alice", n: int = 1) -> InboundMessage:
    """A Telegram DM from ``sender``."""
    return InboundMessage(
        channel="telegram",
        chat_id=sender,
        sender_id=sender,
        text=text,
        message_id=str(n),
        conversation_key=f"telegram:{sender}",
        is_direct=True,
    )


def group(
    text: str, *, mention: bool = False, chat: str = "g1", sender: str = "bob", n: int = 1
) -> InboundMessage:
    """A Telegram group message in ``chat`` from ``sender``."""
    return InboundMessage(
        channel="telegram",
        chat_id=chat,
        sender_id=sender,
        sender_name=sender.title(),
        text=text,
        message_id=str(n),
        conversation_key=f"telegram:{chat}",
        mentions_bot=mention,
    )


def router(store: Store, rec: Recorder, policy: AccessPolicy, **kw: object) -> Router:
    """A router for Telegram under ``policy`` into ``rec`` (``kw``: more of its options)."""
    return Router(store, rec.submit, rec.reply, {"telegram": policy}, **kw)  # type: ignore[arg-type]
