"""What the crash tests share: a Telegram DM, the notice a resumed answer starts with, and a
long streamed answer to cut in the middle."""

from __future__ import annotations

from tests.fakes.anthropic_api import StreamReply, stream, text

DM = 777
TOKEN = "123456:TEST-TOKEN"
NOTICE = "(The answer was interrupted by a restart; continuing.)"
PARAGRAPHS = [f"Paragraph {n:02d} of the long answer." for n in range(1, 31)]


def long_answer(delay: float) -> StreamReply:
    return stream(text(*(p + "\n\n" for p in PARAGRAPHS)), delay=delay)
