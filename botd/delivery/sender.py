"""``Sender``: a text, its files and its buttons posted through the channel's adapter, retried.

It hands the adapter the Markdown (each adapter renders it for its platform), cut into the
channel's messages first (``fitting.py``). Media the agent attached are uploaded as files, the
text as the first one's caption when it fits (``media.py``). A platform's refusal is logged in
its own words and raised to the caller: a run's outbox logs it and carries on; nothing is
dropped silently.

Every send, upload, edit and delete passes through a ``Retrier`` (``retrying.py``), per
conversation: a failure that may pass (a 5xx, a 429, a lost connection) is tried again with
backoff, respecting the platform's ``retry_after``, for the channel's retry budget (five
minutes unless configured); later pieces of the conversation wait behind it, and other
conversations are not held up. A refusal (a 4xx) is not retried. When the budget is spent
the piece is given up, logged, and the chat is told once, if it can be reached, that a reply
could not be delivered (``GIVE_UP_NOTICE``). A text longer than one message is sent message
by message, so a retry never posts again a part that already went out. Each try starts only
while the conversation's lease allows it, and hands the adapter the fence with the call
(``scope.tries``: the adapter's SDK checks it again as the request is written).

A piece of the durable outbox is posted with its ``PieceKey``: each message it makes (each
part of a long text, each upload) is keyed for the adapter (``SendScope.key``), the same key
in every retry (``scope.tries``, numbered by the piece's ``PieceMessages``), so a platform
that can recognises a send of it again.

Buttons go under the last message of their text; each message that shows buttons is recorded
in the ``ButtonLedger`` (what a press of it is checked against). A platform without buttons
gets their labels listed after the text (``with_choices_listed``).

Each message a platform confirmed is counted (``counts``, the daemon's metrics) where it is
sent: a text (each part of a long one), an upload, the give-up notice, and a preview's message
when it is posted (``count_sent``; its edits are not counted again). Each failed attempt that
is retried counts as a ``send_retry``, each reply refused or given up as a ``send_failed``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Literal, TypeVar

from ..channels.base import ButtonAdapter, ChannelAdapter, OutboundFile
from ..chat import Button, MessageRef, PieceKey, Target
from ..store import ButtonLedger, PostedButtons
from .base import DeliveryCounts
from .fitting import messages
from .media import MediaSettings, send_with_media, upload_file
from .retrying import DeliveryGivenUp, Retrier, RetrySettings
from .routing import ChannelRoutes, chat_key
from .scope import (
    Fence,
    PieceMessages,
    RunScope,
    ScopedCall,
    fence_of,
    fenced_out,
    tries,
    unkeyed,
)

log = logging.getLogger(__name__)

_T = TypeVar("_T")
ButtonRows = Sequence[Sequence[Button]]
_ONE_ATTEMPT = RetrySettings(budget=0.0)

GIVE_UP_NOTICE = "⚠️ A reply could not be delivered: this chat could not be reached for a while."
"""Told once per outage, when a piece was given up (if the chat can be reached by then)."""

CHOOSE = "Choose:"
"""The text of buttons the agent sent without any."""


def with_choices_listed(markdown: str, rows: ButtonRows) -> str:
    """``markdown`` with the buttons' labels listed after it, for a platform that shows no
    buttons (the console): the choices are still seen, and can be answered by typing one."""
    labels = " · ".join(f"[{button.label}]" for row in rows for button in row)
    return f"{markdown}\n\n{labels}" if markdown else labels


class Sender:
    """Posts, edits and deletes for every conversation, retried (see the module docstring)."""

    def __init__(
        self,
        routes: ChannelRoutes,
        *,
        retry: RetrySettings | Mapping[str, RetrySettings] | None = None,
        retrier: Retrier | None = None,
        media: MediaSettings | None = None,
        counts: DeliveryCounts | None = None,
        buttons: ButtonLedger | None = None,
        wall_clock: Callable[[], float] = time.time,
        message_sent: Callable[[Target], None] | None = None,
    ) -> None:
        """``retry`` is how failed sends are retried, for every channel or per channel name
        (a channel not named gets the defaults); ``retrier`` replaces the one made here;
        ``media`` is where uploaded files may come from (it may be replaced later);
        ``counts`` hears of every message posted and every failed send (the metrics);
        ``buttons`` records the buttons put under each message, stamped with ``wall_clock``;
        ``message_sent`` hears of each text about to go to a conversation ("typing…")."""
        self.media = media or MediaSettings()
        self._routes = routes
        self._retrier = retrier or Retrier()
        self._retry: dict[str, RetrySettings] = {}
        self.set_retry(retry)
        self._counts = counts
        self._buttons = buttons
        self._wall_clock = wall_clock
        self._message_sent = message_sent

    def set_retry(self, retry: RetrySettings | Mapping[str, RetrySettings] | None) -> None:
        """Retry as ``retry`` says from now on: settings for every channel, or per channel."""
        if isinstance(retry, RetrySettings):
            self._retrier.settings, self._retry = retry, {}
        else:
            self._retry = dict(retry or {})

    async def send_text(
        self,
        target: Target,
        markdown: str,
        *,
        reply_to: str | None = None,
        media: Sequence[str] = (),
        audio_as_voice: bool = False,
        piece: PieceKey | None = None,
        buttons: ButtonRows = (),
        scope: RunScope | None = None,
    ) -> list[MessageRef]:
        """Post ``markdown`` now, retried while it fails for a passing reason (for the
        conversation ``scope`` is of: each try fenced by its lease).

        ``media`` (URLs or local paths) are uploaded with it, ``markdown`` as the first one's
        caption when it fits; a file that cannot be sent is posted as text (``media.py``).
        With ``piece``, each message it posts is keyed for the adapter (module docstring);
        ``buttons`` go under its last message, after the files.
        Raises the platform's refusal, or ``DeliveryGivenUp`` once the retry budget is spent
        (after telling the chat, if it can be reached, that a reply was lost).
        """
        messages = None if piece is None else PieceMessages(piece)
        fence = fence_of(scope)
        conversation = None if scope is None else scope.conversation
        return await self._send_text(
            target,
            markdown,
            reply_to,
            media,
            audio_as_voice,
            buttons,
            messages,
            fence,
            conversation,
        )

    async def edit(
        self,
        adapter: ChannelAdapter,
        target: Target,
        ref: MessageRef,
        markdown: str,
        *,
        scope: RunScope | None = None,
    ) -> None:
        """Edit ``ref``'s message in ``target``'s conversation to ``markdown``, retried."""
        what = f"{target.channel} edit in {target.chat_id}"
        edit = tries(partial(adapter.edit, ref, markdown), fence_of(scope))
        await self._retried(target, what, edit)

    async def delete(
        self,
        adapter: ChannelAdapter,
        target: Target,
        ref: MessageRef,
        *,
        scope: RunScope | None = None,
    ) -> None:
        """Delete ``ref``'s message in ``target``'s conversation, retried."""
        what = f"{target.channel} delete in {target.chat_id}"
        await self._retried(target, what, tries(partial(adapter.delete, ref), fence_of(scope)))

    async def edit_buttons(
        self,
        target: Target,
        ref: MessageRef,
        markdown: str,
        rows: ButtonRows,
        *,
        scope: RunScope | None = None,
    ) -> None:
        """Edit ``ref``'s message to ``markdown`` with ``rows`` of buttons under it (none: its
        buttons removed), retried like an edit. A platform without buttons gets the labels
        listed after the text."""
        adapter = self._routes.adapter_for(target)
        edit: ScopedCall[object]
        if isinstance(adapter, ButtonAdapter):
            edit = partial(adapter.edit_buttons, ref, markdown, rows)
        else:
            shown = with_choices_listed(markdown, rows) if rows else markdown
            edit = partial(adapter.edit, ref, shown)
        what = f"{target.channel} edit in {target.chat_id}"
        await self._retried(target, what, tries(edit, fence_of(scope)))
        if rows and isinstance(adapter, ButtonAdapter):
            self._buttons_shown(ref, rows, None if scope is None else scope.conversation)

    def count_sent(self, channel: str, refs: Sequence[MessageRef]) -> None:
        """Count a confirmed send: one per message it made (one if the adapter names none)."""
        if self._counts is not None:
            self._counts.message_out(channel, len(refs) or 1)

    async def _send_text(
        self,
        target: Target,
        markdown: str,
        reply_to: str | None,
        media: Sequence[str],
        audio_as_voice: bool,
        buttons: ButtonRows = (),
        messages: PieceMessages | None = None,
        fence: Fence | None = None,
        conversation: str | None = None,
    ) -> list[MessageRef]:
        """``send_text``; ``messages`` numbers the messages of the piece it posts, if any,
        ``fence`` is the lease of the conversation it posts for and ``conversation`` its
        key (where a press of its buttons goes)."""
        adapter = self._routes.adapter_for(target)
        if self._message_sent is not None:
            self._message_sent(target)
        if reply_to is not None and target.reply_to_id is None:
            target = Target(
                target.channel, target.chat_id, target.account_id, target.thread_id, reply_to
            )
        if buttons and not markdown.strip():
            markdown = CHOOSE  # a message with buttons needs a text on every platform
        if buttons and not isinstance(adapter, ButtonAdapter):
            markdown = with_choices_listed(markdown, buttons)
            buttons = ()
        try:
            refs: list[MessageRef] = []
            if buttons:
                # The files first, then the text with the buttons: the choices come last.
                if media:
                    refs = await self._send_text(
                        target,
                        "",
                        None,
                        media,
                        audio_as_voice,
                        messages=messages,
                        fence=fence,
                        conversation=conversation,
                    )
                return refs + await self._post(
                    adapter,
                    target,
                    markdown,
                    buttons,
                    numbered=messages,
                    fence=fence,
                    conversation=conversation,
                )
            if media:
                return await send_with_media(
                    adapter,
                    target,
                    markdown,
                    media,
                    as_voice=audio_as_voice,
                    settings=self.media,
                    post_text=partial(self._post, adapter, numbered=messages, fence=fence),
                    upload=partial(self._upload, adapter, messages=messages, fence=fence),
                    caps=self._routes.capabilities(target.channel, adapter),
                    conversation=conversation,
                )
            return await self._post(adapter, target, markdown, numbered=messages, fence=fence)
        except DeliveryGivenUp as exc:
            log.error("%s: a reply to %s was given up: %s", target.channel, target.chat_id, exc)
            self._count_error(target.channel, "send_failed")
            await self._tell_given_up(adapter, target, fence)
            raise
        except Exception as exc:
            if fenced_out(exc):
                # Fenced: the conversation's lease forbids the send (told once, by the
                # dispatcher that held it); no fault of the platform's.
                log.debug("%s: a reply to %s is not sent: %s", target.channel, target.chat_id, exc)
                raise
            log.error("%s refused a reply to %s: %s", target.channel, target.chat_id, exc)
            self._count_error(target.channel, "send_failed")
            raise

    async def _post(
        self,
        adapter: ChannelAdapter,
        target: Target,
        markdown: str,
        buttons: ButtonRows = (),
        numbered: PieceMessages | None = None,
        fence: Fence | None = None,
        conversation: str | None = None,
    ) -> list[MessageRef]:
        """Send ``markdown`` one message at a time, each retried on its own (and keyed, as
        ``numbered`` numbers them); ``buttons`` go under the last one (the adapter is a
        ``ButtonAdapter`` then), recorded as ``conversation``'s."""
        what = f"{target.channel} send to {target.chat_id}"
        caps = self._routes.capabilities(target.channel, adapter)
        parts = messages(markdown, caps, self._routes.chunk_mode(target.channel))

        def send(
            target: Target, part: str, last: bool
        ) -> Callable[[], Awaitable[list[MessageRef]]]:
            call: ScopedCall[list[MessageRef]] = partial(adapter.send, target, part)
            if buttons and last and isinstance(adapter, ButtonAdapter):
                call = partial(adapter.send_buttons, target, part, buttons)
            return tries(call, fence, numbered)

        refs: list[MessageRef] = []
        if len(parts) == 1:
            refs = await self._sent(target, what, send(target, markdown, True))
        else:
            first = target
            for number, part in enumerate(parts, 1):
                last = number == len(parts)
                posted = await self._sent(first, what, send(target, part, last))
                refs.extend(posted)
                if posted:
                    # Later parts follow the first, in its thread, and reply to nothing.
                    target = replace(posted[0].target, reply_to_id=None)
        if buttons and refs and isinstance(adapter, ButtonAdapter):
            self._buttons_shown(refs[-1], buttons, conversation)
        return refs

    async def _upload(
        self,
        adapter: ChannelAdapter,
        target: Target,
        file: OutboundFile,
        caption: str,
        messages: PieceMessages | None = None,
        fence: Fence | None = None,
    ) -> list[MessageRef]:
        """Upload one file, retried on its own like a message (keyed as one of the piece's)."""
        what = f"{target.channel} upload to {target.chat_id}"
        upload = partial(upload_file, adapter, target, file, caption)
        return await self._sent(target, what, tries(upload, fence, messages))

    async def _sent(
        self, target: Target, what: str, attempt: Callable[[], Awaitable[list[MessageRef]]]
    ) -> list[MessageRef]:
        """A send or an upload, retried; each message it made is counted once it is confirmed."""
        refs = await self._retried(target, what, attempt)
        self.count_sent(target.channel, refs)
        return refs

    async def _retried(self, target: Target, what: str, attempt: Callable[[], Awaitable[_T]]) -> _T:
        """``attempt`` retried in ``target``'s conversation (each try fenced by its lease:
        ``scope.tries``)."""
        channel = target.channel
        return await self._retrier.call(
            chat_key(target),
            what,
            attempt,
            settings=self._retry.get(channel),
            on_retry=None if self._counts is None else partial(self._count_error, channel),
            group=channel,
        )

    def platform_back(self, channel: str) -> None:
        """``channel``'s platform answers again: replies waiting out a backoff go now."""
        self._retrier.wake(channel)

    def _count_error(
        self, channel: str, kind: Literal["send_retry", "send_failed"] = "send_retry"
    ) -> None:
        if self._counts is not None:
            self._counts.error(channel, kind)

    async def _tell_given_up(
        self, adapter: ChannelAdapter, target: Target, fence: Fence | None
    ) -> None:
        """Say once per outage, with a single attempt, that a reply could not be delivered."""
        key = chat_key(target)
        if not self._retrier.first_give_up(key):
            return
        plain = Target(target.channel, target.chat_id, target.account_id, target.thread_id)
        try:  # a single try, not through ``_retried`` (neither fenced nor counted as a retry)
            refs = await self._retrier.call(
                key,
                "the undelivered-reply notice",
                lambda: adapter.send(plain, GIVE_UP_NOTICE, scope=unkeyed(fence)),
                settings=_ONE_ATTEMPT,
            )
        except Exception as exc:
            self._retrier.unreport(key)
            log.warning("telling %s about the lost reply failed too: %s", target.chat_id, exc)
            return
        self.count_sent(target.channel, refs)

    def _buttons_shown(self, ref: MessageRef, rows: ButtonRows, conversation: str | None) -> None:
        """Record that ``ref``'s message shows ``rows``: the only presses it takes, which go
        to ``conversation`` (None: not known here; a record of it stays)."""
        if self._buttons is None or not ref.message_id:
            return
        shown = tuple(tuple(row) for row in rows)
        posted = PostedButtons(ref, shown, self._wall_clock(), conversation=conversation)
        try:
            self._buttons.buttons_posted_soon(posted)
        except Exception as exc:  # its presses are refused: the answer itself stands
            log.warning("the buttons of message %s were not recorded: %s", ref.message_id, exc)


__all__ = ["CHOOSE", "GIVE_UP_NOTICE", "ButtonRows", "Sender", "with_choices_listed"]
