"""The run's scope is explicit, and delivery reads it in one place.

* No context variable carries protocol state: of ``botd``'s modules only the logging context
  (``ops.logging``) makes a ``ContextVar``, besides the one bridge the Telegram adapter's
  transport documents (python-telegram-bot has no per-request way to its HTTP client: the
  adapter sets the fence it was given around its own SDK calls).
* Of ``botd.delivery``'s modules only ``scope`` imports the lease fence
  (``botd.cluster.fencing``) or makes what an adapter call is given (``SendScope``): the
  others take the ``RunScope`` they are handed and pass it on, so how a fence is checked and
  handed to a platform is decided in that one module.

Read from the source with ``ast``; each rule is also run on a tiny package that breaks it, so
a reader that saw nothing could not pass.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import botd
import botd.delivery

BOTD = Path(botd.__file__).resolve().parent
DELIVERY = Path(botd.delivery.__file__).resolve().parent

CONTEXT_VARIABLES_ALLOWED = {"ops/logging.py", "channels/telegram/transport.py"}
"""The modules that may make a context variable: the logging context, and the Telegram bridge."""


def _reads_scope(node: ast.AST) -> bool:
    """An import of the fence, or a ``SendScope`` made."""
    if isinstance(node, ast.Import):
        return any(alias.name.endswith("cluster.fencing") for alias in node.names)
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        names = {alias.name for alias in node.names}
        return module.endswith("cluster.fencing") or (
            module.endswith("cluster") and "fencing" in names
        )
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        return name == "SendScope"
    return False


def scope_reads(package: Path) -> list[str]:
    """Each import of the fence or ``SendScope`` made in ``package``'s modules but
    ``scope``, as ``module.py:line``."""
    found = []
    for path in sorted(package.glob("*.py")):
        if path.stem == "scope":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if _reads_scope(node):
                found.append(f"{path.name}:{getattr(node, 'lineno', 0)}")
    return found


def context_variables(package: Path) -> list[str]:
    """Each ``ContextVar`` made in ``package`` (any depth), as ``path:line``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name == "ContextVar":
                found.append(f"{path.relative_to(package).as_posix()}:{node.lineno}")
    return found


def test_no_context_variable_carries_protocol_state() -> None:
    made = context_variables(BOTD)
    assert made, "the logging context is made somewhere"
    assert {place.rsplit(":", 1)[0] for place in made} <= CONTEXT_VARIABLES_ALLOWED, made


def test_a_context_variable_made_anywhere_is_found(tmp_path: Path) -> None:
    package = tmp_path / "botd"
    (package / "cluster").mkdir(parents=True)
    (package / "cluster" / "fencing.py").write_text(
        "import contextvars\nfrom contextvars import ContextVar\n"
        "_a = ContextVar('a')\n_b = contextvars.ContextVar('b')\n"
    )
    assert context_variables(package) == ["cluster/fencing.py:3", "cluster/fencing.py:4"]


def test_only_the_scope_module_reads_the_fence_and_makes_send_scopes() -> None:
    assert (DELIVERY / "scope.py").exists()
    assert scope_reads(DELIVERY) == []


def test_a_delivery_module_reading_the_fence_or_making_a_send_scope_is_found(
    tmp_path: Path,
) -> None:
    package = tmp_path / "delivery"
    package.mkdir()
    (package / "scope.py").write_text("from ..cluster import fencing\n")
    (package / "sender.py").write_text(
        textwrap.dedent(
            """\
            from ..channels.base import ChannelAdapter, SendScope
            from ..cluster import fencing
            scope = SendScope(None)
            """
        )
    )
    (package / "outbox.py").write_text(
        "from ..cluster.leases import LeaseLost\nimport botd.cluster.fencing\n"
    )
    assert scope_reads(package) == ["outbox.py:2", "sender.py:2", "sender.py:3"]
