"""The conversations see storage only through its protocols (``store.protocols``): no module
of ``botd.conversation`` imports the SQLite ``Store`` or one of its implementation modules."""

from __future__ import annotations

import ast
from pathlib import Path

import botd.conversation

PACKAGE = Path(botd.conversation.__file__).parent
ALLOWED_STORE_MODULES = {"botd.store", "botd.store.protocols"}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of each ``from ... import`` in ``path``, made absolute."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = "botd.conversation".split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.append((module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
    return found


def test_the_conversations_depend_on_the_store_protocols_only() -> None:
    offending = []
    for path in sorted(PACKAGE.glob("*.py")):
        for module, names in _imports(path):
            if not module.startswith("botd.store"):
                continue
            if module not in ALLOWED_STORE_MODULES or "Store" in names:
                offending.append(f"{path.name}: from {module} import {', '.join(names)}")
    assert offending == []
