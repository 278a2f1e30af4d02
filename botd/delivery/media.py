"""Files out: the media a reply names (``MEDIA:`` lines, the message tool's ``media``) as uploads.

Each reference becomes an ``OutboundFile`` before the adapter uploads it:

* an ``http(s)`` URL is fetched through the address guard (``botd.net.fetch``): a host that
  resolves to loopback, private, link-local or metadata space is refused unless it is in
  ``agent.web_fetch.allow_hosts``; at most ``media.max_bytes`` are read;
* anything else is a local path beneath ``media.outbound_dir``: relative to it, or absolute
  and starting with it (as configured or resolved), never through ``..``. It is opened from a
  descriptor of the directory with no symlink followed at any component and read from the
  descriptor it opened (``botd.safe_open``), so a directory swapped for a link meanwhile
  gains nothing; it must be a regular file with one hard link, at most ``media.max_bytes``.
  The directory itself is resolved once, when the settings are made (a link the operator put
  in its path is followed then). Without an ``outbound_dir`` no such local file is sent;
* a path into a workspace (``botd.workspace``) is a file of the conversation the send is
  made for (the run's own, also for the ``message`` tool's media to another chat):
  ``/workspace/<path>`` as ``exec`` and the file tools name it, or the host path beneath the
  workspaces' directory. A path into another conversation's workspace, or one named by a
  send made for no conversation, is refused. The file is opened in the same way, from a
  descriptor of the conversation's workspace, at most ``media.max_bytes``.
* ``speech:<name>`` is a voice reply's audio (``botd.delivery.voice``), read from
  ``speech_dir`` (under the state dir) by a name of 32 random hex digits and its extension:
  no other name is read there, and none can be guessed. When it is gone (a restart after its
  confirmation, another node resuming the run) only the reply's text is posted.

The reply's text goes with the first file as its caption when it fits the platform's caption
limit (``Capabilities.caption_limit``, measured as rendered), else as a message of its own
before it. Files follow in the order named; only the first message replies to anything.

An adapter without ``send_file`` gets the references named after the text, unfetched.
When a file cannot be sent (the guard refused the URL, the fetch failed, the path is outside
``outbound_dir`` or in another conversation's workspace, goes through a link, has another
hard link or is missing, the platform refused the upload or said it is too large) the
reference is posted as text instead, once:
a URL as the link, a local path as its file name with a short reason; a warning names the
reason in the platform's own words. A failure that may pass (a 5xx, a 429, a lost
connection) is not a refusal: the caller retries the upload alone, so nothing already
posted is posted again.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from ..channels.base import ChannelAdapter, OutboundFile, SendScope
from ..channels.errors import ChannelError
from ..chat import Capabilities, MessageRef, Target
from ..config.paths import resolved
from ..safe_open import NotRead, Refusal, open_directory, read_beneath
from ..workspace import SANDBOX_ROOT, conversation_dir
from .retrying import DeliveryGivenUp

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
_URL = re.compile(r"^https?://", re.IGNORECASE)
_OUTBOUND = "media.outbound_dir"
_OUTSIDE = f"outside {_OUTBOUND}"
_WORKSPACE = "the workspace"
_OTHER_WORKSPACE = "not this conversation's workspace"
SPEECH_PREFIX = "speech:"
"""How a voice reply's audio is named in a reply and in the outbox: ``speech:<file name>``."""
SPEECH_NAME = re.compile(r"[0-9a-f]{32}\.(?:ogg|mp3)")
_SPEECH_TYPES = {".ogg": "audio/ogg", ".mp3": "audio/mpeg"}

PostText = Callable[[Target, str], Awaitable[list[MessageRef]]]
Upload = Callable[[Target, OutboundFile, str], Awaitable[list[MessageRef]]]


@dataclass(frozen=True, slots=True)
class MediaSettings:
    """Where files may come from and how large they may be."""

    allow_hosts: tuple[str, ...] = ()
    """Hosts, addresses or networks the address guard lets through (``allow_hosts``)."""
    max_bytes: int = DEFAULT_MAX_BYTES
    outbound_dir: Path | None = None
    """The one directory local files are taken from (None: no local files)."""
    timeout: float = 20.0
    workspaces: Path | None = None
    """The directory the conversations' workspaces are in (``botd.workspace``; None: no
    workspace file is sent)."""
    shared_workspace: bool = False
    """One workspace for every conversation (``agent.workspace.shared``)."""
    openat2: bool = True
    """False: open local files by walking the path one component at a time, as on a system
    without ``openat2(2)`` (the tests cover both ways with it)."""
    speech_dir: Path | None = None
    """Where voice replies' audio waits for its upload (None: no voice replies)."""
    outbound_root: Path | None = field(init=False, default=None)
    """``outbound_dir`` resolved once, when the settings are made (at start, at a reload): a
    link the operator configured is followed here, none beneath it later."""
    outbound_names: tuple[Path, ...] = field(init=False, default=())
    """The prefixes an absolute reference may start with: the directory as configured and as
    resolved."""

    workspace_names: tuple[Path, ...] = field(init=False, default=())
    """The prefixes a host path into a workspace starts with: the workspaces' directory as
    configured and as resolved (the first)."""

    def __post_init__(self) -> None:
        if self.workspaces is not None:
            configured = Path(os.path.abspath(self.workspaces))
            names = (resolved(self.workspaces), configured)
            object.__setattr__(self, "workspace_names", tuple(dict.fromkeys(names)))
        if self.outbound_dir is None:
            return
        root = resolved(self.outbound_dir)
        configured = Path(os.path.abspath(self.outbound_dir.expanduser()))
        object.__setattr__(self, "outbound_root", root)
        object.__setattr__(self, "outbound_names", tuple(dict.fromkeys((configured, root))))


class MediaUnavailable(Exception):
    """A reference that did not become a file; the message is the short reason."""


def is_speech(reference: str) -> bool:
    """Whether ``reference`` names a voice reply's audio (``speech:<name>``)."""
    return reference.strip().startswith(SPEECH_PREFIX)


def is_url(reference: str) -> bool:
    return bool(_URL.match(reference.strip()))


def shown_instead(reference: str, reason: str) -> str:
    """What is posted when ``reference`` cannot be uploaded: the link, or the file's name
    with why it was not sent."""
    if is_url(reference):
        return reference.strip()
    name = Path(reference.strip()).name or reference.strip()
    return f"{name} (not sent: {reason})"


async def load(
    reference: str,
    settings: MediaSettings,
    *,
    as_voice: bool = False,
    conversation: str | None = None,
) -> OutboundFile:
    """``reference`` as a file to upload, for a send made for ``conversation`` (whose
    workspace it may name); raises ``MediaUnavailable`` with the reason."""
    reference = reference.strip()
    if is_speech(reference):
        return await asyncio.to_thread(_read_speech, reference, settings)
    if is_url(reference):
        from ..net.fetch import FetchFailed, FetchRefused, fetch  # httpx, at the first URL

        try:
            fetched = await fetch(
                reference,
                allow_hosts=settings.allow_hosts,
                max_bytes=settings.max_bytes,
                timeout=settings.timeout,
            )
        except FetchRefused as exc:
            raise MediaUnavailable(f"address refused: {exc}") from exc
        except FetchFailed as exc:
            raise MediaUnavailable(str(exc)) from exc
        return OutboundFile(
            fetched.body, fetched.filename, fetched.content_type, as_voice, source=reference
        )
    in_workspace = _in_workspace(reference, settings, conversation)
    if in_workspace is not None:
        workspace, relative = in_workspace
        data = await asyncio.to_thread(_read_local, workspace, relative, settings, _WORKSPACE)
    else:
        root = settings.outbound_root
        if root is None:
            raise MediaUnavailable("local files are not sent (media.outbound_dir is not set)")
        relative = _beneath_outbound_dir(reference, settings)
        data = await asyncio.to_thread(_read_local, root, relative, settings, _OUTBOUND)
    guessed, _ = mimetypes.guess_type(relative.name)
    return OutboundFile(data, relative.name, guessed or "", as_voice, source=reference)


def _read_speech(reference: str, settings: MediaSettings) -> OutboundFile:
    """The voice note ``reference`` names, always sent as one."""
    name = reference.removeprefix(SPEECH_PREFIX)
    if settings.speech_dir is None or not SPEECH_NAME.fullmatch(name):
        raise MediaUnavailable("not a voice reply of this botd")
    try:
        data = (settings.speech_dir / name).read_bytes()
    except OSError as exc:
        raise MediaUnavailable(f"the voice reply's audio is gone ({exc.strerror})") from None
    return OutboundFile(data, f"voice{Path(name).suffix}", _SPEECH_TYPES[Path(name).suffix], True)


def _beneath_outbound_dir(reference: str, settings: MediaSettings) -> PurePosixPath:
    """The path ``reference`` names relative to ``outbound_dir``, read from its text alone: a
    relative path as it is, an absolute one if it starts with the directory (as configured or
    resolved); ``..`` is refused wherever it is."""
    named = Path(reference.removeprefix("file://")).expanduser()
    if ".." in named.parts:
        raise MediaUnavailable(_OUTSIDE)
    if not named.is_absolute():
        return PurePosixPath(named)
    for directory in settings.outbound_names:
        if named.is_relative_to(directory):
            return PurePosixPath(named.relative_to(directory))
    raise MediaUnavailable(_OUTSIDE)


def _in_workspace(
    reference: str, settings: MediaSettings, conversation: str | None
) -> tuple[Path, PurePosixPath] | None:
    """The workspace directory and the path beneath it that ``reference`` names, when it
    names one (None: it does not); refused when it is not ``conversation``'s."""
    named = PurePosixPath(reference.removeprefix("file://"))
    if not named.is_absolute() or not settings.workspace_names:
        return None
    relative: PurePosixPath | None = None
    if named.is_relative_to(SANDBOX_ROOT):
        relative = named.relative_to(SANDBOX_ROOT)
    own = None
    if conversation is not None:
        own = conversation_dir(Path(), conversation, shared=settings.shared_workspace).name
    for directory in settings.workspace_names:
        if relative is None and named.is_relative_to(directory):
            beneath = named.relative_to(directory)
            if beneath.parts[:1] != (own,):
                raise MediaUnavailable(_OTHER_WORKSPACE)
            relative = PurePosixPath(*beneath.parts[1:])
    if relative is None:
        return None
    if conversation is None:
        raise MediaUnavailable(_OTHER_WORKSPACE)
    if ".." in relative.parts:
        raise MediaUnavailable("outside the workspace")
    root = conversation_dir(
        settings.workspace_names[0], conversation, shared=settings.shared_workspace
    )
    return root, relative


def _read_local(root: Path, relative: PurePosixPath, settings: MediaSettings, where: str) -> bytes:
    """The bytes of ``relative`` beneath the resolved directory ``root`` (``where`` says
    which, in a refusal), no link followed on the way (``botd.safe_open``)."""
    try:
        directory = open_directory(root, openat2=settings.openat2)
    except NotRead as exc:
        if exc.refusal is Refusal.MISSING and where == _WORKSPACE:
            raise MediaUnavailable(Refusal.MISSING.value) from None  # never written to
        raise MediaUnavailable(f"{where} cannot be opened ({exc})") from None
    try:
        return read_beneath(directory, relative, settings.max_bytes, openat2=settings.openat2)
    except NotRead as exc:
        if exc.refusal is Refusal.OUTSIDE:
            raise MediaUnavailable(f"outside {where}") from None
        if exc.refusal is Refusal.TOO_LARGE:
            limit = settings.max_bytes
            raise MediaUnavailable(f"larger than media.max_bytes ({limit} bytes)") from None
        raise MediaUnavailable(str(exc)) from None
    finally:
        os.close(directory)


def can_upload(adapter: ChannelAdapter) -> bool:
    """Whether ``adapter`` uploads files (it has ``send_file``)."""
    return getattr(adapter, "send_file", None) is not None


def fits_caption(text: str, caps: Capabilities) -> bool:
    """Whether ``text`` can be a file's caption on a platform with ``caps``."""
    limit = caps.caption_limit
    if limit is None or not text.strip():
        return False
    if len(text) > limit:
        return False
    return len(caps.markup.chunks(text, limit, line_limit=caps.line_limit)) <= 1


def _joined(text: str, extra: str) -> str:
    return f"{text}\n\n{extra}" if text.strip() else extra


def _instead(caption: str, reference: str, reason: str) -> str:
    """What is posted for a file that was not sent: the caption and what ``shown_instead``
    says, or for a voice reply's audio (the text spoken) the caption alone."""
    if is_speech(reference):
        return caption
    return _joined(caption, shown_instead(reference, reason))


async def upload_file(
    adapter: ChannelAdapter,
    target: Target,
    file: OutboundFile,
    caption: str,
    *,
    scope: SendScope | None = None,
) -> list[MessageRef]:
    """``adapter.send_file``, or the refusal of an adapter that has none."""
    send_file = getattr(adapter, "send_file", None)
    if send_file is None:
        raise ChannelError(f"{adapter.name}: file uploads are not supported")
    refs: list[MessageRef] = await send_file(target, file, caption, scope=scope)
    return refs


async def send_with_media(
    adapter: ChannelAdapter,
    target: Target,
    text: str,
    media: Sequence[str],
    *,
    as_voice: bool,
    settings: MediaSettings,
    post_text: PostText,
    upload: Upload,
    caps: Capabilities | None = None,
    conversation: str | None = None,
) -> list[MessageRef]:
    """Post ``text`` and upload ``media`` (see the module docstring) for ``conversation``.

    ``post_text`` and ``upload`` are the caller's retried sends; a failure that outlasts the
    retries (``DeliveryGivenUp``) is raised, a refusal falls back to text. ``caps``: the limits
    the text is held to (default: the adapter's own).
    """
    if not can_upload(adapter):
        # A platform without uploads: the references are named after the text, unfetched.
        # A voice reply's audio is its text spoken: the text alone stands for it.
        named = [ref for ref in media if not is_speech(ref)]
        if not named:
            return await post_text(target, text) if text.strip() else []
        log.warning("%s cannot upload files; posting their references", adapter.name)
        shown = "\n".join(shown_instead(ref, "uploads are not supported") for ref in named)
        return await post_text(target, _joined(text, shown))
    refs: list[MessageRef] = []
    caption = text
    if caption.strip() and not fits_caption(caption, caps or adapter.capabilities):
        refs.extend(await post_text(target, caption))
        caption = ""
    for reference in media:
        if refs:
            target = replace(refs[0].target, reply_to_id=None)  # only the first one replies
        try:
            file = await load(reference, settings, as_voice=as_voice, conversation=conversation)
        except MediaUnavailable as exc:
            log.warning(
                "%s: not sending %s to %s: %s", adapter.name, reference, target.chat_id, exc
            )
            shown = _instead(caption, reference, str(exc))
            if shown.strip():
                refs.extend(await post_text(target, shown))
            caption = ""
            continue
        try:
            posted = await upload(target, file, caption)
        except DeliveryGivenUp:
            raise
        except ChannelError as exc:
            log.warning(
                "%s refused the upload of %s to %s: %s",
                adapter.name,
                reference,
                target.chat_id,
                exc,
            )
            reason = "refused by the platform"
            shown = _instead(caption, reference, reason)
            posted = await post_text(target, shown) if shown.strip() else []
        refs.extend(posted)
        caption = ""
    if caption.strip():
        refs.extend(await post_text(target, caption))
    return refs


__all__ = [
    "DEFAULT_MAX_BYTES",
    "SPEECH_NAME",
    "SPEECH_PREFIX",
    "MediaSettings",
    "MediaUnavailable",
    "can_upload",
    "fits_caption",
    "is_speech",
    "is_url",
    "load",
    "send_with_media",
    "shown_instead",
    "upload_file",
]
