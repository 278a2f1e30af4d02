"""What a Slack app posts: ``SlackOutbound``, the Web API calls that post, edit and delete
messages, upload files, react, and show a thread's status.

``send`` renders Markdown to mrkdwn chunks of at most 4000 characters and posts each with
``chat.postMessage``, a reply piece's messages tagged with its key as metadata and looked for
before a piece a crash left unconfirmed is posted again (``sent``). Mentions that notify a
whole channel or user group (``<!channel>``, ``<!here>``, ``<!everyone>``, ``<!subteam^…>``)
are posted as plain text (``@channel``) unless ``allow_mass_mentions`` is set, and nothing is
posted with ``link_names``, so text the model was made to echo cannot ping a channel; user
mentions (``<@U…>``) stay. Buttons go under the last message as Block Kit (``button_blocks``).
In a chat whose ``link_previews`` is off, each message is posted with ``unfurl_links`` and
``unfurl_media`` false (``chat.update`` takes neither: an edit keeps what its post said). Slack
has no way to post a bot's message without a notification, so ``SendScope.silent`` changes
nothing here. Each call that posts, edits or deletes a message is made under the fence of its
``SendScope`` (``webapi.FencedWebClient``). Slack has no typing indicator for bots in
channels: ``typing`` sets the assistant-thread status when the target is a thread and does
nothing otherwise; ``set_assistant_status`` shows a run's tool status there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from slack_sdk.errors import SlackRequestError
from slack_sdk.web.async_client import AsyncWebClient

from ...bounded import Recent
from ...buttons.layout import chosen_label
from ...chat import Button, InboundMessage, MessageRef, Target
from ..base import LinkPreviews, OutboundFile, SendScope, fence_of, key_of
from ..budget import paced_as
from .commands import NOT_A_MEMBER, CommandReplies
from .emoji import slack_emoji_name
from .errors import SlackError
from .markup import MRKDWN, defuse_mass_mentions
from .sent import metadata, posted_pieces
from .webapi import WebAPI

__all__ = [
    "BUTTON_ACTION",
    "SECTION_LIMIT",
    "TEXT_LIMIT",
    "TYPING_STATUS",
    "UPLOAD",
    "UPLOAD_LIMIT",
    "SlackOutbound",
    "button_blocks",
]

log = logging.getLogger(__name__)

TEXT_LIMIT = 4000
UPLOAD_LIMIT = 1024 * 1024 * 1024
UPLOAD = "files_upload_v2"
TYPING_STATUS = "is typing…"
_MEMORY_LIMIT = 4096

BUTTON_ACTION = "botd_button_"
"""The ``action_id`` prefix of botd's buttons (numbered: unique within a message)."""
SECTION_LIMIT = 3000
"""The most characters one section block's text takes."""


def button_blocks(text: str, rows: Sequence[Sequence[Button]]) -> list[dict[str, Any]]:
    """``text`` as section blocks, then one ``actions`` block per row of ``rows``."""
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": text[at : at + SECTION_LIMIT]}}
        for at in range(0, len(text), SECTION_LIMIT)
    ]
    number = 0
    for row in rows:
        elements = []
        for button in row:
            elements.append(
                {
                    "type": "button",
                    "action_id": f"{BUTTON_ACTION}{number}",
                    "text": {"type": "plain_text", "text": button.label, "emoji": True},
                    "value": button.value,
                }
            )
            number += 1
        blocks.append({"type": "actions", "elements": elements})
    return blocks


class SlackOutbound:
    """The calls one Slack app makes to post and change messages (module docstring).

    ``channel``: the channel instance the refs are of and log lines name; ``command_replies``
    tells a slash command's user when the bot may not post in its channel. A target's
    ``reply_to_id`` threads only the first reply sent to it (``thread_for``).
    ``link_previews``: the chats whose messages are posted without unfurls.
    """

    def __init__(
        self,
        api: WebAPI,
        command_replies: CommandReplies,
        *,
        channel: str,
        allow_mass_mentions: bool,
        link_previews: LinkPreviews | None = None,
    ) -> None:
        self._api = api
        self._link_previews = link_previews or LinkPreviews()
        self._command_replies = command_replies
        self.name = channel
        self.allow_mass_mentions = allow_mass_mentions
        self._first_replied: Recent[str, None] = Recent(_MEMORY_LIMIT)

    async def edit_buttons(
        self,
        ref: MessageRef,
        markdown: str,
        rows: Sequence[Sequence[Button]],
        *,
        scope: SendScope | None = None,
    ) -> None:
        """``ref``'s message shows ``markdown`` (its first message's worth) with ``rows``."""
        texts = self._render(markdown) or [""]
        await self._api.call(
            "chat.update",
            self._api.client.fenced(fence_of(scope)).chat_update,
            channel=ref.target.chat_id,
            ts=ref.message_id,
            text=texts[0],
            blocks=button_blocks(texts[0], rows),
            link_names=False,
        )

    async def send(
        self,
        target: Target,
        markdown: str,
        rows: Sequence[Sequence[Button]] = (),
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """Post ``markdown`` as one or more messages; raises ``SlackError`` on Slack's refusal.

        A reply piece's messages carry its key as metadata (``sent``); one a crash left
        unconfirmed is looked for first, and a message found is returned, not posted again.
        ``rows``: buttons under the last message (the adapter's ``send_buttons``).
        """
        thread_ts = self.thread_for(target)
        posted_to = Target(self.name, target.chat_id, target.account_id, thread_ts)
        key, client = key_of(scope), self._api.client.fenced(fence_of(scope))
        found: dict[str, str] = {}
        if key is not None and key.piece.unconfirmed:
            found = await self._posted_pieces(
                client, target.chat_id, thread_ts, key.piece.written_at
            )
        refs: list[MessageRef] = []
        texts = self._render(markdown)
        for number, text in enumerate(texts):
            tag = None if key is None else metadata(key, number)
            last = number == len(texts) - 1
            blocks = button_blocks(text, rows) if rows and last else None
            if tag is not None and tag["event_payload"]["piece"] in found:
                refs.append(MessageRef(posted_to, found[tag["event_payload"]["piece"]]))
                continue
            try:
                response = await self._api.call(
                    "chat.postMessage",
                    client.chat_postMessage,
                    paced=paced_as(scope),
                    channel=target.chat_id,
                    text=text,
                    thread_ts=thread_ts,
                    mrkdwn=True,
                    link_names=False,
                    metadata=tag,
                    blocks=blocks,
                    **self._unfurls(target.chat_id),
                )
            except SlackError as exc:
                if exc.error in NOT_A_MEMBER:  # a slash command's user is told, if any
                    await self._command_replies.tell_not_a_member(target.chat_id)
                raise
            refs.append(MessageRef(posted_to, str(response["ts"])))
        return refs

    async def _posted_pieces(
        self, client: AsyncWebClient, channel: str, thread_ts: str | None, written_at: float | None
    ) -> dict[str, str]:
        """The tagged reply messages where a piece written at ``written_at`` went. A look-up
        Slack refuses for good (a missing ``*:history`` scope) finds nothing, with a
        warning: the piece is posted again, as on a platform without look-ups."""
        try:
            return await posted_pieces(self._api.call, client, channel, thread_ts, written_at)
        except SlackError as exc:
            if exc.retryable:
                raise
            log.warning(
                "%s: could not look for an unconfirmed reply in %s (%s); posting it again",
                self.name,
                channel,
                exc,
            )
            return {}

    async def send_file(
        self,
        target: Target,
        file: OutboundFile,
        caption: str = "",
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        """Upload ``file`` to ``target``'s channel (and thread); one ref named by the file id.

        ``files_upload_v2`` is three steps in one call: the SDK asks for an upload URL
        (``files.getUploadURLExternal``), posts the bytes there and shares the file in the
        channel (``files.completeUploadExternal``) with the caption as its
        ``initial_comment``. When the bytes cannot be posted (a 5xx of the upload URL) the SDK
        raises a request error, which is retryable; a file whose upload was never completed is
        not shared, so a retry shows the file once. Slack takes files of up to 1 GB.
        """
        if len(file.data) > UPLOAD_LIMIT:
            raise SlackError(UPLOAD, f"file_too_large ({file.filename}: {len(file.data)} bytes)")
        comments = self._render(caption) if caption.strip() else []
        thread_ts = self.thread_for(target)
        try:
            response = await self._api.call(
                UPLOAD,
                self._api.client.fenced(fence_of(scope)).files_upload_v2,
                channel=target.chat_id,
                content=file.data,
                filename=file.filename,
                title=file.filename,
                initial_comment=comments[0] if comments else None,
                thread_ts=thread_ts,
            )
        except SlackRequestError as exc:
            raise SlackError(UPLOAD, str(exc), retryable=True) from exc
        posted_to = Target(self.name, target.chat_id, target.account_id, thread_ts)
        files = response.get("files") or []
        file_id = str(files[0].get("id", "")) if files and isinstance(files[0], dict) else ""
        return [MessageRef(posted_to, file_id)]

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        """Replace a posted message; text beyond one message follows as new messages."""
        texts = self._render(markdown)
        refs = [ref]
        if not texts:
            return refs
        client = self._api.client.fenced(fence_of(scope))
        await self._api.call(
            "chat.update",
            client.chat_update,
            paced=paced_as(scope),
            channel=ref.target.chat_id,
            ts=ref.message_id,
            text=texts[0],
            link_names=False,
        )
        for text in texts[1:]:
            response = await self._api.call(
                "chat.postMessage",
                client.chat_postMessage,
                paced=paced_as(scope),
                channel=ref.target.chat_id,
                text=text,
                thread_ts=ref.target.thread_id,
                mrkdwn=True,
                link_names=False,
                **self._unfurls(ref.target.chat_id),
            )
            refs.append(MessageRef(ref.target, str(response["ts"])))
        return refs

    def _unfurls(self, chat_id: str) -> dict[str, bool]:
        """``chat.postMessage``'s unfurl arguments for ``chat_id`` (none: Slack's own)."""
        if self._link_previews.shown_in(chat_id):
            return {}
        return {"unfurl_links": False, "unfurl_media": False}

    def _render(self, markdown: str) -> list[str]:
        """The mrkdwn messages ``markdown`` is posted as, mass mentions defused unless allowed."""
        texts = [chunk.text for chunk in MRKDWN.chunks(markdown, TEXT_LIMIT)]
        if self.allow_mass_mentions:
            return texts
        return [defuse_mass_mentions(text) for text in texts]

    async def delete(self, ref: MessageRef, *, scope: SendScope | None = None) -> None:
        """Delete a posted message (``chat.delete``); one already gone counts as deleted."""
        try:
            await self._api.call(
                "chat.delete",
                self._api.client.fenced(fence_of(scope)).chat_delete,
                channel=ref.target.chat_id,
                ts=ref.message_id,
            )
        except SlackError as exc:
            if exc.error != "message_not_found":
                raise

    async def set_reaction(
        self, ref: MessageRef, emoji: str | None, *, replacing: str | None = None
    ) -> None:
        """``reactions.remove`` the reaction ``replacing``, then ``reactions.add`` ``emoji``
        (both by name: ``slack_emoji_name``); one already gone or already there counts as
        done. Needs the ``reactions:write`` scope."""
        old, new = _emoji_name(replacing), _emoji_name(emoji)
        if old is not None and old != new:
            await self._reaction_call("reactions.remove", ref, old, "no_reaction")
        if new is not None:
            await self._reaction_call("reactions.add", ref, new, "already_reacted")

    async def _reaction_call(self, method: str, ref: MessageRef, name: str, done: str) -> None:
        func = (
            self._api.client.reactions_add
            if method == "reactions.add"
            else self._api.client.reactions_remove
        )
        try:
            await self._api.call(
                method, func, channel=ref.target.chat_id, timestamp=ref.message_id, name=name
            )
        except SlackError as exc:
            if exc.error != done:
                raise

    async def typing(self, target: Target) -> None:
        """Show "is typing…" on a thread (``assistant.threads.setStatus``).

        Slack has no bot typing indicator outside assistant threads; a message answered in
        the channel shows its status by reaction instead (``reactions``). Best effort: a
        refusal is logged, never raised.
        """
        if target.thread_id is None:
            return
        try:
            await self.set_assistant_status(target, TYPING_STATUS)
        except SlackError as exc:
            log.debug("%s: no typing status in %s: %s", self.name, target.route(), exc.error)

    async def set_assistant_status(self, target: Target, status: str) -> None:
        """Show ``status`` in ``target``'s assistant thread ('' clears it), with
        ``assistant.threads.setStatus``. Slack refuses a thread that is no assistant thread
        (``invalid_thread_ts``) and a token without ``assistant:write`` (``missing_scope``);
        a target outside a thread is refused here the same way, without a call."""
        if target.thread_id is None:
            raise SlackError("assistant.threads.setStatus", "not in a thread")
        await self._api.call(
            "assistant.threads.setStatus",
            self._api.client.assistant_threads_setStatus,
            channel_id=target.chat_id,
            thread_ts=target.thread_id,
            status=status,
        )

    def thread_for(self, target: Target) -> str | None:
        if target.thread_id is not None:
            return target.thread_id
        if target.reply_to_id is None:
            return None
        marker = f"{target.chat_id}:{target.reply_to_id}"
        if marker in self._first_replied:
            return None
        self._first_replied.remember(marker, None)
        return target.reply_to_id

    async def show_choice(self, press: InboundMessage, message: dict[str, Any], label: str) -> None:
        """The buttons of ``message`` (the pressed one, as the press's payload gave it) give
        way to a line saying what was chosen (``label``, as botd put it there), and by whom."""
        kept = [b for b in message.get("blocks") or [] if b.get("type") != "actions"]
        chosen = {
            "type": "context",
            "elements": [{"type": "plain_text", "text": chosen_label(label, press.sender_name)}],
        }
        try:
            await self._api.call(
                "chat.update",
                self._api.client.chat_update,
                channel=press.chat_id,
                ts=press.press.message_id if press.press else "",
                text=str(message.get("text") or ""),
                blocks=[*kept, chosen],
            )
        except SlackError as exc:
            log.warning("%s: showing the choice made failed: %s", self.name, exc)

    async def tell_presser(self, press: InboundMessage, text: str) -> None:
        """An ephemeral message to the one who pressed (``chat.postEphemeral``): only they see
        it. A failure is only logged."""
        try:
            await self._api.call(
                "chat.postEphemeral",
                self._api.client.chat_postEphemeral,
                channel=press.chat_id,
                user=press.sender_id,
                text=text,
                thread_ts=press.thread_id,
            )
        except SlackError as exc:
            log.warning("%s: telling a presser %s failed: %s", self.name, text, exc)


def _emoji_name(emoji: str | None) -> str | None:
    """Slack's name of ``emoji`` (``:eyes:``, 👀, or a bare name: ``eyes``)."""
    if emoji is None:
        return None
    return slack_emoji_name(emoji) or emoji.strip().strip(":")
