"""The shape of ``botd``'s imports, read from the source with ``ast``: no import cycle, no
private name imported from another module, each chat platform's SDK imported only inside
that platform's channel package, no platform package imported from outside itself (the core
and the other platforms ask the channel specs), the channels below the pipeline (they
import nothing of the subscriber, delivery, sessions, inbound or agent packages: what they
share with the subscriber is in ``botd.text``), and the SQLite store imported only by the
store package (its backend spec opens it) and the operator's commands (every other module
takes a protocol of ``botd.store``, so that another backend fits behind them).

Every import counts wherever it is written: at module level, inside a function (a deferred
import is still a dependency) or under ``if TYPE_CHECKING:``. The one exception: imports under
``TYPE_CHECKING`` are left out of the cycle check, because they never run; a type named across
a back edge does not make the modules load each other. They still count for the private-name
and SDK rules.

Each rule is also run on a tiny package written to ``tmp_path`` that breaks it, so a reader
that saw nothing could not pass.
"""

from __future__ import annotations

import ast
import functools
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "botd"

SDKS = {
    "telegram": "botd.channels.telegram",
    "slack_sdk": "botd.channels.slack",
    "slack_bolt": "botd.channels.slack",
    "discord": "botd.channels.discord",
}
"""A platform SDK's top-level module, and the one package that may import it."""

PLATFORM_PACKAGES = ("telegram", "slack", "discord", "console", "acp")
"""The built-in platforms' packages under ``botd.channels``: only ``botd.channels`` imports them."""

ABOVE_CHANNELS = ("subscriber", "delivery", "sessions", "conversation", "inbound", "agent")
"""The pipeline's packages, which use the channels and which no channel module may import."""

SQLITE_STORE = "store.sqlite"
"""The SQLite implementation of the store's protocols, under ``botd``."""
SEES_THE_WHOLE_STORE = ("cli", "ops.doctor")
"""What may import it besides the store package itself (whose backend spec,
``botd.store.backends``, is how the daemon opens it): the operator's commands that read the
database file directly."""


@dataclass(frozen=True)
class Import:
    importer: str
    module: str
    """The module imported from, resolved to an absolute name."""
    name: str | None
    """The name imported from it (``from module import name``); None for ``import module``."""
    line: int
    typing_only: bool
    """Written under ``if TYPE_CHECKING:`` (never run)."""


def module_name(package: Path, path: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path) -> dict[str, Path]:
    return {module_name(package, path): path for path in sorted(package.rglob("*.py"))}


def _typing_only_nodes(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside an ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``) body."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        named = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        )
        if named:
            for statement in node.body:
                inside.update(id(child) for child in ast.walk(statement))
    return inside


def imports(name: str, path: Path) -> Iterator[Import]:
    """Every import in the module ``name`` (at ``path``), at any depth."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = _typing_only_nodes(tree)
    for node in ast.walk(tree):
        hidden = id(node) in typing_only
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, alias.name, None, node.lineno, hidden)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                yield Import(name, module, alias.name, node.lineno, hidden)


@functools.cache
def all_imports(package: Path) -> tuple[Import, ...]:
    """Every import of every module of ``package``, read once per package (the rules below
    each ask for them; a package is not changed once it was read)."""
    return tuple(found for name, path in modules(package).items() for found in imports(name, path))


def graph(package: Path) -> dict[str, set[str]]:
    """Which of the package's modules each module imports when it runs (``TYPE_CHECKING``
    imports left out); ``from package import module`` counts as importing that module."""
    known = modules(package)
    edges: dict[str, set[str]] = {name: set() for name in known}
    for found in all_imports(package):
        if found.typing_only:
            continue
        target = found.module
        if found.name is not None and f"{found.module}.{found.name}" in known:
            target = f"{found.module}.{found.name}"
        if target in known and target != found.importer:
            edges[found.importer].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def private_imports(package: Path) -> list[str]:
    """``from module import _name`` across modules of the package (a private *module* may be
    imported: it belongs to its package; dunder names are not private)."""
    known = modules(package)
    return [
        f"{found.importer}:{found.line} imports {found.module}.{found.name}"
        for found in all_imports(package)
        if found.module.partition(".")[0] == package.name
        and found.name is not None
        and found.name.startswith("_")
        and not found.name.startswith("__")
        and f"{found.module}.{found.name}" not in known
        and found.module != found.importer
    ]


def misplaced_sdk_imports(package: Path) -> list[str]:
    """Imports of a platform SDK outside the channel package that owns it."""
    misplaced = []
    for found in all_imports(package):
        home = SDKS.get(found.module.partition(".")[0])
        if home is None:
            continue
        if found.importer != home and not found.importer.startswith(f"{home}."):
            misplaced.append(f"{found.importer}:{found.line} imports {found.module}")
    return misplaced


def platform_imports_outside_channels(package: Path) -> list[str]:
    """Imports of a platform package (``botd.channels.telegram``...) from outside that
    package: the core and the other platforms ask the registered specs instead (botd finds
    its own channels' specs by looking into ``botd.channels``, importing no name of them)."""
    homes = tuple(f"{package.name}.channels.{name}" for name in PLATFORM_PACKAGES)
    found_imports = []
    for found in all_imports(package):
        names = [found.module]
        if found.name is not None:
            names.append(f"{found.module}.{found.name}")
        for home in homes:
            if found.importer == home or found.importer.startswith(f"{home}."):
                continue
            if any(name == home or name.startswith(f"{home}.") for name in names):
                found_imports.append(f"{found.importer}:{found.line} imports {names[-1]}")
    return found_imports


def channel_imports_upwards(package: Path) -> list[str]:
    """Imports by a ``botd.channels`` module of a package above the channels."""
    above = tuple(f"{package.name}.{name}" for name in ABOVE_CHANNELS)
    return [
        f"{found.importer}:{found.line} imports {found.module}"
        for found in all_imports(package)
        if found.importer.startswith(f"{package.name}.channels")
        and any(found.module == top or found.module.startswith(f"{top}.") for top in above)
    ]


def concrete_store_imports(package: Path) -> list[str]:
    """Imports of the SQLite store (``botd.store.sqlite``) by a module outside the store
    package and the operator's commands (``SEES_THE_WHOLE_STORE``)."""
    sqlite = f"{package.name}.{SQLITE_STORE}"
    allowed = (f"{package.name}.store", *(f"{package.name}.{m}" for m in SEES_THE_WHOLE_STORE))
    found_imports = []
    for found in all_imports(package):
        if any(found.importer == top or found.importer.startswith(f"{top}.") for top in allowed):
            continue
        names = [found.module]
        if found.name is not None:
            names.append(f"{found.module}.{found.name}")
        if any(name == sqlite or name.startswith(f"{sqlite}.") for name in names):
            found_imports.append(f"{found.importer}:{found.line} imports {names[-1]}")
    return found_imports


# --- botd itself ----------------------------------------------------------------------------


def test_botd_has_no_import_cycle() -> None:
    assert cycles(graph(PACKAGE)) == []


def test_no_private_name_is_imported_from_another_module() -> None:
    assert private_imports(PACKAGE) == []


def test_each_platform_sdk_is_imported_only_in_its_channel_package() -> None:
    assert misplaced_sdk_imports(PACKAGE) == []


def test_no_platform_package_is_imported_from_outside_it() -> None:
    assert platform_imports_outside_channels(PACKAGE) == []


def test_the_channels_import_nothing_of_the_pipeline_above_them() -> None:
    assert channel_imports_upwards(PACKAGE) == []


def test_only_the_store_and_the_operator_commands_import_the_sqlite_store() -> None:
    assert concrete_store_imports(PACKAGE) == []


def test_the_reader_sees_botd_as_it_is() -> None:
    """The rules above pass for a reason: the reader finds botd's modules, its deferred
    imports and each platform's SDK imports, where they are."""
    known = modules(PACKAGE)
    assert {"botd.chat", "botd.channels.telegram.adapter", "botd.inbound.router"} <= set(known)
    # Each platform's spec imports its adapter inside its factory only.
    assert "botd.channels.telegram.adapter" in graph(PACKAGE)["botd.channels.telegram.spec"]
    importers = {
        top: {found.importer for found in all_imports(PACKAGE) if found.module.startswith(top)}
        for top in SDKS
    }
    assert all(importers.values()), importers
    assert "botd.channels.discord.adapter" in importers["discord"]
    # The backend spec opens the SQLite store and the doctor reads its file (the rule above
    # has something to allow, inside the store package and outside it).
    sqlite_importers = {
        found.importer
        for found in all_imports(PACKAGE)
        if found.module.startswith("botd.store.sqlite")
    }
    assert {"botd.store.backends", "botd.ops.doctor.state"} <= sqlite_importers


# --- each rule catches what it is for -------------------------------------------------------


def write_package(root: Path, files: dict[str, str]) -> Path:
    """A package ``botd`` under ``root`` holding ``files`` (paths relative to it)."""
    package = root / "botd"
    for relative, source in files.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in path.relative_to(package).parents:
            (package / folder / "__init__.py").touch()
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return package


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "a.py": "from .b import B\n",
            "b.py": "def later():\n    from . import a\n",
            "c.py": "from .a import B\n",
        },
    )
    assert cycles(graph(package)) == [["botd.a", "botd.b"]]


def test_a_type_checking_back_edge_is_no_cycle(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "a.py": "from .b import B\n",
            "b.py": """\
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from .a import A
                """,
        },
    )
    assert cycles(graph(package)) == []
    assert [found.typing_only for found in all_imports(package) if found.importer == "botd.b"] == [
        False,
        True,
    ]


def test_a_private_name_from_another_module_is_found(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "store/base.py": "def _preflight(): ...\n",
            "store/_sql.py": "",
            "doctor.py": """\
                from botd import __version__
                from .store import _sql
                def check():
                    from .store.base import _preflight
                """,
        },
    )
    assert private_imports(package) == ["botd.doctor:4 imports botd.store.base._preflight"]


def test_a_platform_sdk_outside_its_channel_package_is_found(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "channels/discord/adapter.py": "import discord\n",
            "channels/telegram/menu.py": "from telegram import BotCommand\n",
            "channels/slack/threads.py": "from telegram.ext import Application\n",
            "inbound/router.py": "def kind():\n    import slack_sdk.errors\n",
        },
    )
    assert sorted(misplaced_sdk_imports(package)) == [
        "botd.channels.slack.threads:1 imports telegram.ext",
        "botd.inbound.router:2 imports slack_sdk.errors",
    ]


def test_a_platform_package_imported_by_the_core_is_found(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "channels/registry.py": "from .telegram import targets\n",
            "channels/telegram/spec.py": "from . import targets\nfrom .targets import form\n",
            "channels/telegram/targets.py": "",
            "channels/slack/adapter.py": "from ..telegram.targets import form\n",
            "inbound/router.py": "def kind():\n    from ..channels.slack.targets import x\n",
            "ops/doctor.py": "from ..channels import discord\n",
        },
    )
    assert sorted(platform_imports_outside_channels(package)) == [
        "botd.channels.registry:1 imports botd.channels.telegram.targets",
        "botd.channels.slack.adapter:1 imports botd.channels.telegram.targets.form",
        "botd.inbound.router:2 imports botd.channels.slack.targets.x",
        "botd.ops.doctor:1 imports botd.channels.discord",
    ]


def test_a_channel_importing_the_pipeline_is_found(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "channels/markdown.py": "from botd.subscriber.fences import parse\n",
            "channels/base.py": "from ..chat import Target\nfrom ..text.fences import f\n",
            "delivery/channel.py": "from ..channels.markdown import render\n",
        },
    )
    assert channel_imports_upwards(package) == [
        "botd.channels.markdown:1 imports botd.subscriber.fences"
    ]


def test_the_sqlite_store_imported_outside_the_store_is_found(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "store/sqlite/base.py": "from ..records import Entry\n",
            "store/records.py": "",
            "store/__init__.py": "from .records import Entry\n",
            "store/backends.py": "def open():\n    from .sqlite import SqliteStore\n",
            "app.py": "from .store.sqlite import SqliteStore\n",
            "cli/status.py": "from ..store.sqlite.base import DB_FILENAME\n",
            "inbound/router.py": "from ..store import Entry\nfrom ..store.sqlite import base\n",
            "scheduler/store.py": "def f():\n    from botd.store.sqlite.base import StoreBase\n",
        },
    )
    assert sorted(concrete_store_imports(package)) == [
        "botd.app:1 imports botd.store.sqlite.SqliteStore",
        "botd.inbound.router:2 imports botd.store.sqlite.base",
        "botd.scheduler.store:2 imports botd.store.sqlite.base.StoreBase",
    ]
