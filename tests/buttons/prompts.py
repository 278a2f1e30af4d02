"""What the model was asked, for the buttons tests."""

from __future__ import annotations

from tests.fakes.anthropic_api import FakeAnthropicAPI


def prompts(model: FakeAnthropicAPI) -> list[str]:
    """The last user turn of each model request, as text."""
    said = []
    for request in model.requests:
        content = request.body["messages"][-1]["content"]
        if isinstance(content, list):
            content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
        said.append(str(content))
    return said
