"""A chat's own settings in its conversation (``botd.config.overrides``): the queue mode of
its group, ``/status`` naming each value and where it came from, and ``/model`` choosing
over the group's model until ``/new`` drops the choice. The real registry over the store,
the settings resolved from a parsed config as the daemon resolves them
(``wiring.place_settings``); the end-to-end part is ``test_chat_settings_daemon.py``."""

from __future__ import annotations

import asyncio
from pathlib import Path

from botd.agent.loop import LoopConfig
from botd.agent.providers.scripted import ScriptedProvider
from botd.chat import InboundMessage
from botd.config import parse_config
from botd.config.overrides import Defaults
from botd.conversation import Conversations
from botd.store.sqlite import SqliteStore
from botd.wiring import place_settings
from tests.conversation.harness import ListSink, RecordingProvider, settings, settle
from tests.support.waiting import until

CONFIG = parse_config(
    """model:
  provider: scripted
  fallbacks: [{provider: openai, name: gpt-team}]
agent:
  system_prompt: You are botd.
channels:
  telegram:
    token: t
    groups:
      "-1001":
        model: gpt-team
        queue_mode: followup
        tools: [message]
        topics:
          "7": {system_prompt: Releases only., system_prompt_mode: replace}
      "-1002": {}
""",
    {},
)


def said(text: str, chat: str, n: int, topic: str | None = None) -> InboundMessage:
    """A message in Telegram group ``chat`` (in its forum topic ``topic``)."""
    key = f"telegram:{chat}" + ("" if topic is None else f":topic:{topic}")
    return InboundMessage(
        channel="telegram",
        chat_id=chat,
        thread_id=topic,
        sender_id="42",
        sender_name="Ann",
        text=text,
        message_id=f"{chat}-{n}",
        conversation_key=key,
    )


def registry(store: SqliteStore, provider: RecordingProvider, sink: ListSink) -> Conversations:
    loop = LoopConfig(model="scripted", system=CONFIG.agent.system_prompt)
    return Conversations(
        store,
        provider,
        sink,
        settings(loop=loop, queue_mode=CONFIG.agent.queue_mode),
        models=CONFIG.model_names(),
        place=place_settings(lambda: CONFIG, Defaults.of(CONFIG)),
    )


async def test_each_group_queues_by_its_own_queue_mode(tmp_path: Path) -> None:
    hold = asyncio.Event()
    provider = RecordingProvider(ScriptedProvider(), hold=hold)
    sink = ListSink("telegram")
    with SqliteStore.open(tmp_path) as store:
        manager = registry(store, provider, sink)
        await manager.submit(said("a1", "-1001", 1))
        await manager.submit(said("b1", "-1002", 1))
        await until(lambda: provider.active == 2, "both groups' first runs")
        for n in (2, 3):
            await manager.submit(said(f"a{n}", "-1001", n))
            await manager.submit(said(f"b{n}", "-1002", n))
        hold.set()
        await settle(manager)
    last_turns = sorted(prompts[-1] for prompts in provider.prompts())
    # -1001 answers each waiting message on its own (followup); -1002 collects (the agent's).
    assert last_turns == [
        "[Ann (id 42)] a1",
        "[Ann (id 42)] a2",
        "[Ann (id 42)] a3",
        "[Ann (id 42)] b1",
        "[Ann (id 42)] b2\n\n[Ann (id 42)] b3",
    ]


async def test_status_names_each_value_and_model_beats_the_group_until_new(
    tmp_path: Path,
) -> None:
    provider = RecordingProvider(ScriptedProvider())
    sink = ListSink("telegram")
    with SqliteStore.open(tmp_path) as store:
        manager = registry(store, provider, sink)

        async def ask(text: str, n: int, topic: str | None = None) -> str:
            await manager.submit(said(text, "-1001", n, topic))
            await settle(manager)
            return sink.texts("-1001")[-1]

        assert (await ask("/status", 1, topic="7")).splitlines() == [
            "No conversation yet.",
            "Queue mode: followup (group -1001's).",
            "Model: gpt-team (group -1001's).",
            "System prompt: topic 7's (replacing).",
            "Backend: model (agent's).",
            "Mention needed: yes (channel telegram's).",
            "Tools: message (group -1001's).",
        ]
        assert provider.requests == []
        assert await ask("/model scripted", 2) == (
            "This conversation now uses scripted; fallbacks: gpt-team."
        )
        await ask("hello", 3)
        assert provider.requests[-1].model == "scripted"  # the choice, over the group's
        status = (await ask("/status", 4)).splitlines()
        assert status[0].endswith("2 messages, 1 runs, queue mode followup (group -1001's).")
        assert status[1:3] == [
            "Model: scripted (chosen with /model); the last answer came from scripted.",
            "System prompt: agent's.",
        ]
        assert await ask("/new", 5) == (
            "Started a new conversation. The model is back to gpt-team (group -1001's)."
        )
        await ask("and now?", 6)
        assert provider.requests[-1].model == "gpt-team"
        assert await ask("/new", 7) == "Started a new conversation."  # no choice to drop
        # Choosing the group's own model keeps no choice: the conversation follows the config.
        assert await ask("/model gpt-team", 8) == (
            "This conversation now uses gpt-team (the default); fallbacks: scripted."
        )
        assert await store.model_choice("telegram:-1001") is None
