"""The ACP platform's spec: ``channels.acp`` (``enabled`` and where its socket is), its
adapter factory, its chats (one direct conversation per ACP session) and its probe, which
checks where the socket goes (nothing to reach)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ...acp_socket import acp_socket
from ...config.schema import ChannelSection
from ..base import ChannelAdapter, thoughts_followed
from ..errors import ChannelStartError
from ..registry import ChannelContext, ChannelSpec
from . import targets

if TYPE_CHECKING:
    import httpx

    from ...ops.doctor.checks import Check

__all__ = ["PROMPT_FILES", "SPEC", "AcpSection"]

PROMPT_FILES = Path("acp") / "prompt-files"
"""Where, under the state dir, the files of editors' prompts are kept (``prompt_files``)."""


class AcpSection(ChannelSection):
    """``channels.acp``: editors reach the daemon over a Unix socket (``botd acp`` bridges an
    editor's stdio to it). Whoever can open the socket (mode 0600: botd's user) is the one
    user of the channel, as the console's is: no access settings."""

    enabled: bool = False
    socket: str | None = None
    """The socket's path; default ``<state_dir>/acp.sock``."""


def _adapter(section: AcpSection, context: ChannelContext) -> ChannelAdapter:
    from .adapter import AcpAdapter

    if context.state_dir is None and not section.socket:
        raise ChannelStartError("the acp channel needs channels.acp.socket (no state dir here)")
    path = acp_socket(context.state_dir or Path("."), section.socket)
    return AcpAdapter(
        channel=context.instance_name(SPEC.name),
        socket_path=path,
        has_conversation=context.has_conversation,
        kept=context.editor_sessions,
        thoughts=lambda: thoughts_followed(context.reasoning() if context.reasoning else "off"),
        files_dir=None if context.state_dir is None else context.state_dir / PROMPT_FILES,
    )


async def _probe(client: httpx.AsyncClient, section: AcpSection) -> list[Check]:
    """Nothing to reach (editors come to botd's socket): whether the socket's directory
    takes it. The default's is the state dir, which the doctor checks of its own."""
    from ...ops.doctor.checks import failed, passed

    if not section.socket:
        return [passed("acp.socket", "acp socket: <state_dir>/acp.sock (the state dir's check)")]
    path = acp_socket(Path("."), section.socket)
    directory = path.parent
    if not directory.is_dir():
        return [
            failed(
                "acp.socket",
                f"acp socket {path}: its directory {directory} does not exist",
                "create it (owned by botd's user) or choose another channels.acp.socket",
            )
        ]
    if not os.access(directory, os.W_OK | os.X_OK):
        return [
            failed(
                "acp.socket",
                f"acp socket {path}: its directory {directory} is not writable by botd's user",
                "make it writable for botd's user or choose another channels.acp.socket",
            )
        ]
    if path.exists() and not path.is_socket():
        return [
            failed(
                "acp.socket",
                f"acp socket {path}: a file that is not a socket is there",
                "move it aside or choose another channels.acp.socket",
            )
        ]
    return [passed("acp.socket", f"acp socket {path}: its directory takes it")]


SPEC = ChannelSpec(
    name="acp",
    section=AcpSection,
    factory=_adapter,
    requirement="botd[acp]",
    modules=("acp",),
    chat_kind=targets.chat_kind,
    conversation_key=targets.acp_conversation_key,
    probe=_probe,
)
