"""botd as a new operator gets it, from a copy of this tree: ``make run`` in a fresh clone, and
the wheel ``make dist`` builds installed into a new virtualenv outside the clone.

These install botd's dependencies from the package index (pip's cache makes a second run
quick), so they skip, saying why, where no index can be reached. Nothing else of the suite
needs one.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.install

ROOT = Path(__file__).resolve().parent.parent
INSTALL_GUARD = 900.0
"""A hang guard for one install step, far above what one takes; never a measure of speed."""
RUN_GUARD = 120.0


def _env() -> dict[str, str]:
    """The test run's environment without what would point anything back at this tree or at
    the test's venv (PYTHONPATH, VIRTUAL_ENV), at a make calling this one, or at a model."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PYTHONHOME")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in drop and not k.startswith(("ANTHROPIC_", "OPENAI_"))
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(
    args: list[str], cwd: Path, *, input: str | None = None, guard: float = RUN_GUARD
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=cwd,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=guard,
        check=False,
    )


@pytest.fixture(scope="module")
def index_reachable(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skip unless pip can fetch what a build needs (setuptools 77 or later)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    dest = tmp_path_factory.mktemp("probe")
    probe = _run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(dest), "setuptools>=77"],
        dest,
        guard=INSTALL_GUARD,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"no package index reachable to install botd's dependencies from: {last}")


def _older_python() -> str | None:
    """An interpreter older than botd needs (3.9 or 3.10), if this machine has one."""
    candidates = [shutil.which(f"python3.{minor}") for minor in (10, 9)]
    pyenv = shutil.which("pyenv")
    if pyenv is not None:  # pyenv's shims run only the selected versions: ask for the rest
        root = _run([pyenv, "root"], ROOT).stdout.strip()
        for minor in (10, 9):
            candidates += sorted(map(str, Path(root, "versions").glob(f"3.{minor}.*/bin/python3")))
    for candidate in candidates:
        if candidate is None:
            continue
        probe = _run([candidate, "-c", "import sys; print(sys.version_info < (3, 11))"], ROOT)
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return candidate
    return None


def test_make_refuses_an_older_python_in_one_line(tmp_path: Path) -> None:
    old = _older_python()
    if old is None or shutil.which("make") is None:
        pytest.skip("needs make and a Python older than 3.11 (3.9 or 3.10)")
    clone = _fresh_copy(tmp_path / "botd")
    result = _run(["make", "run", f"PYTHON={old}"], clone)
    assert result.returncode != 0
    version = _run([old, "-c", "import platform; print(platform.python_version())"], ROOT)
    first = result.stderr.splitlines()[0]
    assert first == (
        f"botd needs Python 3.11 or newer; {old} is Python {version.stdout.strip()}. "
        "Try: make PYTHON=python3.11"
    )
    assert not (clone / ".venv").exists()


def _fresh_copy(dest: Path) -> Path:
    """The tree as a clone has it: its files (tracked or new, not ignored), links kept, in a
    git repository of one commit (the version comes from git)."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            timeout=RUN_GUARD,
        ).stdout.decode()
        names = [name for name in listed.split("\0") if name]
    else:
        ignored = {".venv", ".git", "dist", "build", "var", "__pycache__", ".pytest_cache"}
        names = [
            str(path.relative_to(ROOT))
            for path in ROOT.rglob("*")
            if not ignored & set(path.relative_to(ROOT).parts) and not path.is_dir()
        ]
    for name in names:
        source = ROOT / name
        if not os.path.lexists(source):  # deleted in the work tree, not yet committed
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    _commit(dest, "the tree as it is", init=True)
    return dest


def _commit(repo: Path, message: str, *, init: bool = False) -> None:
    """Commit everything in ``repo`` (first making it a repository, with ``init``)."""
    git = ["git", "-c", "user.name=botd", "-c", "user.email=botd@example.org"]
    steps = [["init", "-q"]] if init else []
    for step in [*steps, ["add", "-A"], ["commit", "-q", "--allow-empty", "-m", message]]:
        done = _run([*git, *step], repo)
        assert done.returncode == 0, done.stderr


@pytest.mark.usefixtures("index_reachable")
def test_make_run_in_a_fresh_clone_prints_only_the_answer(tmp_path: Path) -> None:
    clone = _fresh_copy(tmp_path / "botd")
    result = _run(
        ["make", "run", f"PYTHON={sys.executable}"], clone, input="hello\n", guard=INSTALL_GUARD
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "You said: hello\n"
    # On stderr only a line per install step, each naming the log pip's output went to.
    notes = result.stderr.splitlines()
    assert notes, "the installs say what they do"
    assert all(re.fullmatch(r"botd: pip install .* \(log: \.venv/install\.log\)", n) for n in notes)
    log = (clone / ".venv" / "install.log").read_text()
    assert "Successfully installed" in log
    assert "BuildBackendWarning" not in log  # setuptools' editable-install warning


@pytest.mark.usefixtures("index_reachable")
def test_the_wheel_installs_and_runs_outside_the_clone(tmp_path: Path) -> None:
    clone = _fresh_copy(tmp_path / "botd")
    version, wheel = _make_dist(clone)
    assert re.fullmatch(r"\d+\.\d+\.\d+\.dev1\+g[0-9a-f]+", version)  # git's, not the fallback
    _check_wheel(wheel, version)

    # A new virtualenv, filled by this pip (--python): ensurepip and byte-compiling would
    # only make the test slower.
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-compile"]
    installed = _run([*pip, str(wheel)], tmp_path, guard=INSTALL_GUARD)
    assert installed.returncode == 0, installed.stderr

    elsewhere = tmp_path / "elsewhere"  # no botd/ here: only the installed botd can answer
    elsewhere.mkdir()
    bin_botd = str(venv / "bin" / "botd")
    assert _run([bin_botd, "--version"], elsewhere).stdout == f"botd {version}\n"
    python_m = _run([python, "-m", "botd", "--version"], elsewhere)
    assert python_m.stdout == f"botd {version}\n", python_m.stderr

    # A change makes a newer wheel, and installing it over the older one replaces it.
    (clone / "README.md").write_text("# botd, changed\n", encoding="utf-8")
    _commit(clone, "a change")
    newer, newer_wheel = _make_dist(clone)
    assert newer != version
    replaced = _run([*pip, str(newer_wheel)], tmp_path, guard=INSTALL_GUARD)
    assert replaced.returncode == 0, replaced.stderr
    assert _run([bin_botd, "--version"], elsewhere).stdout == f"botd {newer}\n"
    wheel = newer_wheel  # make dist removed the older one

    reference = elsewhere / "reference.yaml"
    written = _run([bin_botd, "init", "--example", str(reference)], elsewhere)
    assert written.returncode == 0, written.stderr
    expected = (ROOT / "docs" / "config-reference.yaml").read_text(encoding="utf-8")
    assert reference.read_text(encoding="utf-8") == expected
    reference.write_text("mine\n")
    refused = _run([bin_botd, "init", "--example", str(reference)], elsewhere)
    assert refused.returncode == 1
    assert "never overwrites" in refused.stderr
    assert reference.read_text() == "mine\n"

    unit = _run([bin_botd, "unit"], elsewhere)
    assert unit.returncode == 0, unit.stderr
    assert unit.stdout == (ROOT / "systemd" / "botd.service").read_text(encoding="utf-8")
    _verify_unit(unit.stdout, tmp_path)

    chat = _run([bin_botd, "run"], elsewhere, input="hello\n")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "You said: hello\n"
    assert (elsewhere / "var").is_dir()  # the console's state, where it was started

    # An older Python is refused by name, before any dependency is looked at (pip 25.1+).
    old = _older_python()
    if old is not None:
        old_venv = tmp_path / "old-venv"
        assert _run([old, "-m", "venv", "--without-pip", str(old_venv)], tmp_path).returncode == 0
        pip[pip.index(python)] = str(old_venv / "bin" / "python")
        refused = _run([*pip, str(wheel)], tmp_path, guard=INSTALL_GUARD)
        assert refused.returncode != 0
        assert "ERROR: Package 'botd' requires a different Python: 3." in refused.stderr


def _make_dist(clone: Path) -> tuple[str, Path]:
    """``make dist`` in ``clone``: the version built and the wheel."""
    built = _run(["make", "-s", "dist", f"PYTHON={sys.executable}"], clone, guard=INSTALL_GUARD)
    assert built.returncode == 0, built.stderr
    [sdist] = [name for name in built.stdout.split() if name.endswith(".tar.gz")]
    version = sdist.removeprefix("dist/botd-").removesuffix(".tar.gz")
    wheel_name = f"dist/botd-{version}-py3-none-any.whl"
    assert sorted(built.stdout.split()) == sorted([sdist, wheel_name])
    return version, clone / wheel_name


def _check_wheel(wheel: Path, version: str) -> None:
    """The wheel carries the shipped files as regular files (the web page's among them), the
    licence and py.typed."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for name, source in (
            ("botd/data/botd.service", ROOT / "systemd" / "botd.service"),
            ("botd/data/config-reference.yaml", ROOT / "docs" / "config-reference.yaml"),
            ("botd/data/mcp-node.conf", ROOT / "systemd" / "botd.service.d" / "mcp-node.conf"),
            ("botd/data/exec.conf", ROOT / "systemd" / "botd.service.d" / "exec.conf"),
            *(
                (f"botd/web/static/{page}", ROOT / "botd" / "web" / "static" / page)
                for page in ("index.html", "console.js", "console.css")
            ),
        ):
            mode = archive.getinfo(name).external_attr >> 16
            assert stat.S_ISREG(mode), f"{name} is not a regular file in the wheel"
            assert archive.read(name) == source.read_bytes(), name
        assert {"botd/py.typed", "botd/__main__.py"} <= names
        info = f"botd-{version}.dist-info"
        assert f"{info}/licenses/LICENSE" in names
        metadata = archive.read(f"{info}/METADATA").decode()
    assert "License-Expression: MIT" in metadata.splitlines()
    assert "Requires-Python: >=3.11" in metadata.splitlines()
    assert not [line for line in metadata.splitlines() if "extra ==" in line and "pytest" in line]


def _verify_unit(text: str, tmp_path: Path) -> None:
    """``systemd-analyze verify`` accepts the unit (where systemd is installed)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return
    copy = tmp_path / "botd.service"
    # verify checks that ExecStart exists; the real one lives on the target machine only.
    copy.write_text(text.replace("/opt/botd/.venv/bin/botd", "/bin/true"))
    result = _run([analyze, "verify", "--man=no", str(copy)], tmp_path)
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if "botd.service" in line] == []
