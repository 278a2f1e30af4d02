"""What a checkout ships: the files in botd/data, ``botd init --example``, ``botd unit``,
``python -m botd`` and the one version. ``tests/test_install.py`` checks the same from the
built wheel in a new virtualenv."""

from __future__ import annotations

import importlib.metadata
import io
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version

import botd
from botd.cli.init import print_unit, write_example
from tests.support.daemon_process import HANG_GUARD, daemon_env, run_botd

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "botd" / "data"
REFERENCE = ROOT / "docs" / "config-reference.yaml"
UNIT = ROOT / "systemd" / "botd.service"
NODE_DROP_IN = ROOT / "systemd" / "botd.service.d" / "mcp-node.conf"
EXEC_DROP_IN = ROOT / "systemd" / "botd.service.d" / "exec.conf"


def test_the_package_data_are_links_to_the_one_copy_of_each_file() -> None:
    # One copy in the repository: botd/data only points at the files people edit.
    shipped = {
        "config-reference.yaml": REFERENCE,
        "botd.service": UNIT,
        "mcp-node.conf": NODE_DROP_IN,
        "exec.conf": EXEC_DROP_IN,
    }
    for name, canonical in shipped.items():
        link = DATA / name
        assert link.is_symlink(), f"{link} should be a link to {canonical}"
        assert link.resolve() == canonical.resolve()
    assert sorted(p.name for p in DATA.iterdir()) == sorted(shipped)


def test_init_example_writes_the_reference_and_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "reference.yaml"
    result = run_botd("init", "--example", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert path.read_text(encoding="utf-8") == REFERENCE.read_text(encoding="utf-8")
    assert f"botd check --config {path}" in result.stdout

    path.write_text("mine\n")
    again = run_botd("init", "--example", str(path), cwd=tmp_path)
    assert again.returncode == 1
    assert again.stderr.strip() == f"botd: {path} exists; botd init never overwrites a file"
    assert path.read_text() == "mine\n"


def test_init_example_into_a_missing_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "no" / "such" / "dir.yaml"
    assert write_example(path, io.StringIO()) == 2
    assert capsys.readouterr().err == f"botd: cannot create {path}: No such file or directory\n"
    assert not path.exists()


def test_the_init_config_points_at_the_reference_not_at_a_file_of_the_clone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "botd.yaml"
    result = run_botd("init", str(path), input="console\nscripted\n", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = path.read_text()
    assert "config.example.yaml" not in text
    assert "botd init --example FILE" in text


def test_unit_prints_the_shipped_unit() -> None:
    result = run_botd("unit")
    assert result.returncode == 0, result.stderr
    assert result.stdout == UNIT.read_text(encoding="utf-8")
    out = io.StringIO()
    assert print_unit(out) == 0
    assert out.getvalue() == result.stdout


def test_unit_prints_the_node_and_exec_drop_ins() -> None:
    result = run_botd("unit", "--drop-in", "mcp-node")
    assert result.returncode == 0, result.stderr
    assert result.stdout == NODE_DROP_IN.read_text(encoding="utf-8")
    assert "MemoryDenyWriteExecute=no" in result.stdout
    exec_drop_in = run_botd("unit", "--drop-in", "exec")
    assert exec_drop_in.returncode == 0, exec_drop_in.stderr
    assert exec_drop_in.stdout == EXEC_DROP_IN.read_text(encoding="utf-8")
    assert "RestrictNamespaces=user mnt pid net ipc uts cgroup" in exec_drop_in.stdout
    refused = run_botd("unit", "--drop-in", "nothing")
    assert refused.returncode == 2
    assert "invalid choice: 'nothing'" in refused.stderr


def test_python_m_botd_is_the_botd_command(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "botd", "--version"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=daemon_env(),
        timeout=HANG_GUARD,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"botd {botd.__version__}\n"


def test_the_version_is_gits_and_botd_says_it() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert "dynamic" not in project["tool"]["setuptools"]
    assert project["tool"]["setuptools_scm"]["version_file"] == "botd/_version.py"
    assert any(r.startswith("setuptools-scm") for r in project["build-system"]["requires"])
    # What this install's build wrote is what the metadata and botd say.
    assert botd.__version__ == importlib.metadata.version("botd")
    assert botd.__version__ != FALLBACK
    assert run_botd("--version").stdout == f"botd {botd.__version__}\n"
    assert run_botd("version").stdout == f"botd {botd.__version__}\n"


FALLBACK = "0.0.0"
"""The version of a tree without git (pyproject's ``fallback_version``)."""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=repo,
        capture_output=True,
        check=True,
        timeout=HANG_GUARD,
    )


def _scm_version(tree: Path) -> str:
    """The version a build of ``tree`` gets (setuptools-scm, with botd's pyproject)."""
    done = subprocess.run(
        [sys.executable, "-m", "setuptools_scm"],
        cwd=tree,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("SETUPTOOLS_SCM")},
        timeout=HANG_GUARD,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_each_change_builds_a_version_of_its_own_and_a_plain_copy_the_fallback(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "botd"
    tree.mkdir()
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    assert _scm_version(tree) == FALLBACK  # a copy without .git
    _git(tree, "init", "-q")
    _git(tree, "add", "pyproject.toml")
    _git(tree, "commit", "-q", "-m", "first")
    first = _scm_version(tree)
    (tree / "README.md").write_text("changed\n")
    _git(tree, "add", "README.md")
    dirty = _scm_version(tree)  # a change not yet committed
    _git(tree, "commit", "-q", "-m", "second")
    second = _scm_version(tree)
    assert len({first, dirty, second, FALLBACK}) == 4
    assert Version(FALLBACK) < Version(first) < Version(second)
    assert re.fullmatch(r"0\.0\.1\.dev2\+g[0-9a-f]+", second)
    _git(tree, "tag", "v0.3.0")
    assert _scm_version(tree) == "0.3.0"
    _git(tree, "commit", "-q", "--allow-empty", "-m", "third")
    assert re.fullmatch(r"0\.3\.1\.dev1\+g[0-9a-f]+", _scm_version(tree))


def test_a_copy_never_built_says_the_fallback_version(tmp_path: Path) -> None:
    copy = tmp_path / "botd"
    shutil.copytree(ROOT / "botd", copy, ignore=shutil.ignore_patterns("_version.py"))
    done = subprocess.run(
        [sys.executable, "-c", "import botd; print(botd.__version__)"],
        cwd=tmp_path,  # this copy first on the path, not the installed botd
        capture_output=True,
        text=True,
        env={**daemon_env(), "PYTHONPATH": str(tmp_path)},
        timeout=HANG_GUARD,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{FALLBACK}\n"


def test_the_licence_is_declared_and_shipped() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
    assert (ROOT / "botd" / "py.typed").exists()


def test_the_developers_tools_are_groups_not_published_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    assert {"test", "lint", "profile"}.isdisjoint(extras)
    groups = project["dependency-groups"]
    tools = " ".join(groups["test"] + groups["lint"])
    for tool in ("pytest", "pytest-asyncio", "pytest-xdist", "hypothesis", "ruff", "mypy"):
        assert re.search(rf"(^| ){re.escape(tool)}[~=<>]", tools), tool
