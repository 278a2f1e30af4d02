"""The right to be forgotten: ``botd forget --channel --user`` and ``/forget me`` remove a
person's rows from the store (``Forgetting``; which rows are theirs:
``botd.store.forgetting``) and their files in this node's state dir: the workspaces of
their conversations and the event recordings of those conversations' sessions.

``/forget me`` asks first: the answer carries a button whose value names the person who
asked and when (``forget:<user id>:<minute>``). The router lets a press through only as one
of the buttons botd recorded under that very message, in the chat it came from
(``botd.buttons``); ``Forgetter.press`` then takes it only from that same person, within
``CONFIRM_MINUTES``. ``/forget me confirm`` typed does the same at once (the way on a
platform without buttons, where the labels are listed as text).

Before the store forgets, the conversations of the person that this node holds are dropped
from memory, their work cut (``Conversations.forget``), so nothing of them is written
after. The answer is one line of counts, never any content.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .chat import Button, InboundMessage
from .config.schema import WorkspaceSection
from .store import Forgotten, Person
from .store.protocols import Forgetting
from .workspace import workspace_dir

if TYPE_CHECKING:
    from .channels.registry import ChannelSpec

log = logging.getLogger(__name__)

__all__ = [
    "CONFIRM_MINUTES",
    "PREFIX",
    "Forgetter",
    "dm_spelling",
    "forget_person",
    "remove_files",
]

PREFIX = "forget:"
"""The values of ``/forget me``'s buttons (``forget:<user>:<minute>``, ``forget:keep``)."""
CONFIRM_MINUTES = 10
"""How long ``/forget me``'s button holds."""
USAGE = (
    "/forget me removes what I keep about you on this channel: our direct chats, your "
    "messages in groups, what I remember about you. It asks first."
)
ASK = (
    "This removes what I keep about you here: our direct chats and their files, your "
    "messages in groups, what I remember about you, your pairing. The platform keeps its "
    "own copy of the chat. Press to confirm (or send /forget me confirm)."
)
ASK_TYPED = ASK.replace(
    "Press to confirm (or send /forget me confirm).", "Send /forget me confirm."
)
"""``ASK`` where a button could not carry the asker's id (longer than a platform allows)."""

Spelling = Callable[[str, str], tuple[frozenset[str], frozenset[str]]]
"""For a channel and a user id: the conversation keys and chat ids of their direct chat
that the platform spells from their id alone (none where it cannot)."""


def dm_spelling(specs: Callable[[], Mapping[str, ChannelSpec[Any]]]) -> Spelling:
    """``Spelling`` by each channel's platform (``specs()``, by channel name): a platform with
    one conversation per person (Discord's ``dm_user``) spells its key; one whose direct
    chat's id is the user's (Telegram) spells that chat's key."""

    def spell(channel: str, user: str) -> tuple[frozenset[str], frozenset[str]]:
        spec = specs().get(channel)
        if spec is None or spec.conversation_key is None:
            return frozenset(), frozenset()
        plain = spec.conversation_key(channel, user)
        per_person = spec.conversation_key(channel, user, dm_user=user)
        if per_person != plain:
            return frozenset({per_person}), frozenset()
        if spec.chat_kind is not None and spec.chat_kind(user)[0] == "direct":
            return frozenset({plain}), frozenset({user})
        return frozenset(), frozenset()

    return spell


def remove_files(
    state_dir: Path, forgotten: Forgotten, workspaces: WorkspaceSection | None = None
) -> None:
    """Remove the workspaces of ``forgotten``'s conversations (where ``workspaces``,
    ``agent.workspace``, puts them) and the recordings of its sessions from ``state_dir``,
    counted into it (``workspaces``, ``recordings``). A workspace every conversation shares
    (``shared: true``) is everyone's: it is left."""
    where = workspaces or WorkspaceSection()
    for key in sorted(forgotten.conversations) if not where.shared else ():
        workspace = workspace_dir(state_dir, key, root=where.root)
        if workspace.is_dir() and not workspace.is_symlink():
            shutil.rmtree(workspace)
            forgotten.add("workspaces", 1)
    events = state_dir / "events"
    for session in sorted(forgotten.sessions):
        for path in glob.glob(glob.escape(str(events / session)) + "-*.jsonl"):
            with contextlib.suppress(FileNotFoundError):
                Path(path).unlink()
                forgotten.add("recordings", 1)


async def forget_person(
    store: Forgetting,
    person: Person,
    state_dir: Path,
    workspaces: WorkspaceSection | None = None,
) -> Forgotten:
    """Forget ``person`` in ``store`` and in ``state_dir`` (and the workspaces where
    ``workspaces`` puts them): what was removed (counts)."""
    forgotten = await store.forget_person(person)
    remove_files(state_dir, forgotten, workspaces)
    log.info("forgot user %s on %s: %s", person.user, person.channel, forgotten.summary())
    return forgotten


class Forgetter:
    """``/forget me`` and its button in a running botd (see the module docstring)."""

    def __init__(
        self,
        store: Forgetting,
        state_dir: Path,
        spell: Spelling,
        *,
        workspaces: Callable[[], WorkspaceSection] = WorkspaceSection,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._state_dir = state_dir
        self._workspaces = workspaces
        """``agent.workspace`` as it is now (where the workspaces are)."""
        self._spell = spell
        self._clock = clock
        self.drop: Callable[[str], None] = lambda _key: None
        """Drops a conversation this node holds (``Conversations.forget``), set once the
        conversations exist."""

    async def command(
        self, message: InboundMessage, argument: str
    ) -> tuple[str, tuple[tuple[Button, ...], ...]]:
        """``/forget``'s answer and the buttons under it: ``me`` asks, ``me confirm`` does
        it, anything else is told how it is used."""
        words = argument.lower().split()
        if words == ["me", "confirm"]:
            return await self._forget(message), ()
        if words != ["me"]:
            return USAGE, ()
        value = f"{PREFIX}{message.sender_id}:{int(self._clock() // 60)}"
        if len(value.encode()) > 64:  # past a platform's limit for a button's data
            return ASK_TYPED, ()
        rows = ((Button("Forget me", value), Button("Keep", f"{PREFIX}keep")),)
        return ASK, rows

    async def press(self, message: InboundMessage) -> str | None:
        """A press of ``/forget me``'s buttons (the router checked it is one botd put under
        that message): taken only from the person who asked, within ``CONFIRM_MINUTES``."""
        assert message.press is not None
        value = message.press.value.removeprefix(PREFIX)
        if value == "keep":
            return "Nothing was removed."
        user, _, minute = value.rpartition(":")
        if user != message.sender_id:
            return "Only the person who asked can confirm this."
        try:
            asked = int(minute) * 60
        except ValueError:
            return None
        if self._clock() - asked > (CONFIRM_MINUTES + 1) * 60:
            return "This confirmation has expired: send /forget me again."
        return await self._forget(message)

    async def _forget(self, message: InboundMessage) -> str:
        keys, chats = self._spell(message.channel, message.sender_id)
        if message.is_direct:
            keys |= {message.conversation_key}
            chats |= {message.chat_id}
        person = Person(message.channel, message.sender_id, keys, chats)
        for key in keys:
            self.drop(key)
        forgotten = await self._store.forget_person(person)
        for key in forgotten.conversations - keys:
            self.drop(key)
        remove_files(self._state_dir, forgotten, self._workspaces())
        log.info("forgot user %s on %s at their request", person.user, person.channel)
        if not forgotten.total:
            return "Done: I kept nothing about you here."
        return f"Done: {forgotten.summary()}."
