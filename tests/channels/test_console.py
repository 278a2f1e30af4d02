"""The console channel end to end: typed lines through router and sessions, replies printed."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from botd.agent.loop import LoopConfig
from botd.agent.providers.scripted import ScriptedProvider
from botd.channels.console import CONVERSATION_KEY, ConsoleAdapter
from botd.chat import Target
from botd.delivery import ChannelDelivery
from botd.router import AccessPolicy, Router
from botd.sessions import SessionManager, SessionSettings
from botd.store import Store


async def test_typed_lines_are_answered_until_end_of_input(tmp_path: Path) -> None:
    reader = asyncio.StreamReader()
    output = io.StringIO()
    finished = asyncio.Event()

    async def on_end() -> None:
        finished.set()

    console = ConsoleAdapter(reader, output, on_end_of_input=on_end)
    with Store.open(tmp_path / "state") as store:
        sessions = SessionManager(
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
    assert sessions.sessions[CONVERSATION_KEY].runs_done >= 1


async def test_delete_leaves_a_printed_reply_as_it_is() -> None:
    output = io.StringIO()
    adapter = ConsoleAdapter(output=output)
    [ref] = await adapter.send(Target("console", "local"), "printed")
    await adapter.delete(ref)
    assert output.getvalue() == "printed\n"
