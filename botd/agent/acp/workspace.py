"""A conversation's workspace: the directory an ACP agent works in for it, and the only place
botd reads and writes files on the agent's behalf (``fs/read_text_file``,
``fs/write_text_file``).

Each conversation has its own directory, ``<state_dir>/workspaces/<name>``, where ``name`` is
the conversation key with every character other than a letter, digit, ``.``, ``_`` or ``-``
written as ``_``, then a short hash of the key (two keys that spell the same stay apart). It
is made when the conversation's first session is opened and never removed by botd.

A terminal's working directory (``directory``) is the workspace or a directory beneath it,
its links resolved.

A path the agent names must be absolute and lie beneath the workspace; the file is then
opened relative to a descriptor of the workspace with no component a link
(``botd.safe_open``, as the file tools do), so a symlink planted in the workspace cannot lead
out of it. A read takes a regular file with one link (``line`` and ``limit`` pick lines, as
the protocol says); a write makes missing directories, refuses a link or a file with a second
hard link, and replaces the file's bytes. Anything else is ``Refused``, with the reason.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
from pathlib import Path, PurePosixPath

from ...safe_open import NotRead, Refusal, open_beneath, open_directory, read_beneath

__all__ = ["MAX_FILE_BYTES", "Refused", "Workspace", "workspace_dir"]

MAX_FILE_BYTES = 10 * 1024 * 1024
"""The largest file an agent may read through botd."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Refused(Exception):
    """A file request refused: the message says why (it goes back to the agent)."""


def workspace_dir(state_dir: Path, conversation_key: str) -> Path:
    """Where ``conversation_key``'s agent works (see the module docstring)."""
    digest = hashlib.sha256(conversation_key.encode()).hexdigest()[:10]
    return state_dir / "workspaces" / f"{_UNSAFE.sub('_', conversation_key)[:80]}-{digest}"


class Workspace:
    """The files of one workspace, as an agent may reach them."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root.resolve()

    def _relative(self, path: str) -> PurePosixPath:
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
        """The text of ``path`` (from 1-based ``line``, at most ``limit`` lines)."""
        relative = self._relative(path)
        try:
            directory = open_directory(self.root)
            try:
                data = read_beneath(directory, relative, MAX_FILE_BYTES)
            finally:
                os.close(directory)
        except NotRead as exc:
            raise Refused(f"{path}: {exc}") from None
        text = data.decode("utf-8", errors="replace")
        if line is None and limit is None:
            return text
        lines = text.splitlines(keepends=True)
        start = max((line or 1) - 1, 0)
        end = None if limit is None else start + max(limit, 0)
        return "".join(lines[start:end])

    def write_text(self, path: str, content: str) -> None:
        """Write ``content`` to ``path``, making its missing directories."""
        relative = self._relative(path)
        try:
            directory = open_directory(self.root)
        except NotRead as exc:
            raise Refused(f"{path}: the workspace cannot be opened: {exc}") from None
        try:
            parent = _parent_made(directory, relative.parent, path)
        finally:
            os.close(directory)
        try:
            _write_in(parent, relative.name, content.encode("utf-8"), path)
        finally:
            os.close(parent)


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
