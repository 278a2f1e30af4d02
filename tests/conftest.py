"""Test-wide settings.

Hypothesis explores new random examples on every local run, which is how it finds bugs; in
CI (``CI`` set) it is derandomized so that a run is reproducible and a red build always
means a change, not a lucky draw.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

import botd.logging as botd_logging

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(autouse=True)
def _secrets_registered_per_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """Secrets a test registers for masking (a daemon run in-process registers its config's)
    are forgotten after it, so no test's output depends on which ran before it."""
    monkeypatch.setattr(botd_logging, "_literal_secrets", set())
    monkeypatch.setattr(botd_logging, "_literal_pattern", None)
