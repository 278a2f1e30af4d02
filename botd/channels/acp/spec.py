"""The ACP platform's spec: ``channels.acp`` (``enabled`` and where its socket is), its
adapter factory, its chats (one direct conversation per ACP session) and its probe, which
has nothing to reach."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ...acp_socket import acp_socket
from ...config.schema import ChannelSection
from ..base import ChannelAdapter
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
        files_dir=None if context.state_dir is None else context.state_dir / PROMPT_FILES,
    )


async def _probe(client: httpx.AsyncClient, section: AcpSection) -> list[Check]:
    """Nothing to reach: editors come to botd's socket."""
    return []


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
