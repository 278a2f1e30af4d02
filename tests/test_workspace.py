"""What an ACP agent may read and write through botd (``fs/read_text_file``,
``fs/write_text_file``): the conversation's workspace and nothing else, no link followed; and
what a run resumed on another node is told of the workspace there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from botd.workspace import Refused, Workspace, moved_note, workspace_dir


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "state" / "workspaces" / "one")


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file outside the workspace the agent must not reach."""
    path = tmp_path / "secret.txt"
    path.write_text("the operator's secret\n")
    return path


def test_each_conversation_has_its_own_directory_under_the_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "state"
    one = workspace_dir(state, "telegram:777")
    other = workspace_dir(state, "telegram/777")  # spelled alike once made safe
    assert one.parent == other.parent == state / "workspaces"
    assert one != other
    assert one.name.startswith("telegram_777-")
    assert workspace_dir(state, "telegram:777") == one


def test_a_file_written_inside_is_read_back_whole_or_by_lines(workspace: Workspace) -> None:
    path = str(workspace.root / "src" / "deep" / "notes.txt")
    workspace.write_text(path, "one\ntwo\nthree\n")
    assert workspace.read_text(path) == "one\ntwo\nthree\n"
    assert workspace.read_text(path, line=2, limit=1) == "two\n"
    assert workspace.read_text(path, line=2) == "two\nthree\n"
    workspace.write_text(path, "shorter\n")
    assert (workspace.root / "src" / "deep" / "notes.txt").read_text() == "shorter\n"


@pytest.mark.parametrize(
    "named",
    ["{secret}", "{root}/../secret.txt", "relative.txt", "{root}", "/etc/passwd"],
)
def test_a_path_outside_the_workspace_is_refused(
    workspace: Workspace, secret: Path, named: str
) -> None:
    path = named.format(secret=secret, root=workspace.root)
    with pytest.raises(Refused):
        workspace.read_text(path)
    with pytest.raises(Refused):
        workspace.write_text(path, "overwritten")
    assert secret.read_text() == "the operator's secret\n"


def test_a_link_to_a_file_outside_is_neither_read_nor_written(
    workspace: Workspace, secret: Path
) -> None:
    link = workspace.root / "looks-inside.txt"
    link.symlink_to(secret)
    with pytest.raises(Refused, match="link"):
        workspace.read_text(str(link))
    with pytest.raises(Refused, match="link"):
        workspace.write_text(str(link), "overwritten")
    assert secret.read_text() == "the operator's secret\n"


def test_a_linked_directory_on_the_way_is_refused(
    workspace: Workspace, secret: Path, tmp_path: Path
) -> None:
    (workspace.root / "outside").symlink_to(tmp_path)
    through = str(workspace.root / "outside" / "secret.txt")
    with pytest.raises(Refused):
        workspace.read_text(through)
    with pytest.raises(Refused):
        workspace.write_text(through, "overwritten")
    with pytest.raises(Refused):
        workspace.write_text(str(workspace.root / "outside" / "new" / "file.txt"), "x")
    assert secret.read_text() == "the operator's secret\n"
    assert not (tmp_path / "new").exists()


def test_a_second_hard_link_to_a_file_is_refused(workspace: Workspace, secret: Path) -> None:
    linked = workspace.root / "hard.txt"
    os.link(secret, linked)
    with pytest.raises(Refused, match="hard link"):
        workspace.read_text(str(linked))
    with pytest.raises(Refused, match="hard link"):
        workspace.write_text(str(linked), "overwritten")
    assert secret.read_text() == "the operator's secret\n"


def test_a_missing_file_is_refused_and_a_directory_is_not_a_file(workspace: Workspace) -> None:
    with pytest.raises(Refused, match="no such file"):
        workspace.read_text(str(workspace.root / "missing.txt"))
    (workspace.root / "folder").mkdir()
    with pytest.raises(Refused):
        workspace.read_text(str(workspace.root / "folder"))
    with pytest.raises(Refused):
        workspace.write_text(str(workspace.root / "folder"), "x")


def test_a_terminal_works_in_the_workspace_or_a_directory_beneath_it(
    workspace: Workspace, tmp_path: Path
) -> None:
    (workspace.root / "src").mkdir()
    (workspace.root / "out").symlink_to(tmp_path)
    assert workspace.directory(None) == workspace.root
    assert workspace.directory(str(workspace.root / "src")) == workspace.root / "src"
    for outside in ("/etc", str(workspace.root / "out"), str(workspace.root / "nope"), "src"):
        with pytest.raises(Refused):
            workspace.directory(outside)


def test_a_resumed_run_is_told_what_its_workspace_holds_on_this_node(tmp_path: Path) -> None:
    directory = tmp_path / "workspaces" / "one"
    assert moved_note(directory, "node-b") == (
        "Note: this answer was interrupted and goes on on node node-b, where this "
        "conversation's workspace is empty; files written on another node before the "
        "interruption are not here."
    )
    directory.mkdir(parents=True)
    (directory / "a.txt").write_text("a")
    (directory / "src").mkdir()
    assert "workspace holds 2 entries kept on this node from before;" in moved_note(
        directory, "node-b"
    )
