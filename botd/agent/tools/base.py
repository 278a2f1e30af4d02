"""Tools the agent can call: what a tool is and what it gets and returns."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonschema

from ...bounded import Recent
from ...chat import MessageRef, Target
from ...cluster.fencing import RunScope
from ...events import ContentBlock, ImageContent, TextContent
from ..types import ToolDefinition
from .untrusted import mark_untrusted


def _ignore_progress(partial_result: object) -> None:
    return None


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool call knows about where it runs.

    ``scope`` is the run's: the conversation it answers and, when that conversation is held
    by lease (several nodes), the lease's fence. A tool with side effects makes them for that
    scope (the ``message`` tool's sends are fenced by it), so that a run this node no longer
    owns does nothing more."""

    scope: RunScope
    origin: Target | None
    """Where the run's answer goes (None for runs with no chat, such as benchmarks)."""
    call_id: str
    report_progress: Callable[[object], None] = field(default=_ignore_progress, compare=False)
    """Hands a partial result to the run (emitted as ``tool_execution_update``)."""

    @property
    def conversation_key(self) -> str:
        """The key of the conversation the run answers."""
        return self.scope.conversation


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's result as the model reads it; ``is_error`` marks a failed call.

    ``images`` go to the model after the text, as image blocks of the tool result.
    ``untrusted_from`` names where the text came from when it was read from outside (a web
    page, an MCP server): the model reads it inside the untrusted marker (``untrusted``)."""

    text: str
    is_error: bool = False
    details: dict[str, Any] = field(default_factory=dict)
    images: tuple[ImageContent, ...] = ()
    untrusted_from: str | None = None

    def content(self) -> list[ContentBlock]:
        """The tool result message's content: the text (marked when it is untrusted), then
        the images."""
        text = self.text
        if self.untrusted_from is not None:
            text = mark_untrusted(text, self.untrusted_from)
        return [TextContent(text=text), *self.images]

    def payload(self) -> dict[str, Any]:
        """The result in the JSON shape of ``tool_execution_end``."""
        return {
            "content": [block.model_dump(mode="json") for block in self.content()],
            "details": dict(self.details),
        }


class Tool(Protocol):
    spec: ToolDefinition
    timeout: float | None
    """Seconds before the call is abandoned with an error result (None: the default)."""

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput: ...


SendFunction = Callable[[Target, str, RunScope], Awaitable[MessageRef]]
"""Posts text to a target through the channel layer, for the run of a scope (whose lease
fences the send)."""


VALIDATOR_CACHE_SIZE = 1024
"""How many compiled schemas are kept (the least recently used one goes first)."""
_VALIDATORS: Recent[int, tuple[dict[str, Any], jsonschema.Draft202012Validator]] = Recent(
    VALIDATOR_CACHE_SIZE
)


def schema_validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    """The compiled validator of a tool's input schema, checked against the meta-schema the
    first time this schema object is seen and reused after that.

    Schemas are keyed by the object itself (a built-in tool's schema is a module constant, an
    MCP tool's is kept from its listing), so a schema must not be changed in place once it was
    handed out. Raises ``jsonschema.SchemaError`` for an invalid schema (not cached)."""
    key = id(schema)
    found = _VALIDATORS.get(key)
    if found is not None and found[0] is schema:
        _VALIDATORS.touch(key)
        return found[1]
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    # The entry holds the schema, so its id cannot be reused by another object meanwhile.
    _VALIDATORS.remember(key, (schema, validator))
    return validator
