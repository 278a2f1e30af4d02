"""The reference's behaviour cases (spec/subscriber.md section 15), as data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CASES_FILE = Path(__file__).with_name("subscriber-cases.json")


def load_cases(*kinds: str) -> list[dict[str, Any]]:
    """Every case of the given kinds, in file order."""
    cases: list[dict[str, Any]] = json.loads(CASES_FILE.read_text(encoding="utf-8"))
    return [case for case in cases if case["kind"] in kinds]


def case_ids(cases: list[dict[str, Any]]) -> list[str]:
    return [case["id"] for case in cases]
