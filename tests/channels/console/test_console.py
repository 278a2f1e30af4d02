"""The console channel end to end: typed lines through router and sessions, replies printed."""

from __future__ import annotations

import asyncio
import errno
import io
import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from botd.agent.loop import LoopConfig
from botd.agent.providers.scripted import ScriptedProvider
from botd.channels.base import Ack
from botd.channels.console.adapter import (
    CONVERSATION_KEY,
    ConsoleAdapter,
    LineSplitter,
    MessageAssembler,
    TooLong,
    banner_text,
)
from botd.channels.errors import ChannelError
from botd.chat import InboundMessage, Target
from botd.conversation import Conversations, SessionSettings
from botd.delivery import ChannelDelivery
from botd.inbound.access import AccessPolicy
from botd.inbound.router import Router
from botd.store.sqlite import SqliteStore


async def test_typed_lines_are_answered_until_end_of_input(tmp_path: Path) -> None:
    reader = asyncio.StreamReader()
    output = io.StringIO()
    finished = asyncio.Event()

    async def on_end() -> None:
        finished.set()

    console = ConsoleAdapter(reader, output, on_end_of_input=on_end)
    with SqliteStore.open(tmp_path / "state") as store:
        sessions = Conversations(
            store,
            ScriptedProvider(),
            ChannelDelivery({"console": console}),
            SessionSettings(loop=LoopConfig("scripted")),
        )

        async def reply(target: Target, text: str) -> None:
            await console.send(target, text)

        router = Router(store, sessions.submit, reply, {"console": AccessPolicy(dm_policy="open")})
        await console.start(router.handle)  # type: ignore[arg-type]
        reader.feed_data(b"hello\n\n   \nhow are you?\n")
        reader.feed_eof()
        await asyncio.wait_for(finished.wait(), 30)
        await asyncio.wait_for(sessions.drain(), 30)
        await console.stop()
    printed = output.getvalue()
    # Both lines may arrive before the first run starts; collect mode then answers them
    # together. Either way each is answered once, in order, and blank lines are ignored.
    assert printed.startswith("You said: hello")
    assert printed.count("hello") == 1 and printed.count("how are you?") == 1
    assert printed.index("hello") < printed.index("how are you?")
    assert sessions.conversations[CONVERSATION_KEY].runs_done >= 1


async def test_delete_leaves_a_printed_reply_as_it_is() -> None:
    output = io.StringIO()
    adapter = ConsoleAdapter(output=output)
    [ref] = await adapter.send(Target("console", "local"), "printed")
    await adapter.delete(ref)
    assert output.getvalue() == "printed\n"


def _messages(data: bytes, cuts: list[int], limit: int = 16) -> list[str | TooLong]:
    """``data`` fed in pieces cut at ``cuts``, through a splitter and an assembler."""
    splitter, assembler = LineSplitter(limit), MessageAssembler(limit)
    out: list[str | TooLong] = []
    bounds = [0, *sorted(cuts), len(data)]
    for start, end in itertools.pairwise(bounds):
        for line in splitter.feed(data[start:end]):
            out += assembler.line(line)
    for line in splitter.end():
        out += assembler.line(line)
    return out + assembler.end()


def test_lines_blocks_and_refusals() -> None:
    data = (
        b"short\r\n"  # 1
        b"  \n"  # 2: blank, skipped
        + b"z"
        * 17  # 3: over the 16-byte limit
        + b'\n"""\n'  # 4: opens a block
        b"\n  code\n\n"  # 5-7
        b'  """  \n'  # 8: closes it
        b'"""\n'  # 9: a block too long to send
         + b"a" * 10 + b"\n" + b"b" * 10 + b'\n"""\n'  # 12
        b"tail"  # 13: no newline at the end
    )
    assert _messages(data, []) == [
        "short",
        TooLong(3, 3, 17),
        "  code",
        TooLong(9, 12, 22),
        "tail",
    ]


@given(st.lists(st.integers(min_value=0, max_value=120), max_size=12))
def test_where_the_input_is_cut_into_chunks_changes_nothing(cuts: list[int]) -> None:
    data = b'one\n"""\ntwo\nthree\n"""\n' + b"w" * 40 + b"\nfour\xc3\xa9\nfive"
    assert _messages(data, [min(cut, len(data)) for cut in cuts]) == _messages(data, [])


def test_a_too_long_line_inside_a_block_refuses_the_block() -> None:
    assert _messages(b'"""\nok\n' + b"q" * 20 + b'\n"""\nnext\n', []) == [
        TooLong(1, 4, 3 + 21),
        "next",
    ]


async def test_the_banner_names_the_model_and_how_to_quit() -> None:
    notices = io.StringIO()
    reader = asyncio.StreamReader()
    reader.feed_eof()
    console = ConsoleAdapter(
        reader, io.StringIO(), model="scripted provider (model m)", notices=notices, banner=True
    )
    await console.start(_ignore)
    await console.stop()
    assert notices.getvalue() == banner_text("scripted provider (model m)") + "\n"
    assert "scripted provider (model m)" in notices.getvalue()
    assert "Ctrl-D to quit" in notices.getvalue()


async def _ignore(message: InboundMessage, *, ack: Ack | None = None) -> None:
    return None


class _FullDisk(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


async def test_a_failing_stdout_write_is_a_retryable_channel_error() -> None:
    console = ConsoleAdapter(output=_FullDisk())
    with pytest.raises(ChannelError) as raised:
        await console.send(Target("console", "local"), "lost")
    assert raised.value.retryable and "No space left" in str(raised.value)
