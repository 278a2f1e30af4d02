"""The workspace file tools: ``read_file``, ``write_file``, ``edit_file``, ``list_files`` and
``search_files``, each in the run's conversation's workspace (``botd.workspace``).

Each tool's package declares its spec; the tools themselves are here, because they share how
a path is named (relative to the workspace, or absolute beneath ``/workspace`` as ``exec``
sees it), the caps of ``agent.workspace`` and the wording of a refusal: one line naming the
path and the reason, as an error result. The workspace is the conversation's own (or the
shared one, ``agent.workspace.shared``), never the model's choice.

What a file holds may have been written by anyone (a download, a command, another person in
the chat): ``read_file`` and ``search_files`` hand it to the model inside the untrusted marker
(``tools.untrusted``). Every file operation runs in a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from ...config.schema import WorkspaceSection
from ...workspace import (
    SANDBOX_ROOT,
    Listing,
    Refused,
    SearchResult,
    Workspace,
    lines_of,
    workspace_dir,
)
from ..types import ToolDefinition
from .base import ToolContext, ToolOutput

__all__ = [
    "EditFileTool",
    "ListFilesTool",
    "ReadFileTool",
    "SearchFilesTool",
    "WriteFileTool",
]

TIMEOUT = 30.0
"""Seconds a file tool's call may take."""

_PATH = {
    "type": "string",
    "description": (
        f"A path relative to the workspace, or absolute beneath {SANDBOX_ROOT} (as exec sees it)."
    ),
}
_WHERE = (
    f"The workspace is this conversation's own directory ({SANDBOX_ROOT} for exec); paths are "
    f"relative to it. A reply sends a workspace file with a line 'MEDIA: {SANDBOX_ROOT}/<path>'."
)


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def shown(relative: PurePosixPath) -> str:
    """How a path is named to the model: as ``exec`` sees it."""
    return str(SANDBOX_ROOT / relative) if relative.parts else str(SANDBOX_ROOT)


def _refused(exc: Refused) -> ToolOutput:
    return ToolOutput(str(exc), is_error=True)


class _FileTool:
    """What the five tools share: the settings, and the run's workspace."""

    name: ClassVar[str]
    description: ClassVar[str]
    schema: ClassVar[dict[str, Any]]

    def __init__(self, settings: WorkspaceSection, *, state_dir: Path) -> None:
        self._settings = settings
        self._state_dir = state_dir
        self.timeout: float | None = TIMEOUT
        self.spec = ToolDefinition(
            name=self.name, description=f"{self.description} {_WHERE}", input_schema=self.schema
        )

    @property
    def _max_bytes(self) -> int:
        return self._settings.max_file_kb * 1024

    def workspace(self, context: ToolContext) -> Workspace:
        """The workspace of the conversation ``context``'s run answers (made if missing)."""
        where = workspace_dir(
            self._state_dir,
            context.conversation_key,
            root=self._settings.root,
            shared=self._settings.shared,
        )
        return Workspace(where)

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        return await asyncio.to_thread(self._call, args, context)

    def _call(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        try:
            return self.act(self.workspace(context), args)
        except Refused as exc:
            return _refused(exc)

    def act(self, workspace: Workspace, args: dict[str, Any]) -> ToolOutput:
        """The call, in a worker thread; raises ``Refused`` with the one-line reason."""
        raise NotImplementedError

    def _text(self, workspace: Workspace, path: str) -> tuple[PurePosixPath, str]:
        """The file ``path`` names and its text; refused when it is not UTF-8."""
        relative = workspace.named(path)
        data = self._read(workspace, relative)
        try:
            return relative, data.decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(
                f"{shown(relative)}: not UTF-8 text ({len(data)} bytes; a binary file?)"
            ) from None

    def _read(self, workspace: Workspace, relative: PurePosixPath) -> bytes:
        return workspace.read_bytes(relative, self._max_bytes, shown=shown(relative), cap=self._cap)

    @property
    def _cap(self) -> str:
        return f"agent.workspace.max_file_kb ({self._settings.max_file_kb} KiB)"

    def _write(self, workspace: Workspace, relative: PurePosixPath, text: str) -> int:
        data = text.encode("utf-8")
        if len(data) > self._max_bytes:
            raise Refused(f"{shown(relative)}: the text is larger than {self._cap}; not written")
        workspace.write_bytes(relative, data, shown=shown(relative))
        return len(data)


class ReadFileTool(_FileTool):
    """``read_file``: a text file of the workspace, whole or some of its lines."""

    untrusted = True
    """A file's text may come from anywhere: the model reads it inside the untrusted marker."""

    name = "read_file"
    description = (
        "Read a UTF-8 text file of the workspace, whole or from line 'line' (1-based) for "
        "'limit' lines."
    )
    schema = _schema(
        {
            "path": _PATH,
            "line": {"type": "integer", "minimum": 1},
            "limit": {"type": "integer", "minimum": 1},
        },
        ["path"],
    )

    def act(self, workspace: Workspace, args: dict[str, Any]) -> ToolOutput:
        relative, text = self._text(workspace, str(args["path"]))
        line, limit = args.get("line"), args.get("limit")
        if line is not None or limit is not None:
            text = lines_of(text, line, limit)
        return ToolOutput(
            text, details={"path": shown(relative)}, untrusted_from=f"file {shown(relative)}"
        )


class WriteFileTool(_FileTool):
    """``write_file``: a text file of the workspace made or replaced."""

    name = "write_file"
    description = (
        "Write a UTF-8 text file in the workspace, replacing it if it exists; missing "
        "directories are made."
    )
    schema = _schema({"path": _PATH, "content": {"type": "string"}}, ["path", "content"])

    def act(self, workspace: Workspace, args: dict[str, Any]) -> ToolOutput:
        relative = workspace.named(str(args["path"]))
        size = self._write(workspace, relative, str(args["content"]))
        return ToolOutput(f"wrote {shown(relative)} ({size} bytes)", details={"bytes": size})


class EditFileTool(_FileTool):
    """``edit_file``: an exact replacement in a text file of the workspace."""

    name = "edit_file"
    description = (
        "Replace 'old' with 'new' in a text file of the workspace, exactly as written "
        "(whitespace too). 'old' must occur exactly once, unless 'replace_all' is true."
    )
    schema = _schema(
        {
            "path": _PATH,
            "old": {"type": "string", "minLength": 1},
            "new": {"type": "string"},
            "replace_all": {"type": "boolean", "default": False},
        },
        ["path", "old", "new"],
    )

    def act(self, workspace: Workspace, args: dict[str, Any]) -> ToolOutput:
        relative, text = self._text(workspace, str(args["path"]))
        old, new = str(args["old"]), str(args["new"])
        found = text.count(old)
        where = shown(relative)
        if found == 0:
            raise Refused(f"{where}: the old text does not occur in the file; nothing changed")
        if found > 1 and not args.get("replace_all", False):
            raise Refused(
                f"{where}: the old text occurs {found} times; give more of the text around it "
                "to pick one, or set replace_all; nothing changed"
            )
        self._write(workspace, relative, text.replace(old, new))
        made = "replacement" if found == 1 else "replacements"
        return ToolOutput(f"edited {where} ({found} {made})", details={"replaced": found})


class ListFilesTool(_FileTool):
    """``list_files``: a directory of the workspace, bounded."""

    name = "list_files"
    description = (
        "List a directory of the workspace (default: its top): directories first, then files "
        "with their sizes."
    )
    schema = _schema({"path": _PATH}, [])

    def act(self, workspace: Workspace, args: dict[str, Any]) -> ToolOutput:
        relative = workspace.named(str(args.get("path", "")))
        listing = workspace.listing(
            relative, self._settings.max_list_entries, shown=shown(relative)
        )
        return ToolOutput(listing_text(shown(relative), listing), details={"total": listing.total})


def listing_text(where: str, listing: Listing) -> str:
    """A listing as the model reads it: a line per entry, then how many were left out."""
    if not listing.total:
        return f"{where}: empty"
    lines = [f"{where}:"]
    for entry in listing.entries:
        if entry.kind == "directory":
            lines.append(f"{entry.name}/")
        elif entry.kind == "file":
            lines.append(f"{entry.name} ({entry.size} bytes)")
        else:
            lines.append(f"{entry.name} ({entry.kind}, not followed)")
    left = listing.total - len(listing.entries)
    if left:
        lines.append(f"[{left} more entries not listed]")
    return "\n".join(lines)


class SearchFilesTool(_FileTool):
    """``search_files``: lines matching a text or a regular expression, beneath a directory."""

    untrusted = True
    """The lines found are files' text: the model reads them inside the untrusted marker."""

    name = "search_files"
    description = (
        "Find the lines containing 'text' (or matching it as a Python regular expression when "
        "'regex' is true) in the text files beneath a directory of the workspace (default: "
        "all of it). Binary and very large files are skipped."
    )
    schema = _schema(
        {
            "text": {"type": "string", "minLength": 1},
            "path": _PATH,
            "regex": {"type": "boolean", "default": False},
            "ignore_case": {"type": "boolean", "default": False},
        },
        ["text"],
    )

    def act(self, workspace: Workspace, args: dict[str, Any]) -> ToolOutput:
        text = str(args["text"])
        flags = re.IGNORECASE if args.get("ignore_case", False) else 0
        try:
            pattern = re.compile(text if args.get("regex", False) else re.escape(text), flags)
        except re.error as exc:
            raise Refused(f"not a regular expression: {exc}") from None
        relative = workspace.named(str(args.get("path", "")))
        settings = self._settings
        result = workspace.search(
            relative,
            pattern,
            max_matches=settings.max_search_matches,
            max_files=settings.max_search_files,
            max_bytes=self._max_bytes,
            shown=shown(relative),
        )
        details = {"matches": len(result.matches), "files": result.searched}
        return ToolOutput(
            search_text(result), details=details, untrusted_from="files in the workspace"
        )


def search_text(result: SearchResult) -> str:
    """What the model reads of a search: ``path:line: text`` per match, then a summary."""
    lines = [
        f"{shown(PurePosixPath(path))}:{number}: {line}" for path, number, line in result.matches
    ]
    summary = f"{len(result.matches)} matching lines in {result.searched} files searched"
    if result.skipped:
        summary += f"; {result.skipped} files skipped (not text, too large, or links)"
    if result.stopped:
        summary += "; stopped at a cap (agent.workspace), there may be more"
    return "\n".join([*lines, summary])
