"""Coalescing block replies before delivery, with time passed in.

Small blocks that stream in quick succession read better as one message. The coalescer
joins text blocks until the joined text would pass ``max_chars``, a block with different
threading or voice flags arrives, media arrives, or no block came for ``idle_ms`` while at
least ``min_chars`` are waiting. It never reads a clock: callers pass ``now`` (milliseconds)
and call ``poll`` at ``deadline``, so delivery can drive it from its own loop and tests from
a counter.

It drops nothing: repeats never reach it, since the subscriber emits each block once even
when a ``text_end`` arrives twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..subscriber.payloads import BlockReply


@dataclass(slots=True)
class BlockCoalescer:
    min_chars: int
    max_chars: int
    idle_ms: float
    joiner: str = "\n\n"
    _parts: list[str] = field(default_factory=list)
    _length: int = 0
    _template: BlockReply | None = None
    deadline: float | None = None
    """When ``poll`` should next be called (None: nothing is waiting)."""

    def add(self, reply: BlockReply, now: float) -> list[BlockReply]:
        """Queue ``reply``; returns what must be sent now, in order."""
        ready: list[BlockReply] = []
        if reply.media_urls:
            ready += self.flush()
            ready.append(reply)
            return ready
        template = self._template
        if template is not None and (
            template.reply_to_id != reply.reply_to_id
            or template.audio_as_voice != reply.audio_as_voice
            or template.tts != reply.tts
        ):
            ready += self.flush()
        if len(reply.text) > self.max_chars:
            ready += self.flush()
            ready.append(reply)
            return ready
        added = len(reply.text) + (len(self.joiner) if self._parts else 0)
        if self._parts and self._length + added > self.max_chars:
            ready += self.flush()
            added = len(reply.text)
        if self._template is None:
            self._template = reply
        self._parts.append(reply.text)
        self._length += added
        if self._length >= self.max_chars:
            ready += self.flush()
        else:
            self.deadline = now + self.idle_ms
        return ready

    def poll(self, now: float) -> list[BlockReply]:
        """Send what has waited long enough; a buffer below ``min_chars`` waits again."""
        if self.deadline is None or now < self.deadline:
            return []
        if self._length >= self.min_chars:
            return self.flush()
        self.deadline = now + self.idle_ms
        return []

    def flush(self) -> list[BlockReply]:
        """Everything waiting, as one block (or nothing)."""
        template = self._template
        self.deadline = None
        if template is None:
            return []
        text = self.joiner.join(self._parts)
        self._parts = []
        self._length = 0
        self._template = None
        return [replace(template, text=text)]
