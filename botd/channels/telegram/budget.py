"""``TelegramBudget``: every Bot API call of one bot paced by its ``Budget``, answers first.

python-telegram-bot calls its rate limiter around each request (never around
``getUpdates``) with the method's name and parameters; this one, in place of PTB's
``AIORateLimiter``, asks the bot's ``Budget`` (``botd.channels.budget``) for the call's turn:

* the bot's rate, 30 requests a second per token (``TOKEN_RATE``), shared by the nodes when
  several run the bot (the rate's name is the bot's id, the part of the token before the
  colon, which is public: the token itself is never stored or logged);
* a message posted counts against its chat's window too: a group's (a negative id, or a
  channel's ``@name``) ``GROUP`` (20 a minute), a private chat's ``CHAT`` (about one a
  second, bursts of three). Edits, reactions, chat actions and drafts post no message: they
  count against the token's rate only, but one of a class below answers waits while an
  answer of its chat waits for the chat's window (``Budget.take``'s ``follows``): no reaction
  or preview edit goes to a group whose answer is held back;
* the call's class from its method (``priority_of``): a press's answer and the keyboard's
  change first, then messages and deletes (answers), text edits and drafts (previews),
  reactions and chat actions (decorations). The class the delivery gave a call
  (``channels.budget.paced_as``: a final edit is an answer, a tool status line's post or
  edit a ``STATUS``) goes as PTB's ``rate_limit_args`` and overrides the method's. A chat
  action that waited
  ``CHAT_ACTION_STALE`` seconds is dropped: "typing" after the answer is noise.

Nothing is retried here: a 429 reaches the adapter, which waits it out for that chat only
(``TelegramOutbound._per_chat``), as with PTB's limiter before.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from telegram.ext import BaseRateLimiter

from ...cluster.budget import SharedRate
from ..budget import Budget, Priority, Window

__all__ = [
    "CHAT",
    "CHAT_ACTION_STALE",
    "GROUP",
    "TOKEN_RATE",
    "TelegramBudget",
    "priority_of",
]

TOKEN_RATE = Window(30, 1.0)
GROUP = Window(20, 60.0)
CHAT = Window(3, 3.0)

CHAT_ACTION_STALE = 5.0
"""Seconds a chat action may wait before it is dropped (it shows for about five)."""

DECORATIONS = frozenset({"setMessageReaction", "sendChatAction"})
PREVIEWS = frozenset({"sendMessageDraft", "editMessageText", "editMessageCaption"})
PRESSES = frozenset({"answerCallbackQuery", "editMessageReplyMarkup"})
UNCOUNTED = DECORATIONS | {"sendMessageDraft"}
"""Methods that name a chat but post no message in it."""


def priority_of(endpoint: str, given: int | None = None) -> Priority:
    """The class of a call of ``endpoint`` (see the module docstring); ``given``: the class
    the caller gave as PTB's ``rate_limit_args`` (None: from the method)."""
    if given is not None:
        return Priority(given)
    if endpoint in DECORATIONS:
        return Priority.DECORATION
    if endpoint in PREVIEWS:
        return Priority.PREVIEW
    if endpoint in PRESSES:
        return Priority.PRESS
    return Priority.ANSWER


def chat_window(endpoint: str, data: dict[str, Any]) -> tuple[tuple[str, Window], ...]:
    """The chat window a call of ``endpoint`` with ``data`` counts against (none: it posts
    no message in a chat)."""
    window = window_of(data)
    counted = endpoint.startswith(("send", "copy", "forward"))
    if window is None or not counted or endpoint in UNCOUNTED:
        return ()
    return (window,)


def window_of(data: dict[str, Any]) -> tuple[str, Window] | None:
    """The window of the chat a call with ``data`` is made in, by its key: a group's (a
    negative id, or a channel's ``@name``) or a private chat's (None: no chat)."""
    chat_id = data.get("chat_id")
    if chat_id is None:
        return None
    chat = str(chat_id)
    if chat.startswith(("-", "@")):
        return (f"group:{chat}", GROUP)
    return (f"chat:{chat}", CHAT)


class TelegramBudget(BaseRateLimiter[int]):
    """PTB's rate limiter for one bot (``bot_id``), pacing by a ``Budget`` (see the module
    docstring); ``shared``: the nodes' shared rates (None: this node alone)."""

    def __init__(self, bot_id: str, shared: SharedRate | None = None) -> None:
        self.budget = Budget(f"telegram:{bot_id}", TOKEN_RATE, shared)

    async def initialize(self) -> None:
        pass

    async def shutdown(self) -> None:
        await self.budget.close()

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, bool | dict[str, Any] | list[dict[str, Any]]]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> bool | dict[str, Any] | list[dict[str, Any]]:
        stale = CHAT_ACTION_STALE if endpoint == "sendChatAction" else None
        priority = priority_of(endpoint, rate_limit_args)
        windows = chat_window(endpoint, data)
        chat = window_of(data)
        # Below answers, a call in a chat stays behind that chat's held-back answers.
        follows = (chat[0],) if chat is not None and priority > Priority.ANSWER else ()
        go = await self.budget.take(priority, windows, follows=follows, stale_after=stale)
        if not go:
            return True  # a chat action dropped as stale: Telegram's answer to one is True
        return await callback(*args, **kwargs)
