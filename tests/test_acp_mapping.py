"""The one mapping between botd's runtime and ACP (``botd.acp_mapping``): the stop reasons
the two share are the same words both ways and every one of them is a stop reason of botd's
runtime and of the Python SDK's schema; botd's own failures have none; a tool's kind is read
off its name, and an agent's call is named to a chat by its title's first word or its kind."""

from __future__ import annotations

from typing import get_args

import acp.schema
import pytest

from botd.acp_mapping import SHARED_STOP_REASONS, shared_stop_reason, tool_kind, tool_name
from botd.agent.types import STOP_REASONS


def test_the_shared_stop_reasons_are_both_sides_words() -> None:
    assert set(SHARED_STOP_REASONS) == set(get_args(acp.schema.StopReason))
    assert set(SHARED_STOP_REASONS) <= STOP_REASONS
    for reason in SHARED_STOP_REASONS:
        assert shared_stop_reason(reason) == reason
    for outcome in ("error", "exception", "tool_use", "something new"):
        assert shared_stop_reason(outcome) is None


@pytest.mark.parametrize(
    ("name", "kind"),
    [("web_fetch", "fetch"), ("mcp__files__read_file", "read"), ("run-shell", "execute")],
)
def test_a_tools_kind_is_read_off_its_name(name: str, kind: str) -> None:
    assert tool_kind(name) == kind
    assert kind in get_args(acp.schema.ToolKind)


def test_an_agents_call_is_named_by_its_titles_first_word_or_its_kind() -> None:
    assert tool_name("Write notes.md", "edit") == "Write"
    assert tool_name("`ls -la`", "execute") == "execute"
    assert tool_name(None, None) == "tool"
