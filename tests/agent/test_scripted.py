"""The scripted provider (streams, script, YAML) and the provider registry."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from botd.agent.providers import create_provider
from botd.agent.providers.scripted import ScriptedProvider, ScriptedTurn, load_script
from botd.agent.types import AssistantResult, ModelRequest, ProviderError, ProviderItem
from botd.events import (
    AssistantStreamEvent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCallContent,
)
from tests.support.waiting import until


def request(*texts: str) -> ModelRequest:
    return ModelRequest(
        model="m", messages=[Message(role="user", content=[TextContent(text=t)]) for t in texts]
    )


async def collect(
    provider: ScriptedProvider, req: ModelRequest | None = None
) -> list[ProviderItem]:
    return [item async for item in provider.stream(req or request("hello"))]


def split(items: list[ProviderItem]) -> tuple[list[AssistantStreamEvent], Message]:
    *events, last = items
    assert isinstance(last, AssistantResult)
    assert all(isinstance(e, AssistantStreamEvent) for e in events)
    return events, last.message  # type: ignore[return-value]


# --- streaming -----------------------------------------------------------------------------


async def test_without_a_script_it_echoes_the_last_user_message() -> None:
    events, message = split(await collect(ScriptedProvider(), request("first", "second one")))

    assert [(e.type, e.delta) for e in events] == [
        ("text_start", None),
        ("text_delta", "You said"),
        ("text_delta", ": second"),
        ("text_delta", " one"),
        ("text_end", None),
    ]
    assert events[-1].content == "You said: second one"
    assert all(e.content_index == 0 for e in events)
    assert message.blocks() == [TextContent(text="You said: second one")]
    assert message.stop_reason == "end_turn"
    assert message.provider == "scripted" and message.model == "m"
    assert message.usage is not None and message.usage["output_tokens"] > 0


async def test_plain_string_user_content_is_echoed() -> None:
    req = ModelRequest(model="m", messages=[Message(role="user", content="plain")])
    _, message = split(await collect(ScriptedProvider(), req))
    assert message.blocks() == [TextContent(text="You said: plain")]


async def test_chunk_size_sets_the_delta_length() -> None:
    provider = ScriptedProvider([ScriptedTurn(text="abcdefg")], chunk_chars=3)
    events, _ = split(await collect(provider))
    assert [e.delta for e in events if e.type == "text_delta"] == ["abc", "def", "g"]


async def test_turns_are_played_in_order_then_it_echoes() -> None:
    provider = ScriptedProvider([ScriptedTurn(text="one"), ScriptedTurn(text="two")])
    texts = []
    for _ in range(3):
        _, message = split(await collect(provider, request("again")))
        texts.append(message.blocks())
    assert texts == [
        [TextContent(text="one")],
        [TextContent(text="two")],
        [TextContent(text="You said: again")],
    ]
    assert provider.calls == 3


async def test_thinking_text_and_tool_calls_stream_in_order() -> None:
    provider = ScriptedProvider(
        [
            ScriptedTurn(
                thinking="Need the clock.",
                text="Looking.",
                tool_calls=[
                    {"name": "clock", "args": {"zone": "UTC"}},
                    {"name": "clock", "args": {}},
                ],
            ),
            ScriptedTurn(tool_calls=[{"name": "clock"}]),
        ],
        chunk_chars=100,
    )
    events, message = split(await collect(provider))

    assert [(e.type, e.content_index) for e in events] == [
        ("thinking_start", 0),
        ("thinking_delta", 0),
        ("thinking_end", 0),
        ("text_start", 1),
        ("text_delta", 1),
        ("text_end", 1),
        ("toolcall_start", 2),
        ("toolcall_end", 2),
        ("toolcall_start", 3),
        ("toolcall_end", 3),
    ]
    assert message.blocks() == [
        ThinkingContent(thinking="Need the clock."),
        TextContent(text="Looking."),
        ToolCallContent(id="call_1", name="clock", arguments={"zone": "UTC"}),
        ToolCallContent(id="call_2", name="clock", arguments={}),
    ]
    assert message.stop_reason == "tool_use"

    # Ids keep counting across calls, so they are unique within a conversation.
    _, second = split(await collect(provider))
    assert second.blocks() == [ToolCallContent(id="call_3", name="clock", arguments={})]


async def test_an_explicit_stop_reason_wins() -> None:
    provider = ScriptedProvider([ScriptedTurn(text="I can't.", stop_reason="refusal")])
    _, message = split(await collect(provider))
    assert message.stop_reason == "refusal"


async def test_a_delayed_stream_can_be_cancelled() -> None:
    provider = ScriptedProvider([ScriptedTurn(text="slow " * 100)], chunk_chars=1, delay=60)
    seen: list[ProviderItem] = []

    async def consume() -> None:
        async for item in provider.stream(request("x")):
            seen.append(item)

    task = asyncio.create_task(consume())
    await until(lambda: seen, "seen")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert len(seen) == 1 and not any(isinstance(i, AssistantResult) for i in seen)


def test_bad_turns_and_settings_are_refused() -> None:
    with pytest.raises(ProviderError, match="stop_reason"):
        ScriptedTurn(stop_reason="finished")
    with pytest.raises(ProviderError, match="name"):
        ScriptedTurn(tool_calls=[{"args": {}}])
    with pytest.raises(ProviderError, match="args"):
        ScriptedTurn(tool_calls=[{"name": "x", "args": [1]}])
    with pytest.raises(ProviderError, match="chunk_chars"):
        ScriptedProvider(chunk_chars=0)
    with pytest.raises(ProviderError, match="delay"):
        ScriptedProvider(delay=-1)


# --- YAML ----------------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "script.yaml"
    path.write_text(text, encoding="utf-8")
    return path


async def test_a_yaml_script_is_played(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
turns:
  - thinking: The user wants the time.
    text: Let me look.
    tool_calls:
      - name: clock
        args: {zone: UTC}
  - text: It is noon.
  - text: Cut
    stop_reason: max_tokens
""",
    )
    provider = ScriptedProvider.from_yaml(path, chunk_chars=4)

    _, first = split(await collect(provider))
    _, second = split(await collect(provider))
    _, third = split(await collect(provider))

    assert first.blocks() == [
        ThinkingContent(thinking="The user wants the time."),
        TextContent(text="Let me look."),
        ToolCallContent(id="call_1", name="clock", arguments={"zone": "UTC"}),
    ]
    assert second.blocks() == [TextContent(text="It is noon.")]
    assert (third.blocks(), third.stop_reason) == ([TextContent(text="Cut")], "max_tokens")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("turns: [\n  - text: a\n  bad", "line"),
        ("- just a list", "mapping"),
        ("{}", "turns: missing"),
        ("turns: [{text: hi, colour: red}]", "turns[0].colour"),
        ("turns: [{text: [1, 2]}]", "turns[0].text"),
        ("turns: [{tool_calls: [{args: {}}]}]", "turns[0].tool_calls[0].name: missing"),
        ("turns: [{tool_calls: [{name: x, args: [1]}]}]", "turns[0].tool_calls[0].args"),
        ("turns: [{text: a}, {text: b, stop_reason: done}]", "turns[1]: unknown stop_reason"),
    ],
)
def test_a_bad_yaml_script_names_the_problem(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ProviderError) as caught:
        load_script(path)
    message = str(caught.value)
    assert str(path) in message
    assert expected in message


def test_a_missing_script_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ProviderError, match="cannot read"):
        ScriptedProvider.from_yaml(path)


# --- registry ------------------------------------------------------------------------------


async def test_the_registry_builds_the_scripted_provider(tmp_path: Path) -> None:
    provider = create_provider("scripted", chunk_chars=2, name="offline")
    assert isinstance(provider, ScriptedProvider) and provider.name == "offline"

    path = write(tmp_path, "turns: [{text: from file}]")
    from_file = create_provider("scripted", script=str(path))
    assert isinstance(from_file, ScriptedProvider)
    _, message = split(await collect(from_file))
    assert message.blocks() == [TextContent(text="from file")]
    await from_file.aclose()


@pytest.mark.parametrize(
    ("name", "settings", "expected"),
    [
        ("gpt", {}, "unknown provider 'gpt' (known: anthropic, openai, scripted)"),
        ("scripted", {"speed": 3}, "unknown setting(s) speed"),
    ],
)
def test_the_registry_refuses_what_it_does_not_know(
    name: str, settings: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ProviderError) as caught:
        create_provider(name, **settings)
    assert expected in str(caught.value)
