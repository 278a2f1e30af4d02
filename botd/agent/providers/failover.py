"""Several models behind one ``Provider``: when one gives up on a call, the next answers it.

``FailoverProvider`` holds the configured models in order (the primary, then its fallbacks).
Each call goes to the model the request names (``ModelRequest.model``: the conversation's
choice), the others following in their configured order. A model whose call ends with
``stop_reason="error"`` before it streamed a single event hands the same request to the next
one. Its provider has already spent its own capped retries by then (429, 529 and other 5xx,
timeouts, dropped connections), so an error here means that model gave up.

Every error fails over, authentication and request errors included: a revoked or mistyped
key on one account is as much an outage of that model as an overloaded server, and another
model may well take a request that one refused. The switch is logged in one line (provider,
model, why), so a key problem is still seen. The exception is a request refused for an image
in it (``AssistantResult.refused_images``): that refusal is returned as it is, so the loop
leaves the image out and asks the same model again. Handed to another model, the image
would stay in the conversation and every later request would meet the same refusal first,
leaving the conversation on its fallback for as long as the image is sent.

A model that failed after part of its answer had streamed is not replaced: the chat has
shown that part, and another model would start a different answer from the beginning, so
the user would read a broken half and then a whole second reply. The call ends with the
error as it is, like any failed call. When every model fails, the call ends with one line
naming each model and why it failed.

What one model wrote is not always fit for another: thinking blocks carry signatures only
the model that wrote them can check. So each model is sent the history with the thinking
of other models (another provider, or another model name) left out. In the middle of a
tool loop (the last message a tool result) the model that asked for the tools goes first:
the loop finishes with the model that began it, and the next user turn goes back to the
conversation's primary.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace

from ...events import Message, ThinkingContent
from ..types import AssistantResult, ModelRequest, Provider, ProviderItem

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """One configured model: its name (as sent to the API) and the provider that serves it."""

    name: str
    provider: Provider

    @property
    def label(self) -> str:
        """``provider/model`` as logs and chat lines show it."""
        return f"{self.provider.name}/{self.name}"


class FailoverProvider:
    """A ``Provider`` trying ``models`` in turn (see the module docstring)."""

    def __init__(self, models: Sequence[ModelChoice], *, name: str = "failover") -> None:
        if not models:
            raise ValueError("a failover provider needs at least one model")
        self.name = name
        self.models: tuple[ModelChoice, ...] = tuple(models)

    async def aclose(self) -> None:
        for choice in self.models:
            try:
                await choice.provider.aclose()
            except Exception:
                log.exception("closing the %s provider failed", choice.label)

    def order(self, request: ModelRequest) -> list[ModelChoice]:
        """The models to try for ``request``, first to last."""
        ordered = list(self.models)
        first = _find(ordered, request.model)
        if first is not None:
            ordered.insert(0, ordered.pop(first))
        looping = _tool_loop_author(request.messages)
        if looping is not None:
            provider, model = looping
            index = next(
                (
                    i
                    for i, c in enumerate(ordered)
                    if c.name == model and c.provider.name == provider
                ),
                None,
            )
            if index is not None:
                ordered.insert(0, ordered.pop(index))
        return ordered

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderItem]:
        ordered = self.order(request)
        failures: list[tuple[ModelChoice, str]] = []
        for position, choice in enumerate(ordered):
            attempt = replace(
                request,
                model=choice.name,
                messages=without_foreign_thinking(
                    request.messages, choice.provider.name, choice.name
                ),
            )
            streamed = False
            result: AssistantResult | None = None
            raised: str | None = None
            items = choice.provider.stream(attempt)
            try:
                async for item in items:
                    if isinstance(item, AssistantResult):
                        result = item
                        break
                    streamed = True
                    yield item
            except Exception as exc:  # a provider should not raise; one that does is a failure
                if streamed:
                    raise  # the loop ends the turn keeping what streamed
                log.warning("model %s raised: %s", choice.label, exc, exc_info=True)
                raised = str(exc) or type(exc).__name__
            finally:
                # Closed now (its connection with it), also when our consumer stops early.
                close = getattr(items, "aclose", None)
                if close is not None:
                    await close()
            if result is None and streamed:
                raise RuntimeError("the provider's stream ended without a result")
            message = _answered_by(result, choice, raised)
            if result is not None and result.refused_images:
                log.warning("model %s refused an image of the request", choice.label)
                yield AssistantResult(message, result.refused_images)
                return
            last = position == len(ordered) - 1
            if message.stop_reason != "error" or streamed:
                yield AssistantResult(message)
                return
            why = _first_line(message.error_message or "the call failed")
            failures.append((choice, why))
            if last:
                break
            following = ordered[position + 1]
            log.warning("model %s failed (%s); switching to %s", choice.label, why, following.label)
        yield AssistantResult(_all_failed(message, failures))


def without_foreign_thinking(messages: list[Message], provider: str, model: str) -> list[Message]:
    """``messages`` without the thinking blocks that another provider or model wrote.

    Assistant messages keep their thinking only when ``provider`` and ``model`` wrote them
    (its signature is then one that model can check); other messages are left as they are.
    """
    kept: list[Message] = []
    for message in messages:
        if (
            message.role != "assistant"
            or isinstance(message.content, str)
            or (message.provider == provider and message.model == model)
            or not any(isinstance(b, ThinkingContent) for b in message.content)
        ):
            kept.append(message)
            continue
        content = [b for b in message.content if not isinstance(b, ThinkingContent)]
        kept.append(message.model_copy(update={"content": content}))
    return kept


def _find(models: list[ModelChoice], name: str) -> int | None:
    return next((i for i, c in enumerate(models) if c.name == name), None)


def _tool_loop_author(messages: list[Message]) -> tuple[str, str] | None:
    """(provider, model) of the assistant message whose tool calls the request answers."""
    if not messages or messages[-1].role != "tool_result":
        return None
    for message in reversed(messages):
        if message.role == "assistant":
            if message.provider is None or message.model is None:
                return None
            return message.provider, message.model
        if message.role == "user":
            return None
    return None


def _answered_by(
    result: AssistantResult | None, choice: ModelChoice, raised: str | None = None
) -> Message:
    """The call's message, naming the model that answered (a stream without a result fails)."""
    if result is None:
        return Message(
            role="assistant",
            stop_reason="error",
            error_message=raised or "the provider's stream ended without a result",
            model=choice.name,
            provider=choice.provider.name,
        )
    # Named as configured (not as the API reports it, often a dated snapshot): that is the
    # name /model lists, and what later calls compare thinking blocks against.
    return result.message.model_copy(
        update={"model": choice.name, "provider": choice.provider.name}
    )


def _all_failed(last: Message, failures: list[tuple[ModelChoice, str]]) -> Message:
    if len(failures) < 2:
        return last
    reasons = "; ".join(f"{choice.label}: {why}" for choice, why in failures)
    return last.model_copy(update={"error_message": f"No model could answer ({reasons})"})


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


__all__ = ["FailoverProvider", "ModelChoice", "without_foreign_thinking"]
