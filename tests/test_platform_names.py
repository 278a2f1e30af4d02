"""The core names no platform: outside ``botd/channels/<platform>/``, no module of ``botd``
has a platform's name in its code (a string or an identifier), read with ``ast``. What a
platform means (its section, ids, targets, markup, probes, init questions, log lines) its
package says through its spec; docstrings and comments may still name one as an example.

``ALLOWED`` lists the few exceptions, each with its reason; an entry that no longer matches
anything fails too, so the list stays short and true. The reader is also run on a tiny
package written to ``tmp_path``, so a reader that saw nothing could not pass.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "botd"

PLATFORMS = ("telegram", "slack", "discord", "console")
"""The built-in platforms: each may be named inside its own package ``botd/channels/<name>``."""

ALLOWED = {
    ("config/loader.py", "console"): "the embedded default config (`botd run` without --config) "
    "is a console chat: a value of botd's own default config, as a user's file names a channel",
    ("cli/__init__.py", "console"): "`botd run --help` says what runs without --config: the "
    "embedded default's console chat",
    ("web/page.py", "console"): "the web page's script and style sheet are /console.js and "
    "/console.css, the paths issue 39's contract gives them",
    ("web/guard.py", "console"): "the header a write from the web page carries, "
    "X-Botd-Console, named by issue 39's contract (and the login form's /console.css)",
}
"""(module path under botd/, platform): why that module may name it in code."""

_NAME = re.compile("|".join(PLATFORMS), re.IGNORECASE)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string statements: docstrings of modules, classes, functions and
    attributes (a string right under an assignment)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            statements = getattr(node, field, None)
            if not isinstance(statements, list):
                continue
            for statement in statements:
                if (
                    isinstance(statement, ast.Expr)
                    and isinstance(statement.value, ast.Constant)
                    and isinstance(statement.value.value, str)
                ):
                    found.add(id(statement.value))
    return found


def _words(node: ast.AST, docstrings: set[int]) -> Iterator[str]:
    """The strings and identifiers ``node`` itself writes (comments never reach the tree)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if id(node) not in docstrings:
            yield node.value
    elif isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name
    elif isinstance(node, ast.arg | ast.keyword) and node.arg:
        yield node.arg
    elif isinstance(node, ast.alias):
        yield node.name
        if node.asname:
            yield node.asname
    elif isinstance(node, ast.ImportFrom) and node.module:
        yield node.module


def platform_names(package: Path) -> dict[tuple[str, str], list[int]]:
    """Each (module path under the package, platform) named in code outside that platform's
    package, with the lines."""
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        parts = relative.parts
        home = parts[1] if len(parts) > 2 and parts[0] == "channels" else None
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            for word in _words(node, docstrings):
                for match in _NAME.finditer(word):
                    platform = match.group().lower()
                    if platform != home:
                        lines = found.setdefault((relative.as_posix(), platform), [])
                        lines.append(getattr(node, "lineno", 0))
    return found


def test_the_core_names_no_platform() -> None:
    found = platform_names(PACKAGE)
    named = {key: lines for key, lines in found.items() if key not in ALLOWED}
    assert named == {}
    assert [key for key in ALLOWED if key not in found] == []  # no stale exception


def test_the_reader_finds_names_in_code_and_not_in_docs(tmp_path: Path) -> None:
    package = tmp_path / "botd"
    files = {
        "inbound/router.py": '''\
            """Routes messages (a Telegram group, a Slack thread)."""
            from .kinds import slack_kind  # Discord too

            def kind(chat: str) -> str:
                """What a Discord id tells."""
                if chat.startswith("-100"):
                    return "telegram"
                return slack_kind(chat)

            LIMIT = 3
            """Like Discord's limit."""
            ''',
        "ops/logging.py": "QUIET = (('discord.client', 'voice'),)\n",
        "channels/telegram/spec.py": "NAME = 'telegram'\nOTHER = 'slack'\n",
        "channels/registry.py": "def load(console_first: bool) -> None: ...\n",
    }
    for relative, source in files.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    assert platform_names(package) == {
        ("inbound/router.py", "slack"): [2, 8],
        ("inbound/router.py", "telegram"): [7],
        ("ops/logging.py", "discord"): [1],
        ("channels/telegram/spec.py", "slack"): [2],
        ("channels/registry.py", "console"): [1],
    }
