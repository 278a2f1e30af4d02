"""The behaviour cases (spec subscriber.md section 15), as data.

``subscriber-cases.json`` is the reference's suite as shared with the team (kept as it is);
``subscriber-cases-found.json`` adds, in the same format, the cases of places where botd was
found to differ from the reference, each written when the difference was fixed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CASES_FILE = Path(__file__).with_name("subscriber-cases.json")
FOUND_CASES_FILE = Path(__file__).with_name("subscriber-cases-found.json")


def load_cases(*kinds: str) -> list[dict[str, Any]]:
    """Every case of the given kinds, in file order (the reference's first)."""
    cases: list[dict[str, Any]] = []
    for path in (CASES_FILE, FOUND_CASES_FILE):
        cases += json.loads(path.read_text(encoding="utf-8"))
    return [case for case in cases if case["kind"] in kinds]


def case_ids(cases: list[dict[str, Any]]) -> list[str]:
    return [case["id"] for case in cases]
