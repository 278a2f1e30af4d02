"""What a prompt is shown of its conversation since the bot last answered there.

The router keeps two kinds of lines in the store (``botd.store.Chatter``) until the next prompt of
their conversation: group messages not addressed to the bot, and edits of earlier messages
(in any conversation, a DM too). ``with_kept_context`` puts them before that prompt, each
labelled with its sender, together with the newest files they came with; the accept that
takes the prompt consumes them, so each line reaches the model once, across a restart too.
``accepted_with_kept_context`` first asks the store to accept the prompt as it is unless its
conversation keeps lines (one store call, the common case); only when some are kept does it
read them and accept again with them.
In a user-scoped group (``session_scope``) the lines are the group's, shared by its members'
conversations: each prompt is shown those its conversation has not read yet, and the accept
marks them read for it instead of consuming them.
The router keeps nothing from a sender the access policy refuses; a line kept from someone
the policy has stopped admitting since (a reload took them off ``allow_from``) is consumed
unseen, with its files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..chat import InboundMessage
from ..speakers import labelled
from ..store import Chatter, ChatterKept, InboundLedger, KeptLine

CONTEXT_LIMIT = 50
"""Lines kept per conversation (the newest)."""
CONTEXT_HEADER = "[Chat messages since your last reply]"
KEPT_FILES = 4
"""Files of kept chatter that come along with the message addressing the bot (the newest)."""
EDITED = "(edited an earlier message to:)"
"""How a kept edit starts: the model is told the message changed, not that a new one came."""


def as_edit(message: InboundMessage) -> InboundMessage:
    """An edited message as it is kept: its new text, marked as an edit. Its files were
    kept (or answered) with the message when it came, so they are not kept again."""
    return replace(message, text=f"{EDITED} {message.text}".rstrip(), attachments=())


async def with_kept_context(
    store: Chatter,
    message: InboundMessage,
    *,
    admits: Callable[[str], bool],
    shared_from: str | None = None,
) -> tuple[InboundMessage, tuple[str, int] | None]:
    """``message`` with the lines kept in its conversation as its context, and what the
    accept consumes (conversation key and last row id; None: nothing kept). The lines stay
    kept until the message is accepted. Only lines whose sender ``admits`` (by id) are
    shown, with their files; the others are consumed all the same. ``shared_from``: the
    group whose lines the message's conversation shares (a user-scoped group's key): its
    lines not read yet by the conversation, which the accept marks read.

    Context the adapter attached already (a Slack thread's earlier messages, fetched on the
    first mention there) is the platform's own record of the same conversation and includes
    what was kept of it: those lines are consumed without being shown twice.
    """
    key = message.conversation_key if shared_from is None else shared_from
    reader = None if shared_from is None else message.conversation_key
    kept = await store.kept_chatter(key, read_by=reader)
    if not kept:
        return message, None
    consumed = (key, kept[-1].id)
    if message.context:
        return message, consumed
    admitted = {sender: admits(sender) for sender in {line.sender_id for line in kept}}
    kept = [line for line in kept if admitted[line.sender_id]]
    if not kept:
        return message, consumed
    lines = [labelled(line.sender_name, line.sender_id, _kept_text(line)) for line in kept]
    # Files of the kept messages come along (the newest few), read when the run starts.
    files = tuple(a for line in kept for a in line.attachments)[-KEPT_FILES:]
    context = "\n".join([CONTEXT_HEADER, *lines])
    shown = replace(message, context=context, attachments=(*files, *message.attachments))
    return shown, consumed


async def accepted_with_kept_context(
    store: InboundLedger,
    message: InboundMessage,
    keys: tuple[str, ...],
    *,
    admits: Callable[[str], bool],
    shared_from: str | None = None,
) -> tuple[InboundMessage, int | None]:
    """Accept ``message`` under ``keys`` with the lines kept in its conversation as its
    context (``with_kept_context``): the prompt as accepted and its inbox id (None: a
    repeat). A conversation that keeps no lines costs one accept and no read; the check is
    the accept's own, so a line kept meanwhile (by this node or another) is either shown
    to this prompt or left for the next, as a read before the accept would. A prompt that
    reads a group's shared lines (``shared_from``) always reads first: the lines are kept
    whoever read them, so that check would not tell."""
    if shared_from is None:
        try:
            inbox_id = await store.accept_inbound(
                message.channel, keys, message, unless_chatter_kept=True
            )
        except ChatterKept:
            pass
        else:
            return message, inbox_id
    prompt, consumed = await with_kept_context(
        store, message, admits=admits, shared_from=shared_from
    )
    reader = None if shared_from is None or consumed is None else message.conversation_key
    inbox_id = await store.accept_inbound(
        message.channel, keys, prompt, consume_chatter=consumed, chatter_read_by=reader
    )
    return prompt, inbox_id


def _kept_text(line: KeptLine) -> str:
    """A kept message's text, and the names of the files it came with."""
    files = " ".join(f"[sent {a.label()}]" for a in line.attachments)
    return f"{line.text} {files}".strip() if files else line.text


__all__ = [
    "CONTEXT_HEADER",
    "CONTEXT_LIMIT",
    "EDITED",
    "accepted_with_kept_context",
    "as_edit",
    "with_kept_context",
]
