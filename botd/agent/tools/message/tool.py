"""The ``message`` tool: lets the agent post a message itself, here or to another chat.

``send`` posts to a target: by default the conversation the run answers (its thread kept);
``to`` names another chat (``chat`` or ``chat:thread:T``) and ``channel`` another platform,
both on the run's account. ``reply`` answers the run's conversation as a reply to the message
being answered. ``buttons`` (rows of labels) puts buttons under the message; a press
comes back as the presser's message ``(pressed: <label>)``. ``media`` lists files to upload
with the text (URLs, or paths under ``media.outbound_dir``), sent like a reply's ``MEDIA:``
lines: a file that cannot be sent is posted as its link instead. The subscriber recognises
these calls (same ``action``/``message``/``to``/``channel`` arguments), so text sent here is
not delivered a second time as a reply.

Every failure is a tool result the model can read and tell the user about: no place to send
to, a target the operator's policy refuses (also logged as a warning naming the target and the
conversation; nothing is sent), or the platform's own refusal.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ....buttons.layout import (
    MAX_LABEL,
    MAX_PER_ROW,
    MAX_ROWS,
    ButtonRows,
    ButtonsError,
    button_rows,
)
from ....chat import MessageRef, Target
from ....cluster.fencing import RunScope
from ...types import ToolDefinition
from ..base import SendFunction, ToolContext, ToolOutput

log = logging.getLogger(__name__)

_THREAD_MARK = ":thread:"

Refusal = Callable[[Target, Target | None], str | None]
"""Why a run in the second target (its origin, None if it has none) may not post to the first
one; None when it may."""


MediaSendFunction = Callable[[Target, str, Sequence[str], RunScope], Awaitable[MessageRef]]
"""Posts text with files (URLs or paths) to a target through the channel layer (for the run
of a scope, as ``SendFunction``)."""

ButtonSendFunction = Callable[
    [Target, str, Sequence[str], ButtonRows, RunScope], Awaitable[MessageRef]
]
"""Posts text (with files, if any) and buttons under it; the ref of the message with them."""

MAX_MEDIA = 10
"""The most files one call may send."""


def _anywhere(target: Target, origin: Target | None) -> str | None:
    return None


_DESCRIPTION = (
    "Post a message to a chat yourself. action 'send' posts to the current conversation, or "
    "to another chat when 'to' is given (a chat id, or 'chat:thread:T' for a thread) and, "
    "for another platform, 'channel'. action 'reply' answers the current conversation as a "
    "reply to the user's message. 'media' attaches files (URLs or paths) to upload. "
    '\'buttons\' offers choices under the message, as rows of labels (e.g. [["Yes", "No"]]); '
    "a press comes back to you as the user's message '(pressed: <label>)'. "
    "Your normal answer is delivered anyway: use this tool only "
    "to reach another chat or when asked to send something separately. Other chats are "
    "reachable only where the operator allows it; a refusal says why."
)


@functools.lru_cache(maxsize=16)
def _schema(channels: tuple[str, ...]) -> dict[str, Any]:
    """The tool's arguments; ``channels`` are named in ``channel``'s description.

    One object per set of channels, shared by every run's tool: the tools' validators are
    compiled once per schema object (``tools.schema_validator``), and checking a schema
    against the meta-schema costs more than the rest of a short run."""
    which = f" ({', '.join(channels)})" if channels else ""
    return {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["send", "reply"]},
            "message": {"type": "string", "minLength": 1, "description": "The text to post."},
            "media": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "maxItems": MAX_MEDIA,
                "description": "Files to upload with the text: http(s) URLs or local file paths.",
            },
            "buttons": {
                "type": "array",
                "items": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1, "maxLength": MAX_LABEL},
                    "minItems": 1,
                    "maxItems": MAX_PER_ROW,
                },
                "minItems": 1,
                "maxItems": MAX_ROWS,
                "description": (
                    f"Buttons under the message: up to {MAX_ROWS} rows of up to {MAX_PER_ROW} "
                    f"labels, each at most {MAX_LABEL} characters."
                ),
            },
            "to": {
                "type": "string",
                "minLength": 1,
                "description": "A chat id, or 'chat:thread:T'. Default: the current conversation.",
            },
            "channel": {
                "type": "string",
                "minLength": 1,
                "description": f"The channel to post on{which}. Default: the current one.",
            },
        },
        "required": ["action", "message"],
        "additionalProperties": False,
    }


def describe_target(target: Target) -> str:
    """A target as people read it: ``channel:chat`` or ``channel:chat:thread:T``."""
    return f"{target.channel}:{target.route()}"


def _parse_to(to: str) -> tuple[str, str | None]:
    """``chat`` or ``chat:thread:T`` as (chat, thread); the last ``:thread:`` counts."""
    chat, mark, thread = to.rpartition(_THREAD_MARK)
    if not mark:
        return to.strip(), None
    return chat.strip(), thread.strip() or None


def _failure(text: str, **details: Any) -> ToolOutput:
    return ToolOutput(
        text=text, is_error=True, details={"status": "error", "error": text, **details}
    )


class MessageTool:
    """The ``message`` tool (see the module docstring).

    ``channels`` are the channels botd runs, named to the model as the ``channel`` it may give.

    ``send`` posts through the channel layer; ``refusal`` decides which targets this agent may
    post to (an operator's policy; by default anywhere); ``timeout`` bounds one call (None: the
    loop's default).
    """

    def __init__(
        self,
        send: SendFunction,
        *,
        refusal: Refusal = _anywhere,
        timeout: float | None = 30.0,
        send_media: MediaSendFunction | None = None,
        send_buttons: ButtonSendFunction | None = None,
        channels: Sequence[str] = (),
    ) -> None:
        self._send = send
        self._send_media = send_media
        self._send_buttons = send_buttons
        self._refusal = refusal
        self.timeout = timeout
        self.spec = ToolDefinition(
            name="message", description=_DESCRIPTION, input_schema=_schema(tuple(channels))
        )

    async def run(self, args: dict[str, Any], context: ToolContext) -> ToolOutput:
        text = str(args.get("message", ""))
        raw_media = args.get("media") or []
        if not isinstance(raw_media, list):
            return _failure("media must be a list of URLs or paths")
        media = [str(m).strip() for m in raw_media if str(m).strip()]
        if not text.strip():
            return _failure("message is empty: give the text to send")
        if media and self._send_media is None:
            return _failure("files cannot be sent from here")
        raw_buttons = args.get("buttons") or []
        if not isinstance(raw_buttons, list) or not all(isinstance(r, list) for r in raw_buttons):
            return _failure("buttons must be a list of rows, each a list of labels")
        try:
            buttons = button_rows(
                [[str(label) for label in row] for row in raw_buttons], strict=True
            )
        except ButtonsError as exc:
            return _failure(f"buttons cannot be shown: {exc}")
        if buttons and self._send_buttons is None:
            return _failure("buttons cannot be sent from here")
        resolved = self._target(
            str(args.get("action", "send")), args.get("to"), args.get("channel"), context.origin
        )
        if isinstance(resolved, str):
            return _failure(resolved)
        target = resolved
        where = describe_target(target)
        refused = self._refusal(target, context.origin)
        if refused is not None:
            log.warning(
                "message tool: refused a send to %s from conversation %s: %s",
                where,
                context.conversation_key,
                refused,
            )
            return _failure(f"not allowed: {where}: {refused}", to=target.route())
        try:
            if buttons and self._send_buttons is not None:
                ref = await self._send_buttons(target, text, media, buttons, context.scope)
            elif media and self._send_media is not None:
                ref = await self._send_media(target, text, media, context.scope)
            else:
                ref = await self._send(target, text, context.scope)
        except Exception as exc:  # the platform's refusal, in its own words
            reason = str(exc) or type(exc).__name__
            return _failure(f"send to {where} failed: {reason}", to=target.route())
        return ToolOutput(
            text="sent",
            details={
                "status": "ok",
                "message_id": ref.message_id,
                "to": target.route(),
                "channel": target.channel,
            },
        )

    @staticmethod
    def _target(action: str, to: Any, channel: Any, origin: Target | None) -> Target | str:
        """Where the call posts, or why it cannot post anywhere."""
        to = to.strip() if isinstance(to, str) and to.strip() else None
        channel = channel.strip() if isinstance(channel, str) and channel.strip() else None
        if origin is None:
            if to is None or channel is None:
                return "no current conversation: give both 'to' and 'channel'"
            if action == "reply":
                return "no current conversation to reply to: use action 'send'"
            chat, thread = _parse_to(to)
            if not chat:
                return f"'to' names no chat: {to!r}"
            return Target(channel=channel, chat_id=chat, thread_id=thread)

        account = origin.account_id
        if to is None:
            if channel is not None and channel != origin.channel:
                return f"give 'to' (a chat id) to send on another channel ({channel})"
            here = Target(origin.channel, origin.chat_id, account, origin.thread_id)
        else:
            chat, thread = _parse_to(to)
            if not chat:
                return f"'to' names no chat: {to!r}"
            here = Target(channel or origin.channel, chat, account, thread)

        if action != "reply":
            return here
        same_conversation = (here.channel, here.chat_id, here.thread_id) == (
            origin.channel,
            origin.chat_id,
            origin.thread_id,
        )
        if not same_conversation:
            return (
                "reply only answers the current conversation; use action 'send' to post elsewhere"
            )
        return origin  # the origin's reply_to_id is the message being answered
