"""Delivery reads the run's scope in one place: of ``botd.delivery``'s modules only ``scope``
imports the lease fence (``botd.cluster.fencing``) or the key of the message being posted
(``botd.channels.base.sending``), both still carried in context variables, so that passing
them explicitly changes that module and its callers, nothing else. Read from the source with
``ast``; the rule is also run on a tiny package that breaks it, so a reader that saw nothing
could not pass.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import botd.delivery

DELIVERY = Path(botd.delivery.__file__).resolve().parent


def _reads_scope(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.Import):
        return any(alias.name.endswith("cluster.fencing") for alias in node.names)
    module = node.module or ""
    names = {alias.name for alias in node.names}
    return (
        module.endswith("cluster.fencing")
        or (module.endswith("cluster") and "fencing" in names)
        or (module.endswith("channels.base") and "sending" in names)
    )


def scope_reads(package: Path) -> list[str]:
    """Each import of the fence or of ``sending`` in ``package``'s modules but ``scope``,
    as ``module.py:line``."""
    found = []
    for path in sorted(package.glob("*.py")):
        if path.stem == "scope":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom) and _reads_scope(node):
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_only_the_scope_module_reads_the_fence_and_the_piece_key() -> None:
    assert (DELIVERY / "scope.py").exists()
    assert scope_reads(DELIVERY) == []


def test_a_delivery_module_reading_the_fence_or_the_piece_key_is_found(tmp_path: Path) -> None:
    package = tmp_path / "delivery"
    package.mkdir()
    (package / "scope.py").write_text("from ..cluster import fencing\n")
    (package / "sender.py").write_text(
        textwrap.dedent(
            """\
            from ..channels.base import ChannelAdapter, sending
            from ..cluster import fencing
            """
        )
    )
    (package / "outbox.py").write_text(
        "from ..cluster.leases import LeaseLost\nimport botd.cluster.fencing\n"
    )
    assert scope_reads(package) == ["outbox.py:2", "sender.py:1", "sender.py:2"]
