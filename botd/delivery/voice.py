"""Voice replies: an answer's text spoken (``media.speech``) and sent as a voice note.

A reply is spoken when it carries ``[[tts]]`` or its conversation chose ``/voice on``
(``BlockReply.tts``). ``Voice.spoken`` runs in the run's outbox, before the reply is written
to the outbox journal: the text, as plain text (no Markdown marks read aloud), is sent to the
speech service once; its audio is written to a file of its own under the state dir
(``<state dir>/speech/<32 random hex digits>.ogg``), and the reply comes back naming that file
(``speech:<name>``, ``botd.delivery.media``) first among its media, as a voice note. So the
outbox keeps a reference, never the bytes, and a piece a crash left unconfirmed is uploaded
again from the same file: the audio is never made twice for one piece, and a confirmed piece
is never sent again. ``done`` deletes the file once its piece is confirmed (sent or refused);
files a crash left behind are swept (after a day) at the next voice reply.

The reply keeps its text: it goes as the voice note's caption where it fits the platform's
caption limit, else as a message of its own just before the voice note (``per_file``), so the
answer can be read as well as heard, and the transcript keeps the model's own text.

A text longer than ``max_chars`` is not spoken (a clipped recording would pass for the whole
answer): it goes as text, an INFO line says why. A synthesis that fails (a refusal, a 5xx, a
timeout) is not retried: the reply goes as text, and a WARNING gives the provider's words.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

from ..config.schema import SpeechSection
from ..media.speech import MEDIA_TYPES, SpeechFailed, synthesize
from ..subscriber import BlockReply
from ..text.markup import PLAIN
from .media import SPEECH_NAME, SPEECH_PREFIX, is_speech

log = logging.getLogger(__name__)

SPEECH_DIR = "speech"
"""The state dir's subdirectory holding voice replies' audio until it is confirmed."""
LEFT_FOR = 24 * 3600.0
"""Seconds a voice reply's file may stay before a sweep deletes it (a crash left it)."""

Synthesize = Callable[[SpeechSection, str], Awaitable[bytes]]


def speech_dir(state_dir: Path) -> Path:
    """Where voice replies' audio waits for its upload under ``state_dir``."""
    return state_dir / SPEECH_DIR


class Voice:
    """Speaks replies through the service ``settings()`` names (``media.speech`` in force,
    read at each reply: a reload applies to the next; None: nothing is spoken) into files
    under ``directory``."""

    def __init__(
        self,
        settings: Callable[[], SpeechSection | None],
        directory: Path,
        *,
        synthesizer: Synthesize = synthesize,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self.directory = directory
        self._synthesize = synthesizer
        self._clock = clock
        self._swept = False

    @property
    def configured(self) -> bool:
        """Whether a speech service is configured now."""
        return self._settings() is not None

    async def spoken(self, reply: BlockReply, where: str) -> BlockReply:
        """``reply`` with its text spoken, as a voice note first among its media; the
        reply unchanged but no longer asking to be spoken when it is not (nothing to say,
        too long, the synthesis failed). ``where`` names the chat in log lines."""
        if not reply.tts:
            return reply
        unspoken = replace(reply, tts=False)
        settings = self._settings()
        text = PLAIN.render(reply.text).strip()
        if settings is None or not text:
            return unspoken
        limit = settings.max_chars
        if len(text) > limit:
            log.info(
                "a reply to %s is sent as text: %d characters, media.speech.max_chars is %d",
                where,
                len(text),
                limit,
            )
            return unspoken
        try:
            audio = await self._synthesize(settings, text)
        except SpeechFailed as exc:
            log.warning("a voice reply to %s is sent as text: %s", where, exc)
            return unspoken
        _, extension = MEDIA_TYPES[settings.format]
        name = secrets.token_hex(16) + extension
        await asyncio.to_thread(self._keep, name, audio)
        return replace(
            unspoken, media_urls=[SPEECH_PREFIX + name, *reply.media_urls], audio_as_voice=True
        )

    def done(self, reply: BlockReply) -> None:
        """The piece ``reply`` is confirmed (sent or refused): its audio file goes."""
        for reference in reply.media_urls:
            name = reference.strip().removeprefix(SPEECH_PREFIX)
            if is_speech(reference) and SPEECH_NAME.fullmatch(name):
                try:
                    (self.directory / name).unlink(missing_ok=True)
                except OSError as exc:
                    log.warning("removing the voice reply %s failed: %s", name, exc)

    def _keep(self, name: str, audio: bytes) -> None:
        """Write ``audio`` to ``name``, on disk before the outbox names it."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not self._swept:
            self._swept = True
            self._sweep()
        path = self.directory / name
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as file:
            file.write(audio)
            file.flush()
            os.fsync(file.fileno())

    def _sweep(self) -> None:
        """Delete the voice replies a crash left, once they are older than ``LEFT_FOR``."""
        cutoff = self._clock() - LEFT_FOR
        for path in self.directory.iterdir():
            try:
                if SPEECH_NAME.fullmatch(path.name) and path.stat().st_mtime < cutoff:
                    path.unlink()
            except OSError as exc:
                log.warning("removing the old voice reply %s failed: %s", path.name, exc)


__all__ = ["LEFT_FOR", "SPEECH_DIR", "Voice", "speech_dir"]
