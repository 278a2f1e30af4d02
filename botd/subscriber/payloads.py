"""What the subscriber is configured with and what it hands out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..chat import Button, TargetForm
from .chunker import BreakPreference

BlockBreak = Literal["text_end", "message_end"]
ReasoningMode = Literal["off", "on", "stream"]


@dataclass(frozen=True, slots=True)
class ChunkingConfig:
    """Block sizes for streamed replies: by default 800 to 1200 characters, cut at paragraphs."""

    min_chars: int = 800
    max_chars: int = 1200
    break_preference: BreakPreference = "paragraph"


@dataclass(frozen=True, slots=True)
class SubscriberConfig:
    block_break: BlockBreak = "text_end"
    """Cut blocks at each ``text_end`` (as the text streams) or only at ``message_end``."""
    chunking: ChunkingConfig | None = field(default_factory=ChunkingConfig)
    """None: no chunker; each flush emits everything buffered as one block."""
    reasoning: ReasoningMode = "off"
    enforce_final_tag: bool = False
    """Deliver only text inside ``<final>...</final>``."""
    target_forms: Mapping[str, TargetForm] = field(default_factory=dict)
    """Each platform's spelling of a messaging-tool target, by channel name (the registered
    channels'), so that a send the agent made itself is recognised whatever its spelling."""


@dataclass(frozen=True, slots=True)
class BlockReply:
    """One chat block: a piece of the answer, ready for delivery."""

    text: str
    media_urls: list[str] = field(default_factory=list)
    audio_as_voice: bool = False
    reply_to_id: str | None = None
    reply_to_current: bool = False
    reply_to_tag: bool = False
    buttons: tuple[tuple[Button, ...], ...] = ()
    """Rows of buttons under the reply's last message (the ``[[buttons: ...]]`` directive)."""
    tts: bool = False
    """The reply is to be spoken (``[[tts]]``, or the conversation's ``/voice on``): delivery
    sends its text as a voice note as well (``botd.delivery.voice``)."""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "text": self.text,
            "media_urls": list(self.media_urls),
            "audio_as_voice": self.audio_as_voice,
            "reply_to_id": self.reply_to_id,
            "reply_to_current": self.reply_to_current,
            "reply_to_tag": self.reply_to_tag,
        }
        if self.buttons:
            data["buttons"] = [[button.label for button in row] for row in self.buttons]
        if self.tts:
            data["tts"] = True
        return data


class PartialReply:
    """The answer so far, for live previews. ``delta`` is what is new since the last one.

    ``text`` is built only when asked for: a consumer that edits a preview a few times a
    second reads it then, and streaming a long reply stays linear.
    """

    __slots__ = ("_text", "_text_source", "delta", "media_urls")

    def __init__(self, delta: str, media_urls: list[str], text_source: Callable[[], str]) -> None:
        self.delta = delta
        self.media_urls = media_urls
        self._text_source: Callable[[], str] | None = text_source
        self._text: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            assert self._text_source is not None
            self._text = self._text_source()
            self._text_source = None
        return self._text

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "delta": self.delta, "media_urls": list(self.media_urls)}

    def __repr__(self) -> str:
        return f"PartialReply(delta={self.delta!r}, media_urls={self.media_urls!r})"


@dataclass(frozen=True, slots=True)
class ToolError:
    tool_name: str
    error: str
    """The first line of the error, at most 400 characters."""


@dataclass(frozen=True, slots=True)
class RunSummary:
    assistant_texts: list[str]
    messaging_tool_sent_texts: list[str]
    messaging_tool_sent_targets: list[dict[str, Any]]
    did_send_via_messaging_tool: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "assistant_texts": list(self.assistant_texts),
            "messaging_tool_sent_texts": list(self.messaging_tool_sent_texts),
            "messaging_tool_sent_targets": [dict(t) for t in self.messaging_tool_sent_targets],
            "did_send_via_messaging_tool": self.did_send_via_messaging_tool,
        }
