"""Optional parts of botd that need a pip extra, and the one sentence naming what to install."""

from __future__ import annotations

import importlib.util


def installed(module: str) -> bool:
    """Whether top-level ``module`` can be imported, found without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_extra(what: str, extra: str, modules: tuple[str, ...]) -> str | None:
    """One sentence naming the extra ``what`` needs when one of ``modules`` is absent."""
    absent = [name for name in modules if not installed(name)]
    if not absent:
        return None
    return (
        f"{what} needs botd[{extra}] ({', '.join(absent)} not installed): "
        f"pip install 'botd[{extra}]'"
    )


WEB_MODULES = ("markdownify", "bs4")
"""What the ``web_fetch`` tool turns pages into text with (the ``web`` extra)."""
