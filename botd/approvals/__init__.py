"""Approvals of sensitive tool calls (``agent.approvals``): see ``gate``."""

from __future__ import annotations

from .gate import (
    NOT_AN_APPROVER,
    NOT_ITS_MESSAGE,
    PREFIX,
    ApprovalRules,
    Approvals,
    RequestPoster,
    RunPlace,
)
from .summary import call_summary

__all__ = [
    "NOT_AN_APPROVER",
    "NOT_ITS_MESSAGE",
    "PREFIX",
    "ApprovalRules",
    "Approvals",
    "RequestPoster",
    "RunPlace",
    "call_summary",
]
