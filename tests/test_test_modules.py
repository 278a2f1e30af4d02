"""No test module imports another: what tests share lives in harness modules (``harness.py``,
``routing.py``, ``daemon_inprocess.py``, ``tests/fakes/`` …), so running, moving or deleting one
test file never changes another. Read from the source with ``ast``; the rule is also run on a
tiny tree written to ``tmp_path`` that breaks it, so a reader that saw nothing could not pass.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def is_test_module(module: str) -> bool:
    return module.rsplit(".", 1)[-1].startswith("test_")


def imports_of_test_modules(root: Path) -> list[str]:
    """Each import of a test module by a test module under ``root`` (a package named like
    ``root``'s folder), as ``importer:line imports module``."""
    found = []
    for path in sorted(root.rglob("test_*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        importer = ".".join(parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            imported: list[str] = []
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    package = parts[: len(parts) - node.level]
                    base = ".".join([*package, *([base] if base else [])])
                imported = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            for module in imported:
                if module.startswith(f"{root.name}.") and is_test_module(module):
                    found.append(f"{importer}:{node.lineno} imports {module}")
    return found


def test_no_test_module_imports_another() -> None:
    assert imports_of_test_modules(TESTS) == []


def test_the_reader_sees_every_form_of_import(tmp_path: Path) -> None:
    root = tmp_path / "tests"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "test_a.py").write_text("def helper(): ...\n")
    (root / "sub" / "harness.py").write_text("from tests.sub.test_a import helper\n")
    (root / "sub" / "test_b.py").write_text(
        "import tests.sub.test_a\n"
        "from tests.sub import test_a\n"
        "from .test_a import helper\n"
        "from tests.sub.harness import helper as fine\n"
        "def test_x():\n    from tests.sub.test_a import helper\n"
    )
    assert sorted(imports_of_test_modules(root)) == [
        "tests.sub.test_b:1 imports tests.sub.test_a",
        "tests.sub.test_b:2 imports tests.sub.test_a",
        "tests.sub.test_b:3 imports tests.sub.test_a",
        "tests.sub.test_b:6 imports tests.sub.test_a",
    ]
