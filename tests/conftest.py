"""Test-wide settings.

Hypothesis explores new random examples on every local run, which is how it finds bugs; in
CI (``CI`` set) it is derandomized so that a run is reproducible and a red build always
means a change, not a lucky draw.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
