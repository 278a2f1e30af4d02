"""A conversation's workspace: the directory where botd's agent keeps files for it. The file
tools (``read_file``, ``write_file``, ``edit_file``, ``list_files``, ``search_files``), the
``exec`` tool (mounted at ``SANDBOX_ROOT`` in its sandbox), an ACP agent (its working
directory and ``fs/*`` requests) and a reply's ``MEDIA:`` lines reach the same files.

Where it is (``workspace_dir``): beneath ``agent.workspace.root`` (default
``<state_dir>/workspaces``), one directory per conversation, ``<name>-<hash>``, where ``name``
is the conversation key with every character other than a letter, digit, ``.``, ``_`` or ``-``
written as ``_`` and ``hash`` a short hash of the key (two keys that spell the same stay
apart); with ``agent.workspace.shared``, the one directory ``shared`` for every conversation.
It is made when first used and never removed by botd. With several nodes each keeps its own
unless ``root`` is a volume they share; a run resumed on another node is told what the
workspace holds there (``moved_note``).

Paths: the file tools name a file relative to the workspace, or absolute as ``exec`` sees it
(``/workspace/notes.txt``) or as the host does (beneath the directory); an ACP agent names
absolute host paths only (the protocol says so). ``..`` is refused wherever it is, and so is
an absolute path elsewhere. The file is then opened relative to a descriptor of the
workspace with no component a link (``botd.safe_open``), so a symlink planted in the
workspace cannot lead out of it: a read takes a regular file with one hard link, no larger
than its cap; a write makes missing directories, refuses a link or a file with a second hard
link, and replaces the file's bytes. A listing and a search go through the directories by
descriptor too, never into a link. Anything else is ``Refused``, with the reason.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .safe_open import NotRead, Refusal, open_beneath, open_directory, read_beneath

__all__ = [
    "MAX_FILE_BYTES",
    "SANDBOX_ROOT",
    "WORKSPACE_TOOLS",
    "Entry",
    "Listing",
    "Refused",
    "SearchResult",
    "Workspace",
    "conversation_dir",
    "lines_of",
    "moved_note",
    "workspace_dir",
    "workspaces_root",
]

MAX_FILE_BYTES = 10 * 1024 * 1024
"""The largest file an ACP agent may read through botd."""

SANDBOX_ROOT = PurePosixPath("/workspace")
"""Where the workspace is inside ``exec``'s sandbox (its working directory)."""

WORKSPACE_TOOLS = ("exec", "read_file", "write_file", "edit_file", "list_files", "search_files")
"""The built-in tools that reach the workspace."""

SHARED = "shared"
"""The one workspace's directory name with ``agent.workspace.shared`` (a conversation's
always ends in a hash, so none is named so)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Refused(Exception):
    """A file request refused: the message says why (it goes back to the agent)."""


def workspaces_root(state_dir: Path, root: Path | None = None) -> Path:
    """The directory the workspaces are made in: ``root`` (``agent.workspace.root``) or
    ``<state_dir>/workspaces``."""
    return root if root is not None else state_dir / "workspaces"


def workspace_dir(
    state_dir: Path, conversation_key: str, *, root: Path | None = None, shared: bool = False
) -> Path:
    """Where ``conversation_key``'s files are (see the module docstring); ``root`` and
    ``shared`` as ``agent.workspace`` sets them."""
    return conversation_dir(workspaces_root(state_dir, root), conversation_key, shared=shared)


def conversation_dir(root: Path, conversation_key: str, *, shared: bool = False) -> Path:
    """``conversation_key``'s workspace beneath the directory of workspaces ``root``."""
    if shared:
        return root / SHARED
    digest = hashlib.sha256(conversation_key.encode()).hexdigest()[:10]
    return root / f"{_UNSAFE.sub('_', conversation_key)[:80]}-{digest}"


def moved_note(directory: Path, node: str) -> str:
    """The line a resumed run is given about the workspace ``directory`` on ``node`` when
    each node keeps its own workspaces: whether it is empty, since the run's earlier part
    may have written its files on another node."""
    try:
        with os.scandir(directory) as found:
            count = sum(1 for _ in found)
    except OSError:  # not made yet
        count = 0
    here = "is empty" if not count else f"holds {count} entries kept on this node from before"
    return (
        f"Note: this answer was interrupted and goes on on node {node}, where this "
        f"conversation's workspace {here}; files written on another node before the "
        "interruption are not here."
    )


@dataclass(frozen=True, slots=True)
class Entry:
    """One name in a directory: ``kind`` is ``file``, ``directory``, ``link`` or ``other``;
    ``size`` in bytes for a file."""

    name: str
    kind: str
    size: int = 0


@dataclass(frozen=True, slots=True)
class Listing:
    """A directory's entries (directories first, then by name), at most the cap, and how many
    there were in all."""

    entries: tuple[Entry, ...]
    total: int


@dataclass(slots=True)
class SearchResult:
    """What a search found: ``matches`` as ``(path, line number, line)``, the path relative
    to the workspace; the files looked into and those skipped (not text, too large, a link
    or a file with another hard link); whether it stopped at a cap first."""

    matches: list[tuple[str, int, str]]
    searched: int = 0
    skipped: int = 0
    stopped: bool = False


class Workspace:
    """The files of one workspace, as an agent may reach them."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root.resolve()

    def _relative(self, path: str) -> PurePosixPath:
        """An ACP agent's path: absolute and beneath the workspace."""
        named = PurePosixPath(path)
        if not named.is_absolute():
            raise Refused(f"{path}: not an absolute path")
        try:
            relative = named.relative_to(PurePosixPath(self.root))
        except ValueError:
            raise Refused(f"{path}: outside the workspace {self.root}") from None
        if ".." in relative.parts or not relative.parts:
            raise Refused(f"{path}: outside the workspace {self.root}")
        return relative

    def named(self, path: str) -> PurePosixPath:
        """The path relative to the workspace that a file tool's ``path`` names: relative, or
        absolute beneath ``SANDBOX_ROOT`` or the workspace's directory (``.`` or the empty
        path: the workspace itself)."""
        named = PurePosixPath(path.strip() or ".")
        if ".." in named.parts:
            raise Refused(f"{path}: outside the workspace (no ..)")
        if not named.is_absolute():
            return named
        for root in (SANDBOX_ROOT, PurePosixPath(self.root)):
            if named.is_relative_to(root):
                return named.relative_to(root)
        raise Refused(f"{path}: outside the workspace (paths start at {SANDBOX_ROOT})")

    def directory(self, path: str | None) -> Path:
        """The directory ``path`` names beneath the workspace (None: the workspace itself),
        for a terminal's working directory; one outside it, or not a directory, is refused."""
        if path is None:
            return self.root
        relative = self._relative(path) if path != str(self.root) else PurePosixPath()
        found = (self.root / relative).resolve()
        if not found.is_relative_to(self.root):
            raise Refused(f"{path}: outside the workspace {self.root}")
        if not found.is_dir():
            raise Refused(f"{path}: not a directory")
        return found

    def read_text(self, path: str, line: int | None = None, limit: int | None = None) -> str:
        """An ACP agent's read: the text of ``path`` (from 1-based ``line``, at most
        ``limit`` lines)."""
        data = self.read_bytes(self._relative(path), MAX_FILE_BYTES, shown=path)
        text = data.decode("utf-8", errors="replace")
        if line is None and limit is None:
            return text
        return lines_of(text, line, limit)

    def write_text(self, path: str, content: str) -> None:
        """An ACP agent's write of ``content`` to ``path``, making its missing directories."""
        self.write_bytes(self._relative(path), content.encode("utf-8"), shown=path)

    def read_bytes(
        self, relative: PurePosixPath, max_bytes: int, *, shown: str, cap: str = ""
    ) -> bytes:
        """The bytes of the file ``relative`` (at most ``max_bytes``); ``shown`` is how the
        path is named in a refusal, ``cap`` how the limit is (default: in bytes)."""
        try:
            directory = open_directory(self.root)
            try:
                return read_beneath(directory, relative, max_bytes)
            finally:
                os.close(directory)
        except NotRead as exc:
            if exc.refusal is Refusal.TOO_LARGE:
                raise Refused(f"{shown}: larger than {cap or f'{max_bytes} bytes'}") from None
            raise Refused(f"{shown}: {exc}") from None

    def write_bytes(self, relative: PurePosixPath, data: bytes, *, shown: str) -> None:
        """Write ``data`` to the file ``relative``, making its missing directories; ``shown``
        is how the path is named in a refusal."""
        if not relative.parts:
            raise Refused(f"{shown}: not a file")
        try:
            directory = open_directory(self.root)
        except NotRead as exc:
            raise Refused(f"{shown}: the workspace cannot be opened: {exc}") from None
        try:
            parent = _parent_made(directory, relative.parent, shown)
        finally:
            os.close(directory)
        try:
            _write_in(parent, relative.name, data, shown)
        finally:
            os.close(parent)

    def _open_directory(self, relative: PurePosixPath, shown: str) -> int:
        try:
            top = open_directory(self.root)
            try:
                return open_beneath(top, relative, is_directory=True)
            finally:
                os.close(top)
        except NotRead as exc:
            what = "no such directory" if exc.refusal is Refusal.MISSING else str(exc)
            raise Refused(f"{shown}: {what}") from None

    def listing(self, relative: PurePosixPath, max_entries: int, *, shown: str) -> Listing:
        """The entries of the directory ``relative``, links named but not followed."""
        descriptor = self._open_directory(relative, shown)
        try:
            with os.scandir(descriptor) as found:
                entries = [_entry(item) for item in found]
        finally:
            os.close(descriptor)
        entries.sort(key=lambda entry: (entry.kind != "directory", entry.name))
        return Listing(tuple(entries[:max_entries]), len(entries))

    def search(
        self,
        relative: PurePosixPath,
        pattern: re.Pattern[str],
        *,
        max_matches: int,
        max_files: int,
        max_bytes: int,
        shown: str,
    ) -> SearchResult:
        """The lines matching ``pattern`` in the text files beneath the directory
        ``relative`` (in name order, no link followed), within the caps."""
        descriptor = self._open_directory(relative, shown)
        result = SearchResult(matches=[])
        try:
            for directory, names, files, fd in os.fwalk(".", dir_fd=descriptor):
                names.sort()
                for name in sorted(files):
                    if result.searched + result.skipped >= max_files:
                        result.stopped = True
                        return result
                    where = relative / PurePosixPath(directory) / name
                    text = _text_of(fd, name, max_bytes)
                    if text is None:
                        result.skipped += 1
                        continue
                    result.searched += 1
                    for number, line in enumerate(text.splitlines(), start=1):
                        if pattern.search(line):
                            result.matches.append((str(where), number, line))
                            if len(result.matches) >= max_matches:
                                result.stopped = True
                                return result
        finally:
            os.close(descriptor)
        return result


def lines_of(text: str, line: int | None, limit: int | None) -> str:
    """``text`` from 1-based ``line`` (None: the first), at most ``limit`` lines (None: all)."""
    lines = text.splitlines(keepends=True)
    start = max((line or 1) - 1, 0)
    end = None if limit is None else start + max(limit, 0)
    return "".join(lines[start:end])


def _entry(item: os.DirEntry[str]) -> Entry:
    if item.is_symlink():
        return Entry(item.name, "link")
    if item.is_dir(follow_symlinks=False):
        return Entry(item.name, "directory")
    if item.is_file(follow_symlinks=False):
        return Entry(item.name, "file", item.stat(follow_symlinks=False).st_size)
    return Entry(item.name, "other")


def _text_of(directory: int, name: str, max_bytes: int) -> str | None:
    """The text of the file ``name`` in the open ``directory``; None when it is not one
    to search (not a regular file with one link, larger than ``max_bytes``, not UTF-8)."""
    try:
        data = read_beneath(directory, PurePosixPath(name), max_bytes)
    except NotRead:
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _parent_made(directory: int, parent: PurePosixPath, path: str) -> int:
    """A descriptor of ``parent`` beneath ``directory``, its missing directories made, no
    component a link."""
    current = os.dup(directory)
    try:
        for part in parent.parts:
            try:
                step = open_beneath(current, PurePosixPath(part), is_directory=True)
            except NotRead as exc:
                if exc.refusal is not Refusal.MISSING:
                    raise Refused(f"{path}: {part} is {exc}") from None
                # Made meanwhile (or a link put there: opened below, refused).
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=current)
                try:
                    step = open_beneath(current, PurePosixPath(part), is_directory=True)
                except NotRead as again:
                    raise Refused(f"{path}: {part} is {again}") from None
            os.close(current)
            current = step
    except BaseException:
        os.close(current)
        raise
    return current


def _write_in(parent: int, name: str, data: bytes, path: str) -> None:
    """Write ``data`` to the file ``name`` in the open directory ``parent``: created if
    missing; a link, a non-regular file or one with another hard link is refused before a
    byte of it changes."""
    try:
        descriptor = os.open(name, _WRITE_FLAGS, 0o644, dir_fd=parent)
    except OSError as exc:
        raise Refused(
            f"{path}: {Refusal.LINK.value if exc.errno == errno.ELOOP else exc.strerror}"
        ) from None
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            raise Refused(f"{path}: {Refusal.NOT_A_FILE.value}")
        if found.st_nlink > 1:
            raise Refused(f"{path}: {Refusal.HARD_LINKS.value}")
        os.ftruncate(descriptor, 0)
        view = memoryview(data)
        while view:
            written = os.write(descriptor, view)
            view = view[written:]
    except OSError as exc:
        raise Refused(f"{path}: {exc.strerror or exc}") from None
    finally:
        os.close(descriptor)
