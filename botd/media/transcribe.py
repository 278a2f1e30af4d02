"""Voice notes and audio files to text, through an OpenAI-compatible transcription API.

``transcribe`` posts the audio as multipart form data to ``{base_url}/audio/transcriptions``
(fields ``model`` and ``file``, the API key as a Bearer token) and returns the ``text`` of the
JSON answer. Any failure (a refused key, a 5xx, a timeout, an answer without text) raises
``TranscriptionFailed`` with one short line fit for the user; the API key never appears in it.
"""

from __future__ import annotations

import logging

from ..config.schema import TranscriptionSection
from ..net.tls import verified_context

log = logging.getLogger(__name__)


class TranscriptionFailed(Exception):
    """The audio could not be transcribed; the message is one short phrase for the user."""


async def transcribe(
    settings: TranscriptionSection, audio: bytes, *, filename: str, mime_type: str
) -> str:
    """The text spoken in ``audio`` (a file named ``filename`` of type ``mime_type``)."""
    import httpx  # at the first voice note: a botd that is sent none does not load it

    url = settings.base_url.rstrip("/") + "/audio/transcriptions"
    try:
        async with httpx.AsyncClient(timeout=settings.timeout, verify=verified_context()) as client:
            response = await client.post(
                url,
                headers={"Authorization": f"Bearer {settings.api_key}"},
                data={"model": settings.model},
                files={"file": (filename, audio, mime_type or "application/octet-stream")},
            )
    except httpx.TimeoutException:
        raise TranscriptionFailed("the transcription service timed out") from None
    except httpx.HTTPError as exc:
        log.warning("transcription request failed: %s", type(exc).__name__)
        raise TranscriptionFailed("the transcription service could not be reached") from None
    if response.status_code >= 400:
        log.warning("transcription refused: HTTP %d %s", response.status_code, response.text[:300])
        raise TranscriptionFailed(f"the transcription service failed (HTTP {response.status_code})")
    try:
        text = response.json()["text"]
    except (ValueError, KeyError, TypeError):
        raise TranscriptionFailed("the transcription service sent no text") from None
    if not isinstance(text, str):
        raise TranscriptionFailed("the transcription service sent no text")
    return text.strip()


__all__ = ["TranscriptionFailed", "transcribe"]
