"""Model providers and the registry that builds one from its configured name.

Providers are imported only when asked for, so a daemon that never talks to one model
backend never imports its SDK.
"""

from __future__ import annotations

from typing import Any

from ...retry import Backoff
from ..types import Provider, ProviderError

PROVIDER_NAMES: tuple[str, ...] = ("anthropic", "openai", "scripted")

DEFAULT_IDLE_TIMEOUT = 60.0
"""Seconds a model stream may stay silent (not one byte) before it is abandoned."""

CONNECT_TIMEOUT = 30.0
"""Longest wait for a connection to the model's server (capped by the idle timeout)."""

NO_ANSWER_IN_TIME = "The model did not answer in time; please try again."
"""The error a stalled model call ends with: the one line the user reads, whoever the provider."""


def retry_backoff() -> Backoff:
    """Delays between model-call retries the server gave no wait for (one per request).

    0.5 s doubling up to 8 s, each up to a quarter shorter at random so that clients that
    failed together spread out.
    """
    return Backoff(0.5, factor=2.0, cap=8.0, jitter=0.25)


def create_provider(name: str, /, **settings: Any) -> Provider:
    """The provider called ``name``, built from ``settings``.

    ``scripted`` takes ``script`` (a YAML file path) besides its constructor's keywords.
    Unknown names and unusable settings raise ``ProviderError``. ``name`` is positional
    only, so a provider may take a ``name`` setting of its own.
    """
    if name == "anthropic":
        from .anthropic import AnthropicProvider

        return AnthropicProvider(**settings)  # type: ignore[no-any-return,unused-ignore]
    if name == "openai":
        from .openai import OpenAIProvider

        return OpenAIProvider(**settings)  # type: ignore[no-any-return,unused-ignore]
    if name == "scripted":
        return _create_scripted(settings)
    known = ", ".join(PROVIDER_NAMES)
    raise ProviderError(f"unknown provider {name!r} (known: {known})")


def _create_scripted(settings: dict[str, Any]) -> Provider:
    from .scripted import ScriptedProvider

    settings = dict(settings)
    script_path = settings.pop("script", None)
    allowed = {"chunk_chars", "delay", "name"}
    unknown = sorted(set(settings) - allowed)
    if unknown:
        raise ProviderError(
            f"scripted provider: unknown setting(s) {', '.join(unknown)} "
            f"(known: script, {', '.join(sorted(allowed))})"
        )
    if script_path is not None:
        return ScriptedProvider.from_yaml(script_path, **settings)
    return ScriptedProvider(**settings)
