"""A flood of strangers or of one stranger's messages: at most 3 codes wait per channel (a new
one expires the oldest), and each code is sent once; what else comes is logged and ignored."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from botd.chat import InboundMessage, Target
from botd.inbound.access import AccessPolicy
from botd.inbound.router import Router
from botd.store import Store
from botd.store.pairing import MAX_PENDING_PER_CHANNEL, PairingFile

PAIRING = AccessPolicy(dm_policy="pairing")


class Replies:
    def __init__(self) -> None:
        self.sent: list[tuple[Target, str]] = []
        self.accepted: list[InboundMessage] = []

    async def submit(self, message: InboundMessage) -> None:
        self.accepted.append(message)

    async def reply(self, target: Target, text: str) -> None:
        self.sent.append((target, text))

    def codes_sent_to(self, chat: str) -> list[str]:
        return [_code(text) for target, text in self.sent if target.chat_id == chat]


def _code(text: str) -> str:
    return text.split("pairing code ")[1].split()[0]


def dm(sender: str, n: int, channel: str = "telegram") -> InboundMessage:
    return InboundMessage(
        channel=channel,
        chat_id=sender,
        sender_id=sender,
        text=f"hello {n}",
        message_id=f"{sender}-{n}",
        conversation_key=f"{channel}:{sender}",
        is_direct=True,
    )


def _router(store: Store, replies: Replies, book: PairingFile) -> Router:
    policies = {"telegram": PAIRING, "slack": PAIRING}
    return Router(store, replies.submit, replies.reply, policies, pairing=book)


async def test_301_strangers_leave_at_most_3_codes_waiting(
    tmp_path: Path, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "pairing.json"
    replies = Replies()
    router = _router(store, replies, PairingFile(path))
    with caplog.at_level(logging.INFO, logger="botd.inbound"):
        for n in range(301):
            decision = await router.handle(dm(f"s{n:03d}", 1))
            assert not decision.accepted
    waiting = await PairingFile(path).pending()  # as another process (botd pairing list) reads it
    assert len(waiting) == MAX_PENDING_PER_CHANNEL == 3
    assert sorted(who for _code, _ch, who in waiting) == ["s298", "s299", "s300"]
    assert len(json.loads(path.read_text())["pending"]) == 3
    # Each stranger was sent their own code once; the expiries were logged, one line each.
    assert len(replies.sent) == 301
    expired = [r for r in caplog.records if "expired early" in r.getMessage()]
    assert len(expired) == 298 and all(r.levelno == logging.WARNING for r in expired)
    assert replies.accepted == []


async def test_codes_wait_per_channel(tmp_path: Path, store: Store) -> None:
    replies = Replies()
    book = PairingFile(tmp_path / "pairing.json")
    router = _router(store, replies, book)
    for n in range(5):
        await router.handle(dm(f"t{n}", 1, "telegram"))
        await router.handle(dm(f"u{n}", 1, "slack"))
    channels = [ch for _code, ch, _who in await book.pending()]
    assert sorted(channels) == ["slack"] * 3 + ["telegram"] * 3


async def test_one_stranger_writing_again_and_again_gets_one_reply(
    tmp_path: Path, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "pairing.json"
    replies = Replies()
    router = _router(store, replies, PairingFile(path))
    with caplog.at_level(logging.INFO, logger="botd.inbound.router"):
        for n in range(50):
            await router.handle(dm("mallory", n))
    assert len(replies.sent) == 1
    skipped = [r for r in caplog.records if "pairing code already sent" in r.getMessage()]
    assert len(skipped) == 49 and all(r.levelno == logging.INFO for r in skipped)
    # Still one reply after a restart: the pending code is read back from the state dir.
    restarted = _router(store, replies, PairingFile(path))
    await restarted.handle(dm("mallory", 99))
    assert len(replies.sent) == 1


async def test_a_pending_code_is_approved_and_an_expired_one_is_not(
    tmp_path: Path, store: Store
) -> None:
    path = tmp_path / "pairing.json"
    replies = Replies()
    book = PairingFile(path)
    router = _router(store, replies, book)
    for n in range(4):  # the fourth stranger expires the first one's code
        await router.handle(dm(f"s{n}", 1))
    first, second = replies.codes_sent_to("s0")[0], replies.codes_sent_to("s1")[0]
    admin = PairingFile(path)  # botd pairing approve, in another process
    assert await admin.approve("telegram", first) is None
    assert await admin.approve("telegram", second) == "s1"
    assert (await router.handle(dm("s1", 2))).accepted
    assert not (await router.handle(dm("s0", 2))).accepted
    # The expired stranger asked again and got a fresh code (the one sent, once).
    [old, fresh] = replies.codes_sent_to("s0")
    assert fresh != old and await admin.approve("telegram", fresh) == "s0"
    assert (await router.handle(dm("s0", 3))).accepted


async def test_a_pairing_file_written_before_the_limit_still_loads(tmp_path: Path) -> None:
    """A state dir from before the limit may hold more waiting codes: they stay approvable,
    and the next new code brings the channel down to the limit."""
    path = tmp_path / "pairing.json"
    now = 1000.0
    pending = {f"CODE{n:04d}": ["telegram", f"s{n}", now + n] for n in range(6)}
    path.write_text(json.dumps({"approved": [["telegram", "old"]], "pending": pending}))
    book = PairingFile(path, clock=lambda: now + 10)
    assert book.is_approved("telegram", "old")
    assert await book.approve("telegram", "code0005") == "s5"
    code, issued = await book.issue("telegram", "newcomer")
    assert issued and await book.issue("telegram", "newcomer") == (code, False)
    assert sorted(who for _c, _ch, who in await book.pending()) == ["newcomer", "s3", "s4"]
