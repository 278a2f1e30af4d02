"""Approvals of sensitive tool calls (``agent.approvals``): see ``gate``."""

from __future__ import annotations

from .gate import (
    APPROVE_OR_DENY,
    NOT_AN_APPROVER,
    NOT_AN_OWNER,
    NOT_ITS_MESSAGE,
    PREFIX,
    ApprovalRules,
    Approvals,
    Choice,
    RequestPoster,
    RunPlace,
    Verb,
)
from .summary import call_summary

__all__ = [
    "APPROVE_OR_DENY",
    "NOT_AN_APPROVER",
    "NOT_AN_OWNER",
    "NOT_ITS_MESSAGE",
    "PREFIX",
    "ApprovalRules",
    "Approvals",
    "Choice",
    "RequestPoster",
    "RunPlace",
    "Verb",
    "call_summary",
]
