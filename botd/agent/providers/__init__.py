"""Model providers and the registry that builds one from its configured name.

Providers are imported only when asked for, so a daemon that never talks to one model
backend never imports its SDK.
"""

from __future__ import annotations

from typing import Any

from ..types import Provider, ProviderError

PROVIDER_NAMES: tuple[str, ...] = ("anthropic", "openai", "scripted")


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
