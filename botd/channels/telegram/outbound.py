"""What a Telegram bot sends: ``TelegramOutbound``, the Bot API calls that post, edit,
draft, delete and react to messages and show that the bot is typing.

Outgoing text is rendered to Telegram's HTML subset (``markup``) and cut into messages of
the text limit; markup Telegram refuses ("can't parse entities") is sent again as plain text.
A message that is not the answer (``SendScope.silent``: a status line, a preview's further
message) is posted with ``disable_notification``; a chat whose ``link_previews`` is off gets
``link_preview_options`` with ``is_disabled`` on every message and edit.
Every call is paced by the bot's budget (``budget``: Telegram's limits, shared by the nodes,
answers first; a final edit goes as an answer). A 429 is waited out for its chat only
(others go on). Each call that posts,
edits or deletes a message is made under the fence of its ``SendScope`` (``transport``).
Other failures raise ``TelegramAPIError`` with Telegram's description (``errors.api_error``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from telegram import (
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    ReactionTypeEmoji,
    ReplyParameters,
)
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest, RetryAfter, TelegramError
from telegram.ext import ExtBot

from ...buttons.layout import chosen_label
from ...chat import Button, MessageRef, Target
from ...retry import retry_after
from ...text.markup import RenderedChunk
from ..base import LinkPreviews, OutboundFile, SendScope, fence_of
from ..budget import Priority, paced_as
from . import uploads
from .errors import api_error
from .markup import HTML
from .reactions import telegram_reaction
from .targets import GENERAL_TOPIC
from .transport import fenced_requests

__all__ = ["CHOSEN_DATA", "TelegramOutbound"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_MAX_FLOOD_RETRIES = 3

CHOSEN_DATA = "botd:chosen"
"""The callback data of the button that shows a choice made (a press of it: "Already answered")."""


def _is_parse_error(exc: BadRequest) -> bool:
    return "can't parse entities" in exc.message.lower()


def _is_not_modified(exc: BadRequest) -> bool:
    return "message is not modified" in exc.message.lower()


class TelegramOutbound:
    """The calls one bot makes to post and change messages (module docstring).

    ``bot`` gives the connected bot (it raises a retryable ``ChannelError`` while there is
    none); ``channel`` names the channel instance in log lines; ``text_limit`` is the length
    a message's text is cut at; ``link_previews``, the chats whose messages (and edits)
    show no link preview. The per-chat flood waits outlive a restart of the bot.
    """

    def __init__(
        self,
        bot: Callable[[], ExtBot[Any]],
        *,
        channel: str,
        text_limit: int,
        link_previews: LinkPreviews | None = None,
    ) -> None:
        self._bot = bot
        self.name = channel
        self._text_limit = text_limit
        self._link_previews = link_previews or LinkPreviews()
        self._chat_paused_until: dict[str, float] = {}

    def _link_options(self, chat_id: str) -> dict[str, Any]:
        """The ``link_preview_options`` of a message to ``chat_id`` (none: Telegram's)."""
        if self._link_previews.shown_in(chat_id):
            return {}
        return {"link_preview_options": LinkPreviewOptions(is_disabled=True)}

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        chunks = HTML.chunks(markdown, self._text_limit)
        with fenced_requests(fence_of(scope)):
            return await self._send_chunks(
                target,
                chunks,
                reply_to=target.reply_to_id,
                pace=paced_as(scope),
                silent=scope is not None and scope.silent,
            )

    async def send_buttons(
        self,
        target: Target,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """``send``, with ``rows`` as the inline keyboard of its last message."""
        chunks = HTML.chunks(markdown, self._text_limit)
        with fenced_requests(fence_of(scope)):
            return await self._send_chunks(
                target, chunks, reply_to=target.reply_to_id, keyboard=_keyboard(rows)
            )

    async def edit_buttons(
        self,
        ref: MessageRef,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> None:
        """``ref``'s message shows ``markdown`` (its first message's worth) with ``rows`` as
        its inline keyboard (none: the keyboard removed)."""
        with fenced_requests(fence_of(scope)):
            await self._edit_text(ref, markdown, _keyboard(rows) or InlineKeyboardMarkup([]))

    async def send_file(
        self,
        target: Target,
        file: OutboundFile,
        caption: str = "",
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        thread = target.thread_id if target.thread_id != GENERAL_TOPIC else None
        with fenced_requests(fence_of(scope)):
            return await uploads.send_file(
                self._bot(), self._per_chat, target, file, caption, thread=thread
            )

    async def _send_chunks(
        self,
        target: Target,
        chunks: list[RenderedChunk],
        *,
        reply_to: str | None,
        keyboard: InlineKeyboardMarkup | None = None,
        pace: Priority | None = None,
        silent: bool = False,
    ) -> list[MessageRef]:
        """Post ``chunks`` as messages; ``pace``: their class in the bot's budget (None: from
        the method, an answer's); ``silent``: without a notification (not the answer)."""
        bot = self._bot()
        thread = target.thread_id if target.thread_id != GENERAL_TOPIC else None
        chat = target.chat_id
        refs = []
        for number, chunk in enumerate(chunks, 1):
            extra: dict[str, Any] = self._link_options(chat)
            if silent:
                extra["disable_notification"] = True
            if keyboard is not None and number == len(chunks):
                extra["reply_markup"] = keyboard  # the buttons go under the last message
            if thread is not None:
                extra["message_thread_id"] = int(thread)
            if pace is not None:
                extra["rate_limit_args"] = pace
            if reply_to is not None:
                extra["reply_parameters"] = ReplyParameters(
                    int(reply_to), allow_sending_without_reply=True
                )
            reply_to = None  # only the first message replies
            try:
                try:
                    sent = await self._per_chat(
                        chat,
                        partial(
                            bot.send_message, chat, chunk.text, parse_mode=ParseMode.HTML, **extra
                        ),
                    )
                except BadRequest as exc:
                    if not _is_parse_error(exc):
                        raise
                    log.warning(
                        "%s: markup refused (%s); sending plain text", self.name, exc.message
                    )
                    sent = await self._per_chat(
                        chat, partial(bot.send_message, chat, chunk.plain, **extra)
                    )
            except TelegramError as exc:
                raise api_error("sendMessage", exc) from exc
            refs.append(MessageRef(target, str(sent.message_id)))
        return refs

    async def _per_chat(self, chat_id: str, call: Callable[[], Awaitable[_T]]) -> _T:
        """``call()``, waiting out Telegram's 429s for this chat only.

        A flood wait pauses further requests to the same chat until it has passed; other
        chats go on. Gives up after ``_MAX_FLOOD_RETRIES`` waits (the error then reaches
        the caller in Telegram's words).
        """
        loop = asyncio.get_running_loop()
        for attempt in range(_MAX_FLOOD_RETRIES + 1):
            pause = self._chat_paused_until.get(chat_id, 0.0) - loop.time()
            if pause > 0:
                await asyncio.sleep(pause)
            try:
                return await call()
            except RetryAfter as exc:
                if attempt == _MAX_FLOOD_RETRIES:
                    raise
                wait = (retry_after(exc.retry_after) or 0.0) + 0.1
                self._chat_paused_until[chat_id] = loop.time() + wait
                log.warning(
                    "%s: flood wait %.1fs for chat %s (%s)",
                    self.name,
                    wait,
                    chat_id,
                    exc.message,
                )
        raise AssertionError("unreachable")

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """Show ``markdown`` in ``ref``'s message; text past one message follows in new ones.
        A final edit (``scope.final``) is paced as an answer, a status line's after previews,
        others as a preview's (``paced_as``)."""
        with fenced_requests(fence_of(scope)):
            return await self._edit_text(
                ref, markdown, pace=paced_as(scope), silent=scope is not None and scope.silent
            )

    async def _edit_text(
        self,
        ref: MessageRef,
        markdown: str,
        keyboard: InlineKeyboardMarkup | None = None,
        *,
        pace: Priority | None = None,
        silent: bool = False,
    ) -> list[MessageRef]:
        """Edit ``ref``'s message; ``pace``: its class in the bot's budget (None: from the
        method, a preview's edit); ``silent``: text that outgrew it follows without a
        notification."""
        bot = self._bot()
        chunks = HTML.chunks(markdown, self._text_limit)
        if not chunks:
            return [ref]
        chat_id, message_id = ref.target.chat_id, int(ref.message_id)
        markup: dict[str, Any] = self._link_options(chat_id)
        if keyboard is not None:
            markup["reply_markup"] = keyboard
        try:
            try:
                await self._per_chat(
                    chat_id,
                    lambda: bot.edit_message_text(
                        chunks[0].text,
                        chat_id,
                        message_id,
                        parse_mode=ParseMode.HTML,
                        rate_limit_args=pace,
                        **markup,
                    ),
                )
            except BadRequest as exc:
                if not _is_parse_error(exc):
                    raise
                await self._per_chat(
                    chat_id,
                    lambda: bot.edit_message_text(
                        chunks[0].plain, chat_id, message_id, rate_limit_args=pace, **markup
                    ),
                )
        except BadRequest as exc:
            if not _is_not_modified(exc):
                raise api_error("editMessageText", exc) from exc
        except TelegramError as exc:
            raise api_error("editMessageText", exc) from exc
        # Text that outgrew one message continues in new ones rather than being lost.
        more = await self._send_chunks(
            ref.target, chunks[1:], reply_to=None, pace=pace, silent=silent
        )
        return [ref, *more]

    def can_draft(self, target: Target) -> bool:
        """Drafts go to private chats only, whose ids are the users' (positive) ids."""
        return target.chat_id.isdigit()

    async def draft(self, target: Target, draft_id: int, markdown: str) -> None:
        """Show ``markdown``'s first message as the draft ``draft_id`` (``sendMessageDraft``):
        a temporary preview that the chat drops once a message is posted (or after 30 s)."""
        bot = self._bot()
        chunks = HTML.chunks(markdown, self._text_limit)
        if not chunks:
            return
        chat_id = int(target.chat_id)
        thread = target.thread_id if target.thread_id != GENERAL_TOPIC else None
        extra: dict[str, Any] = {}
        if thread is not None:
            extra["message_thread_id"] = int(thread)
        try:
            try:
                await self._per_chat(
                    target.chat_id,
                    partial(
                        bot.send_message_draft,
                        chat_id,
                        draft_id,
                        chunks[0].text,
                        parse_mode=ParseMode.HTML,
                        **extra,
                    ),
                )
            except BadRequest as exc:
                if not _is_parse_error(exc):
                    raise
                await self._per_chat(
                    target.chat_id,
                    partial(bot.send_message_draft, chat_id, draft_id, chunks[0].plain, **extra),
                )
        except TelegramError as exc:
            raise api_error("sendMessageDraft", exc) from exc

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        """Delete ``ref``'s message; one that is already gone counts as deleted."""
        bot = self._bot()
        chat_id, message_id = ref.target.chat_id, int(ref.message_id)
        try:
            with fenced_requests(fence_of(scope)):
                await self._per_chat(chat_id, lambda: bot.delete_message(chat_id, message_id))
        except BadRequest as exc:
            if "message to delete not found" not in exc.message.lower():
                raise api_error("deleteMessage", exc) from exc
        except TelegramError as exc:
            raise api_error("deleteMessage", exc) from exc

    async def set_reaction(
        self, ref: MessageRef, emoji: str | None, *, replacing: str | None = None
    ) -> None:
        """``setMessageReaction``: a bot has one reaction per message, and the call replaces
        it (``replacing`` needs no call of its own); None takes it away. An emoji is sent as
        Telegram's list spells it (❤️ as ❤)."""
        bot = self._bot()
        # Given as a ReactionTypeEmoji: PTB would take a text off its own list for the id
        # of a custom emoji.
        reaction = [] if emoji is None else [ReactionTypeEmoji(telegram_reaction(emoji) or emoji)]
        try:
            await bot.set_message_reaction(ref.target.chat_id, int(ref.message_id), reaction)
        except TelegramError as exc:
            raise api_error("setMessageReaction", exc) from exc

    async def typing(self, target: Target) -> None:
        bot = self._bot()
        # Unlike sends, chat actions take the General topic's id too.
        thread = int(target.thread_id) if target.thread_id is not None else None
        try:
            await bot.send_chat_action(target.chat_id, ChatAction.TYPING, message_thread_id=thread)
        except TelegramError as exc:
            raise api_error("sendChatAction", exc) from exc

    async def show_choice(self, chat_id: int, message_id: int, label: str, presser: str) -> None:
        """The buttons under a message give way to one showing the choice made (``label``,
        as botd put it there) and who made it; a failure is only logged."""
        chosen = _keyboard([[Button(chosen_label(label, presser), CHOSEN_DATA)]])
        try:
            await self._per_chat(
                str(chat_id),
                partial(
                    self._bot().edit_message_reply_markup,
                    chat_id,
                    message_id,
                    reply_markup=chosen,
                ),
            )
        except TelegramError as exc:
            log.warning("%s: showing the choice made failed: %s", self.name, exc.message)


def _keyboard(rows: Sequence[Sequence[Button]]) -> InlineKeyboardMarkup | None:
    """``rows`` as an inline keyboard, each button's value its callback data (None: none)."""
    if not rows:
        return None
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(b.label, callback_data=b.value) for b in row] for row in rows]
    )
