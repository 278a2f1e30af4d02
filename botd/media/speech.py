"""Text to speech, through an OpenAI-compatible speech API: the audio of a voice reply.

``synthesize`` posts ``{"model", "voice", "input", "response_format"}`` as JSON to
``{base_url}/audio/speech`` (the API key as a Bearer token) and returns the audio bytes of
the answer. Any failure (a refused key, a 5xx, a timeout, an empty answer) raises
``SpeechFailed`` with one line in the provider's words where it gave some; the API key never
appears in it. There is one attempt: the caller falls back to the text.
"""

from __future__ import annotations

import json

from ..config.schema import SpeechFormat, SpeechSection
from ..net.tls import verified_context

MEDIA_TYPES: dict[SpeechFormat, tuple[str, str]] = {
    "opus": ("audio/ogg", ".ogg"),
    "mp3": ("audio/mpeg", ".mp3"),
}
"""Each format's media type and file name extension."""


class SpeechFailed(Exception):
    """The text could not be spoken; the message is one line (the provider's words)."""


async def synthesize(settings: SpeechSection, text: str) -> bytes:
    """The audio of ``text`` spoken, in ``settings.format``."""
    import httpx  # at the first voice reply: a botd that speaks none does not load it

    url = settings.base_url.rstrip("/") + "/audio/speech"
    body = {
        "model": settings.model,
        "voice": settings.voice,
        "input": text,
        "response_format": settings.format,
    }
    try:
        async with httpx.AsyncClient(timeout=settings.timeout, verify=verified_context()) as client:
            response = await client.post(
                url, headers={"Authorization": f"Bearer {settings.api_key}"}, json=body
            )
    except httpx.TimeoutException:
        raise SpeechFailed(f"the speech service timed out after {settings.timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise SpeechFailed(
            f"the speech service could not be reached ({type(exc).__name__})"
        ) from None
    if response.status_code >= 400:
        raise SpeechFailed(
            f"the speech service refused (HTTP {response.status_code}): {_said(response.text)}"
        )
    if not response.content:
        raise SpeechFailed("the speech service sent no audio")
    return response.content


def _said(body: str) -> str:
    """What an error answer says: OpenAI's ``error.message``, else its start, on one line."""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = body
    return " ".join(str(message).split())[:300] or "no reason given"


__all__ = ["MEDIA_TYPES", "SpeechFailed", "synthesize"]
