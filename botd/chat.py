"""The shared vocabulary of chat: what comes in, where answers go, what a platform allows.

Every layer may import this module; it imports nothing of botd (a type named for checkers
only: ``MarkupRenderer``, from ``botd.text.markup``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from .text.markup import MarkupRenderer

__all__ = [
    "QUOTE_CHARS",
    "QUOTE_CUT",
    "Attachment",
    "AttachmentKind",
    "Button",
    "Capabilities",
    "ChannelId",
    "ChatKind",
    "ChatKindOf",
    "ConversationKeyOf",
    "InboundMessage",
    "MessageKey",
    "MessageRef",
    "PieceKey",
    "Press",
    "PressAnswer",
    "Quote",
    "Target",
    "TargetForm",
    "ToolSend",
    "storable",
]

_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(text: str) -> str:
    """``text`` as every store and platform can carry it: each lone UTF-16 surrogate and
    each NUL (U+0000) becomes U+FFFD.

    JSON may escape half of a surrogate pair (``"\\ud800"``) and decoders hand it on as is;
    SQLite, HTTP bodies and the platforms refuse such a string. A high and low surrogate
    next to each other are joined into the character they encode. JSON may carry a NUL
    (``"\\u0000"``) too, which PostgreSQL refuses in any text column. Text without either
    is returned unchanged (the same object).
    """
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    elif text.isascii():
        return text
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _make_storable(instance: Target | InboundMessage | Quote) -> None:
    """Replace every text field of a frozen dataclass ``instance`` by its ``storable`` form."""
    names = _FIELD_NAMES.get(type(instance))
    if names is None:
        names = _FIELD_NAMES[type(instance)] = tuple(f.name for f in fields(instance))
    for name in names:
        value = getattr(instance, name)
        if isinstance(value, str):
            if value.isascii() and "\x00" not in value:
                continue  # the common case, decided without a search
            clean = storable(value)
            if clean is not value:
                object.__setattr__(instance, name, clean)
        elif isinstance(value, tuple) and value:
            cleaned = tuple(storable(v) if isinstance(v, str) else v for v in value)
            if cleaned != value:
                object.__setattr__(instance, name, cleaned)


@dataclass(frozen=True, slots=True)
class ChannelId:
    """One channel instance: a platform's connection under its own name.

    ``name`` is the key of its ``channels.<name>`` section, and what every ``channel`` of
    botd holds (``InboundMessage.channel``, ``Target.channel``, the adapters, policies,
    health lines and metrics labels, stored rows); ``platform`` is the registered platform
    that runs it (its section model, adapter, ids and targets). A section named after its
    platform is the instance of that name (``channels.telegram``: ``telegram`` of platform
    ``telegram``), so a config with one account per platform names every channel as before.
    """

    name: str
    platform: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Target:
    """Where to post: a chat on a channel account, optionally a thread, optionally a reply."""

    channel: str
    """The channel instance's name (``ChannelId.name``): ``telegram``, or another name a
    section with ``platform:`` gave a second account."""
    chat_id: str
    account_id: str = "default"
    thread_id: str | None = None
    reply_to_id: str | None = None

    def route(self) -> str:
        """The messaging-tool route string of this target (``chat`` or ``chat:thread:T``)."""
        return self.chat_id if self.thread_id is None else f"{self.chat_id}:thread:{self.thread_id}"

    def __post_init__(self) -> None:
        _make_storable(self)


ChatKind = Literal["direct", "group", "unknown"]
"""What a chat is, as far as its ids tell: a direct chat with one person, a group, or not told."""

ChatKindOf = Callable[[str], tuple[ChatKind, str | None]]
"""A platform's reading of a chat id: its kind and, for a direct chat, the person's id when
the chat id tells it."""


class ConversationKeyOf(Protocol):
    """A platform's one spelling of a conversation key, from the channel instance's name, the
    chat and the thread in it (a forum topic, a thread; None: the chat itself). ``dm_user``
    is the person of a direct chat, for a platform whose direct chats are one conversation
    per person (Discord); the others key a direct chat by its chat id.

    The instance named after its platform spells the keys botd always stored
    (``telegram:<chat>``), so nothing stored moves; another instance has keys of its own
    (``support:<chat>``)."""

    def __call__(
        self,
        instance: str,
        chat_id: str,
        thread_id: str | None = None,
        *,
        dm_user: str | None = None,
    ) -> str: ...


def _in_thread(target: str, thread: str) -> str:
    return f"{target}:thread:{thread}"


ToolSend = Callable[[str, Mapping[str, Any], str | None], tuple[str, str | None] | None]
"""For a tool named after a platform (OpenClaw's ``telegram`` tool): given the action
(trimmed, lowercased), the call's arguments and the thread id they name, the target the call
sends to (as written) and the thread id that applies; None when the call sends nothing."""


@dataclass(frozen=True, slots=True)
class TargetForm:
    """How a platform spells the target of a messaging-tool send, so that two spellings of one
    conversation compare equal (the subscriber's messaging-tool dedupe). A platform without a
    form has its targets compared trimmed, as given."""

    normalize: Callable[[str], str]
    """A target without its thread, in the platform's one spelling ("" when it names none)."""
    in_thread: Callable[[str, str], str] = _in_thread
    """The target of a thread: (normalised target, thread id) -> by default
    ``<target>:thread:<thread id>``."""
    tool_send: ToolSend | None = None
    """How the tool named after the platform sends (None: there is no such tool)."""


AttachmentKind = Literal["image", "audio", "voice", "document", "video", "other"]


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file that came with an inbound message, as the platform announced it.

    Only the platform's reference is kept, never the bytes: the file is fetched through its
    adapter when the run that answers the message starts, so the durable inbox stays small
    and a message accepted before a restart can still be read after it.
    """

    kind: AttachmentKind
    """What the platform says it is (a photo, a voice note, a file); the bytes decide in
    the end (an image sent as a file is still an image)."""
    ref: str
    """The platform's handle: a Telegram ``file_id``, a Slack ``url_private``, a Discord
    attachment URL."""
    name: str = ""
    mime_type: str = ""
    size: int | None = None
    """The size the platform declared, in bytes (None: not told)."""

    def label(self) -> str:
        """How a reply or a note names this file."""
        return self.name or {"voice": "the voice note", "image": "the image"}.get(
            self.kind, f"the {self.kind}"
        )


class DownloadError(Exception):
    """An attachment could not be fetched; the message is one short phrase a user can read
    ("the download failed (HTTP 500)"), never a token or a private URL."""


class TooLarge(DownloadError):
    """An attachment is over the size limit (declared, or found while reading it)."""

    def __init__(self, size: int | None, limit: int) -> None:
        self.size, self.limit = size, limit
        told = f"{_megabytes(size)} MB, " if size is not None else ""
        super().__init__(f"it is too big ({told}the limit is {_megabytes(limit)} MB)")


def _megabytes(size: int) -> str:
    return f"{size / 1048576:.1f}".removesuffix(".0")


QUOTE_CHARS = 1000
"""At most this many characters of a quoted message reach the model (its start, with
``QUOTE_CUT`` at the end when it was longer): enough for the message a reply is about,
without letting one long message crowd out the conversation."""
QUOTE_CUT = " [… cut]"


@dataclass(frozen=True, slots=True)
class Quote:
    """The message an inbound message replies to, as the model is shown it.

    ``text`` is ``storable`` and at most ``QUOTE_CHARS`` characters from construction on
    (a longer text keeps its start and ends with ``QUOTE_CUT``; cutting again changes
    nothing, so a quote read back from the store is the one written).
    """

    speaker: str
    """Who wrote it, as botd labels a speaker (``Alice (id 123)``, see ``botd.speakers``);
    for the bot's own message, the bot's name on the platform."""
    text: str
    """Its text (a file's caption; the part a user selected, where the platform tells)."""
    from_bot: bool = False
    """Whether it is one of the bot's own messages."""

    @classmethod
    def of(
        cls, speaker: str, text: str, files: Sequence[Attachment] = (), *, from_bot: bool = False
    ) -> Quote | None:
        """A quote of a message saying ``text`` with ``files`` (each named as kept chatter
        names them: ``[sent the image]``); None when it has neither (nothing to show)."""
        named = " ".join(f"[sent {file.label()}]" for file in files)
        said = f"{text.strip()} {named}".strip()
        return cls(speaker, said, from_bot) if said else None

    def __post_init__(self) -> None:
        _make_storable(self)
        if len(self.text) > QUOTE_CHARS:
            kept = self.text[: QUOTE_CHARS - len(QUOTE_CUT)].rstrip()
            object.__setattr__(self, "text", kept + QUOTE_CUT)


@dataclass(frozen=True, slots=True)
class Button:
    """One choice the bot offers under a message (an inline keyboard button, a Block Kit
    button, a Discord component button)."""

    label: str
    """What the user sees."""
    value: str
    """botd's own callback data for this button: at most 64 bytes (Telegram's limit)."""


@dataclass(frozen=True, slots=True)
class Press:
    """A button of a message the bot posted, pressed by a user, as the platform delivered
    it: ``value`` is whatever data the presser's client sent, so the router counts the
    press only as one of the buttons botd recorded under that message."""

    callback_id: str
    """The platform's id of this press: the dedupe key (a redelivery repeats it)."""
    value: str
    """The ``Button.value`` pressed."""
    message_id: str
    """The bot's message carrying the buttons (in the chat the press came from)."""


@dataclass(frozen=True, slots=True)
class PressAnswer:
    """What the router decided about a press, for the adapter to tell the platform."""

    text: str | None = None
    """The short answer shown to the presser (None: a silent acknowledgement)."""
    chosen: bool = False
    """The press is the message's answer: its buttons give way to the choice made."""
    label: str = ""
    """The label of the button chosen, as botd put it on the message (never text the
    presser's client sent): what the message shows once ``chosen``."""


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A chat message addressed to the bot, already mapped to its conversation.

    Its text fields are ``storable``: a lone surrogate or a NUL is U+FFFD from construction
    on.
    """

    channel: str
    """The channel instance it came in on (``ChannelId.name``)."""
    chat_id: str
    sender_id: str
    text: str
    message_id: str
    conversation_key: str
    """Decided by the adapter: a DM per peer, a group, or a thread/topic of it."""
    account_id: str = "default"
    thread_id: str | None = None
    sender_name: str = ""
    is_direct: bool = False
    mentions_bot: bool = False
    reply_to_message_id: str | None = None
    target: Target | None = None
    """Where answers go, when the adapter decides it (Slack's ``reply_to_mode``)."""
    dedupe_keys: tuple[str, ...] = ()
    """The platform ids that identify this message for the router's inbound ledger; a repeat
    under any of them is dropped. Empty: the router keys it by account, chat and message id."""
    bot_name: str = ""
    """This bot's own name on the platform, when the adapter knows it (Telegram's username):
    a ``/command@name`` for another name is not for this bot. Empty: unknown."""
    context: str = ""
    """What the model reads before this message, already labelled by speaker: chatter kept
    since the bot last spoke in the group, earlier messages of a thread. Empty: none."""
    inbox_id: int | None = None
    """The durable inbox row it was accepted as: a chat message by the router, a scheduled
    job's prompt by the job's firing (None: not from the inbox)."""
    attachments: tuple[Attachment, ...] = ()
    """Files sent with it (photos, voice notes, documents); ``text`` is then their caption,
    possibly empty."""
    album: str | None = None
    """The platform's id of files sent together as one post (a Telegram album arrives as one
    message per file, the caption on one of them): such messages are answered as one."""
    edited: bool = False
    """An earlier message edited: ``text`` is what it says now. The router keeps it as context
    for the conversation's next prompt; it is never a prompt itself. Its ``dedupe_keys``
    name this edit (a later edit of the same message is another)."""

    quoted: Quote | None = None
    """The message this one replies to (on Slack: the parent of a thread the bot had not
    read), shown to the model before it, marked as a quote. None: no reply, or nothing the
    model is not shown already."""
    reactable: bool = True
    """``message_id`` names a chat message the bot can react to (its status reactions);
    false for a slash command's use, a scheduled job's prompt and a button press (always,
    whatever the adapter said: a press is no message)."""

    heartbeat: int | None = None
    """Set on a scheduled heartbeat check's prompt: an answer that is only ``HEARTBEAT_OK``,
    or the token with a remark of at most this many characters, is not posted (None: not a
    heartbeat check)."""
    press: Press | None = None
    """Set when this is a button press: ``text`` is then ``(pressed: <label>)`` and the
    sender is the presser."""
    in_history: bool = False
    """``message_id`` is this message's place in a history of its chat (its thread, if any)
    that botd can read again (Discord's and Slack's): accepting it, or keeping it as context,
    moves that chat's catch-up mark (``botd.channels.catch_up``). False for what has no such
    place: a slash command's use, a press, a platform whose history botd does not read."""

    def __post_init__(self) -> None:
        # Whatever a platform sent, every text field can be stored and sent on: each lone
        # surrogate is replaced here, where every adapter's message is made.
        _make_storable(self)
        if self.press is not None and self.reactable:
            object.__setattr__(self, "reactable", False)

    def reply_target(self) -> Target:
        """Where an answer to this message goes."""
        if self.target is not None:
            return self.target
        return Target(self.channel, self.chat_id, self.account_id, self.thread_id)


@dataclass(frozen=True, slots=True)
class MessageRef:
    """A message the bot posted, so it can be edited or reacted to."""

    target: Target
    message_id: str


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a platform allows: limits apply to the text as the platform receives it."""

    text_limit: int
    markup: MarkupRenderer
    """How the platform shows Markdown (its markup, escapes and length count)."""
    line_limit: int | None = None
    can_edit: bool = True
    threads: bool = True
    caption_limit: int | None = None
    """The longest text an uploaded file can carry as its caption; None: no captions."""
    resend_window: float = 0.0
    """For how many seconds after a piece was written a send of it again is recognised by
    the platform (``PieceKey``), so a piece a crash left unconfirmed is not shown twice: 0
    when it never is (Telegram), ``inf`` when the adapter looks for it first (Slack)."""


_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def _base36(number: int) -> str:
    digits = ""
    while True:
        number, digit = divmod(number, 36)
        digits = _BASE36[digit] + digits
        if not number:
            return digits


@dataclass(frozen=True, slots=True)
class PieceKey:
    """The durable identity of one reply piece, the same before a crash and after it.

    ``row`` is its outbox row, ``digest`` a digest of its text: a row id alone repeats when a
    database is made anew (and within minutes a platform that remembers keys would take the
    new piece for the old one). ``written_at`` is when the row was written (wall clock
    seconds; None on the live path, which needs no look-back); ``unconfirmed`` says a crash
    came between a send of it and its sent mark, so it may be in the chat already.
    """

    row: int
    digest: str
    written_at: float | None = None
    unconfirmed: bool = False

    @classmethod
    def of(
        cls, row: int, text: str, *, written_at: float | None = None, unconfirmed: bool = False
    ) -> PieceKey:
        digest = hashlib.blake2b(text.encode("utf-8"), digest_size=4).hexdigest()
        return cls(row, digest, written_at, unconfirmed)

    def message(self, index: int) -> MessageKey:
        """The key of the piece's message number ``index`` (from 0, in the order sent)."""
        return MessageKey(self, index)


@dataclass(frozen=True, slots=True)
class MessageKey:
    """One message of a piece: what an adapter tags it with (``token``), so that a send of it
    again is recognised (Discord's nonce) or found (Slack's message metadata)."""

    piece: PieceKey
    index: int

    def token(self, part: int = 0) -> str:
        """At most 25 characters (Discord's nonce limit) naming this message; ``part`` is the
        adapter's own number for a message it had to split further."""
        piece = self.piece
        token = f"{_base36(piece.row)}.{piece.digest}.{_base36(self.index)}"
        if part:
            token += f".{_base36(part)}"
        if len(token) > 25:  # past 36**7 rows: the digest gives way, the numbers stay
            token = token[len(token) - 25 :]
        return token
