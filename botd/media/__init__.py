"""Files users send, made into what the model can read: images as image blocks, voice notes
and audio as transcripts, text documents and PDFs as text (``inbound``)."""

from __future__ import annotations

from .inbound import MediaResolver, Resolved

__all__ = ["MediaResolver", "Resolved"]
