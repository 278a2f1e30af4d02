"""Whether an optional part of botd is installed (its pip extra), asked without importing it."""

from __future__ import annotations

import importlib.util


def installed(module: str) -> bool:
    """Whether top-level ``module`` can be imported, found without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
