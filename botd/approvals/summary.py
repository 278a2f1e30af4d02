"""What a request to approve a tool call shows of it: ``tool(name="value", ...)``, bounded
and with nothing botd keeps secret.

Each argument's value is cut to ``VALUE_CHARS`` characters and the whole to
``SUMMARY_CHARS``; an argument named like a credential (``password``, ``token``,
``api_key`` ...) shows as ``•••``; the rest goes through ``mask_secrets``, which hides the
secrets botd knows (the config's) and token-shaped text, as every log line does. Backticks
become quotes, so the summary stays one inline code span.

A request that offers to allow the exact call for good shows it whole instead
(``exact_call``), or does not offer that when it cannot.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ..ops.logging import mask_secrets

VALUE_CHARS = 80
"""The most characters one argument's value shows."""
SUMMARY_CHARS = 300
"""The most characters the whole summary shows."""
EXACT_CHARS = 600
"""The most characters a call shown whole (``exact_call``) may have."""
HIDDEN = "•••"

_SECRET_NAME = re.compile(
    r"pass(word|phrase)?|secret|token|api[_-]?key|auth|credential|private[_-]?key|cookie",
    re.IGNORECASE,
)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _value(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return _cut(text, VALUE_CHARS)


def exact_call(tool_name: str, arguments: Mapping[str, Any]) -> str | None:
    """``tool_name(arg=value, ...)`` with every value whole, for a request that offers to
    allow this exact call for good: the approver must see all of what they allow. None when
    it cannot be shown so: longer than ``EXACT_CHARS``, or with an argument named like a
    credential or text botd masks (the approver would grant what they cannot read)."""
    if any(_SECRET_NAME.search(name) for name in arguments):
        return None
    parts = [
        f"{name}={json.dumps(value, ensure_ascii=False, separators=(',', ':'), default=str)}"
        for name, value in arguments.items()
    ]
    shown = f"{tool_name}({', '.join(parts)})"
    if len(shown) > EXACT_CHARS or mask_secrets(shown) != shown or "`" in shown:
        return None
    return shown


def call_summary(tool_name: str, arguments: Mapping[str, Any]) -> str:
    """``tool_name(arg=value, ...)`` as a request shows it (see the module docstring)."""
    parts = [
        f"{name}={HIDDEN if _SECRET_NAME.search(name) else _value(value)}"
        for name, value in arguments.items()
    ]
    summary = _cut(f"{tool_name}({', '.join(parts)})", SUMMARY_CHARS - 1)
    if not summary.endswith(")"):
        summary += ")"
    return mask_secrets(summary).replace("`", "'")


__all__ = ["EXACT_CHARS", "HIDDEN", "SUMMARY_CHARS", "VALUE_CHARS", "call_summary", "exact_call"]
