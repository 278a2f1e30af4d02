"""Whether a conversation's answers are spoken: ``/voice on``, ``/voice off``, ``/voice``.

``VoiceSwitch`` keeps each conversation's choice in the store (``VoiceChoices``), so it
survives a restart, and answers the command. A run asks it (``on``) whether to speak every
reply of the run; speaking is delivery's (``botd.delivery.voice``). With ``media.speech``
not configured nothing is spoken and ``/voice on`` says so in one line, keeping nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..store import StoreError
from ..store.protocols import VoiceChoices

log = logging.getLogger(__package__)

NOT_CONFIGURED = "Voice replies are not set up on this bot (media.speech is not configured)."
USAGE = "Use /voice on or /voice off (/voice alone says which it is)."


class VoiceSwitch:
    """Each conversation's ``/voice`` choice; ``configured()``: whether ``media.speech`` is
    set now (a reload may set or unset it)."""

    def __init__(self, store: VoiceChoices, *, configured: Callable[[], bool]) -> None:
        self._store = store
        self.configured = configured
        self._choices: dict[str, bool] = {}

    async def on(self, conversation_key: str) -> bool:
        """Whether the conversation's answers are spoken now (False when the store cannot
        tell: the answer goes as text)."""
        if not self.configured():
            return False
        if conversation_key not in self._choices:
            try:
                self._choices[conversation_key] = await self._store.voice_replies(conversation_key)
            except StoreError as exc:
                log.error("reading the voice choice of %s failed: %s", conversation_key, exc)
                return False
        return self._choices[conversation_key]

    async def answer(
        self, conversation_key: str, argument: str, store: VoiceChoices | None = None
    ) -> str:
        """``/voice [on|off]``; a change is written through ``store`` (the conversation's
        view, fenced by its lease; None: the switch's own)."""
        word = argument.strip().lower()
        if word not in ("", "on", "off"):
            return USAGE
        if not self.configured() and word != "off":
            return NOT_CONFIGURED
        if word == "":
            if await self.on(conversation_key):
                return "Voice replies are on: answers come as voice notes with their text."
            return "Voice replies are off: answers come as text (/voice on to hear them)."
        wanted = word == "on"
        try:
            await (store or self._store).set_voice_replies(conversation_key, wanted)
        except StoreError as exc:
            log.error("keeping the voice choice of %s failed: %s", conversation_key, exc)
            return "The choice could not be kept now (storage failing); nothing changed."
        self._choices[conversation_key] = wanted
        if wanted:
            return "Voice replies are on: answers come as voice notes with their text."
        return "Voice replies are off: answers come as text."


__all__ = ["NOT_CONFIGURED", "USAGE", "VoiceSwitch"]
