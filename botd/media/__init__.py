"""Files users send, made into what the model can read: images as image blocks, voice notes
and audio as transcripts, text documents and PDFs as text (``inbound``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .inbound import MediaResolver, Resolved

__all__ = ["MediaResolver", "Resolved"]


def __getattr__(name: str) -> object:
    # Loaded when first asked for, not with the package: the reading worker
    # (``python -m botd.media.worker``) imports this package too, and needs none of the
    # resolver's imports (pydantic, the channels), which would slow every worker's start.
    if name in __all__:
        from . import inbound

        return getattr(inbound, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
