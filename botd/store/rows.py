"""How records become the text columns every backend keeps, and back.

Both backends store the same rows: a transcript message and an accepted message as JSON
text, a piece's files as a JSON object, a job's trigger as JSON and its next run time as
ISO 8601. Writing and reading them here keeps a row written by one backend read back the
same way by the other (and the records equal whichever database held them). The rule for
what an interrupted run's transcript keeps (``resumable_prefix``) is here too, because
both backends' ``trim_interrupted`` apply it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

from ..chat import Button, InboundMessage, MessageRef, Press, Quote, storable
from ..events import Message, ToolCallContent, storable_data
from .records import (
    ChatMark,
    EditorSession,
    OutboxEntry,
    PostedButtons,
    RunSteps,
    SaidLine,
    StoredApproval,
    StoredJob,
    StoredPreview,
)
from .targets import (
    attachments_data,
    attachments_from_data,
    target_data,
    target_from_data,
    target_from_json,
    target_json,
)

_INBOUND_FIELDS = tuple(f.name for f in fields(InboundMessage))

JOB_COLUMNS = (
    "id, kind, trigger, name, prompt, target, conversation_key, source, fingerprint, "
    "next_run_time, heartbeat"
)
"""A job's columns, in the order ``job_from_row`` reads them."""


def message_json(message: Message) -> str:
    """``message`` as the JSON text the store keeps (transcripts, the inbox's user turns),
    every text in it ``storable``: a NUL, which JSON writes as ``\\u0000``, is kept as U+FFFD,
    so a transcript reads back the same from either backend."""
    # Storable whatever produced the message: one bad record would fail the group commit
    # it rides in, everyone's writes with it.
    data = message.model_dump(mode="json", exclude_none=True)
    body = json.dumps(data, ensure_ascii=False)
    if "\\u0000" in body:  # (or a text naming the escape: written again, unchanged)
        body = json.dumps(storable_data(data), ensure_ascii=False)
    return storable(body)


def message_from_json(text: str) -> Message:
    return Message.model_validate(json.loads(text))


def inbound_json(message: InboundMessage) -> str:
    """``message`` as the inbox keeps it (its ``inbox_id`` left out). A message that quotes
    nothing is written without a ``quoted`` key, as before quotes were kept."""
    data: dict[str, Any] = {
        name: getattr(message, name)
        for name in _INBOUND_FIELDS
        if name not in ("inbox_id", "attachments", "quoted", "press")
    }
    target = message.target
    if target is not None:
        data["target"] = target_data(target)
    if message.attachments:
        data["attachments"] = attachments_data(message.attachments)
    quoted = message.quoted
    if quoted is not None:
        data["quoted"] = {
            "speaker": quoted.speaker,
            "text": quoted.text,
            "from_bot": quoted.from_bot,
        }
    if message.press is not None:
        press = message.press
        data["press"] = {
            "callback_id": press.callback_id,
            "value": press.value,
            "message_id": press.message_id,
        }
    return json.dumps(data, ensure_ascii=False)


def inbound_from_json(text: str, inbox_id: int | None = None) -> InboundMessage:
    data: dict[str, Any] = json.loads(text)
    target = data.pop("target", None)
    data["dedupe_keys"] = tuple(data.get("dedupe_keys") or ())
    data["attachments"] = attachments_from_data(data.get("attachments"))
    quoted = data.get("quoted")
    data["quoted"] = None if quoted is None else Quote(**quoted)
    data["inbox_id"] = inbox_id
    press = data.pop("press", None)
    # (Rows written before issue 33 also name the platform's ``posted_at``: not used now.)
    data["press"] = (
        None
        if press is None
        else Press(str(press["callback_id"]), str(press["value"]), str(press["message_id"]))
    )
    return InboundMessage(**data, target=None if target is None else target_from_data(target))


MarkRow = tuple[str, str, str, str, str, float]
"""A ``chat_marks`` row: channel, account, chat, thread ('' for none), message id, time."""


def chat_mark_row(message: InboundMessage, now: float) -> MarkRow | None:
    """The ``chat_marks`` row ``message`` moves, when it is a message of a readable history
    (``in_history``, neither an edit nor a press); None otherwise."""
    if not message.in_history or message.edited or message.press is not None:
        return None
    return (
        message.channel,
        message.account_id,
        message.chat_id,
        message.thread_id or "",
        message.message_id,
        now,
    )


def chat_mark_from_row(row: Sequence[Any]) -> ChatMark:
    """A ``ChatMark`` from ``chat_id, thread_id, message_id, marked_at``."""
    return ChatMark(str(row[0]), str(row[1]) or None, str(row[2]), float(row[3]))


EDITOR_SESSION_COLUMNS = "session_id, cwd, title, updated_at"


def editor_session_from_row(row: Sequence[Any]) -> EditorSession:
    """An ``EditorSession`` from ``EDITOR_SESSION_COLUMNS``."""
    return EditorSession(str(row[0]), str(row[1]), row[2], float(row[3]))


def editor_sessions_query(
    channel: str,
    *,
    cwd: str | None,
    after: EditorSession | None,
    limit: int,
    placeholder: str,
    byte_order: str = "",
) -> tuple[str, list[Any]]:
    """The query of ``EditorSessions.editor_sessions`` and its parameters, for either
    backend: ``channel``'s sessions (those in ``cwd`` if given), the most recently changed
    first, ties by session id, past ``after`` (the last of the page before), at most
    ``limit``. ``placeholder`` is the backend's parameter mark (``?``, ``%s``);
    ``byte_order`` what makes the ids compare and sort byte by byte, as the cursor assumes
    (PostgreSQL's ``COLLATE "C"``, where a database's collation may say otherwise; SQLite
    compares text so already)."""
    p, session_id = placeholder, f"session_id{byte_order}"
    where = [f"channel = {p}"]
    params: list[Any] = [channel]
    if cwd is not None:
        where.append(f"cwd = {p}")
        params.append(cwd)
    if after is not None:
        where.append(f"(updated_at < {p} OR (updated_at = {p} AND {session_id} > {p}))")
        params += [after.updated_at, after.updated_at, after.session_id]
    query = (
        f"SELECT {EDITOR_SESSION_COLUMNS} FROM editor_sessions WHERE {' AND '.join(where)} "
        f"ORDER BY updated_at DESC, {session_id} LIMIT {p}"
    )
    return query, [*params, limit]


def said_lines(rows: Sequence[Sequence[Any]]) -> list[SaidLine]:
    """What a conversation said, from rows ``(by, text, at, turn)``: ``by`` is ``user``
    (``text`` the accepted message's JSON, ``turn`` its inbox id) or ``bot`` (``text`` a sent
    piece's, ``turn`` its anchor). Ordered by time, a user's message before what was sent at
    the same moment; the presses of buttons, which nobody typed, left out."""
    said: list[tuple[float, int, int, SaidLine]] = []
    for place, (by, text, at, turn) in enumerate(rows):
        inbox_id = None if turn is None else int(turn)
        if by == "user":
            message = inbound_from_json(str(text))
            if message.press is not None:
                continue
            line = SaidLine("user", message.text, float(at), message.message_id, inbox_id)
            said.append((float(at), 0, place, line))
        else:
            line = SaidLine("bot", str(text), float(at), turn=inbox_id)
            said.append((float(at), 1, place, line))
    said.sort(key=lambda item: item[:3])
    return [line for *_, line in said]


RUN_ENTRIES_QUERY = (
    "SELECT id, session_id, user_turn_id FROM inbox "
    "WHERE conversation_key = {p} AND user_turn_id IS NOT NULL ORDER BY id"
)
"""``run_steps``'s first rows: a conversation's inbox rows that started a run (``{p}``: the
backend's placeholder)."""
RUN_MESSAGES_QUERY = (
    "SELECT m.session_id, m.id, m.body, m.compacted_at FROM messages m JOIN ("
    "SELECT session_id, min(user_turn_id) AS first FROM inbox "
    "WHERE conversation_key = {p} AND user_turn_id IS NOT NULL GROUP BY session_id"
    ") t ON m.session_id = t.session_id AND m.id >= t.first ORDER BY m.id"
)
"""``run_steps``'s second rows: the transcript rows of those runs' sessions from the first
user turn on, compacted ones included (``{p}``: the backend's placeholder)."""


def run_steps(entries: Sequence[Sequence[Any]], rows: Sequence[Sequence[Any]]) -> list[RunSteps]:
    """The runs of a conversation's inbox rows (``RUN_ENTRIES_QUERY``'s ``id, session_id,
    user_turn_id``) with what each added after its user turn, from the transcript rows
    (``RUN_MESSAGES_QUERY``'s ``session_id, id, body, compacted_at``), oldest run first.

    A run's messages are the rows after its user turn (whose first row is the inbox's
    ``user_turn_id``) up to the next run's user turn, among the rows of the same compaction
    as that first row (all live, or all folded by the same compaction): a compaction marks
    the rows it folds and appends the summary and the kept rows again as new rows, which
    belong to no run's user turn. So a run folded into a summary still has its own rows,
    and a kept one is not read twice. A run whose user turn row is gone (a ``botd forget``)
    has none."""
    turns: dict[tuple[str, int], list[int]] = {}
    for inbox_id, session_id, turn in entries:
        turns.setdefault((str(session_id), int(turn)), []).append(int(inbox_id))
    by_session: dict[str, list[tuple[int, str, object]]] = {}
    for session_id, row_id, body, compacted_at in rows:
        by_session.setdefault(str(session_id), []).append((int(row_id), str(body), compacted_at))
    starts = {turn for _, turn in turns}
    runs: list[tuple[int, RunSteps]] = []
    for (session_id, turn), inbox_ids in turns.items():
        session_rows = by_session.get(session_id, [])
        place = next((i for i, row in enumerate(session_rows) if row[0] == turn), None)
        messages: list[Message] = []
        if place is not None:
            folded = session_rows[place][2]
            for row_id, body, compacted_at in session_rows[place + 1 :]:
                if row_id in starts:
                    break  # the next run's user turn
                if compacted_at != folded:
                    continue
                message = message_from_json(body)
                if messages or message.role != "user":  # past the turn's other messages
                    messages.append(message)
        runs.append((turn, RunSteps(tuple(sorted(inbox_ids)), tuple(messages))))
    runs.sort(key=lambda item: (min(item[1].inbox_ids), item[0]))
    return [run for _, run in runs]


def media_json(media: Sequence[str], audio_as_voice: bool) -> str | None:
    """The files a piece uploads (references, never bytes); None for a piece of text only."""
    if not media:
        return None
    return json.dumps({"urls": list(media), "voice": audio_as_voice})


def media_from_json(raw: object) -> tuple[tuple[str, ...], bool]:
    if not isinstance(raw, str) or not raw:
        return (), False
    data = json.loads(raw)
    return tuple(str(url) for url in data.get("urls", [])), bool(data.get("voice", False))


def buttons_json(rows: Sequence[Sequence[Button]]) -> str | None:
    """The buttons under a piece, as rows of ``{"label", "value"}``; None: no buttons."""
    if not rows:
        return None
    return json.dumps(
        [[{"label": b.label, "value": b.value} for b in row] for row in rows], ensure_ascii=False
    )


def buttons_from_json(raw: object) -> tuple[tuple[Button, ...], ...]:
    if not isinstance(raw, str) or not raw:
        return ()
    return tuple(
        tuple(Button(str(b["label"]), str(b["value"])) for b in row) for row in json.loads(raw)
    )


def button_message_row(posted: PostedButtons) -> tuple[Any, ...]:
    """``posted`` as the ``button_messages`` columns (channel, account, chat_id, message_id,
    buttons, posted_at, conversation_key)."""
    target = posted.message.target
    return (
        target.channel,
        target.account_id,
        target.chat_id,
        posted.message.message_id,
        buttons_json(posted.rows) or "[]",
        posted.posted_at,
        posted.conversation,
    )


def posted_buttons_from_row(message: MessageRef, row: Sequence[Any]) -> PostedButtons:
    """The buttons of ``message`` from a row of (buttons, posted_at, answered,
    conversation_key)."""
    conversation = None if row[3] is None else str(row[3])
    return PostedButtons(
        message, buttons_from_json(row[0]), float(row[1]), bool(row[2]), conversation
    )


OUTBOX_COLUMNS = "id, anchor, seq, kind, target, text, media, created_at, buttons"
"""A waiting piece's columns, in the order ``outbox_entry_from_row`` reads them."""


def outbox_entry_from_row(row: Sequence[Any]) -> OutboxEntry:
    """A waiting piece from its ``OUTBOX_COLUMNS``."""
    media, voice = media_from_json(row[6])
    return OutboxEntry(
        id=int(row[0]),
        anchor=None if row[1] is None else int(row[1]),
        seq=int(row[2]),
        kind=str(row[3]),
        target=target_from_json(row[4]),
        text=str(row[5]),
        media=media,
        audio_as_voice=voice,
        written_at=float(row[7]),
        buttons=buttons_from_json(row[8]),
    )


def preview_refs_json(refs: Sequence[MessageRef]) -> str:
    """A preview's messages as stored: each one's target and message id."""
    return json.dumps(
        [{"target": target_data(ref.target), "id": ref.message_id} for ref in refs],
        ensure_ascii=False,
    )


def preview_from_row(refs: str, streaming: object) -> StoredPreview:
    """A stored preview from its ``refs`` JSON and its ``streaming`` flag."""
    return StoredPreview(
        refs=tuple(
            MessageRef(target_from_data(item["target"]), str(item["id"]))
            for item in json.loads(refs)
        ),
        streaming=bool(streaming),
    )


def iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def job_row(job: StoredJob, updated_at: float) -> tuple[object, ...]:
    """``job`` as its ``JOB_COLUMNS`` and then ``updated_at``, the row both backends write."""
    return (
        job.id,
        job.kind,
        json.dumps(job.trigger, ensure_ascii=False),
        job.name,
        job.prompt,
        target_json(job.target),
        job.conversation_key,
        job.source,
        job.fingerprint,
        iso(job.next_run_time),
        job.heartbeat,
        updated_at,
    )


def job_from_row(row: Sequence[Any]) -> StoredJob:
    """A job from its ``JOB_COLUMNS``."""
    return StoredJob(
        id=str(row[0]),
        kind=str(row[1]),
        trigger=json.loads(row[2]),
        name=str(row[3]),
        prompt=str(row[4]),
        target=target_from_json(row[5]),
        conversation_key=None if row[6] is None else str(row[6]),
        source=None if row[7] is None else str(row[7]),
        fingerprint=None if row[8] is None else str(row[8]),
        next_run_time=None if row[9] is None else datetime.fromisoformat(row[9]),
        heartbeat=None if row[10] is None else int(row[10]),
    )


def resumable_prefix(messages: Sequence[Message], awaiting: Collection[str] = ()) -> int:
    """How many of ``messages`` (a user turn, then a run's steps) a model can continue from:
    up to the last message that is not an assistant's and leaves no tool call unanswered.

    An assistant message with a call in ``awaiting`` (tool call ids with a request to approve
    them, ``botd.approvals``) is kept with the results it has: the resumed run goes on with
    its unanswered calls, so the request it finds is the same one."""
    keep = 1
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "assistant":
            content = message.content if isinstance(message.content, list) else []
            open_calls = {b.id for b in content if isinstance(b, ToolCallContent)}
            if not open_calls or message.stop_reason not in (None, "tool_use", "toolUse"):
                # A finished answer is regenerated with the rest; a cut one is dropped.
                open_calls = {"<answer>"}
            elif open_calls & set(awaiting):
                open_calls = set()  # its calls are run again where they were
            if not open_calls:
                keep = index + 1
            continue
        if message.role == "tool_result" and message.tool_call_id is not None:
            open_calls.discard(message.tool_call_id)
        if not open_calls:
            keep = index + 1
    return keep


APPROVAL_COLUMNS = (
    "key, token, session_id, call_id, tool_name, summary, deadline, state, decided_by, "
    "messages, created_at, decided_at, grant_key, grant_chat"
)
"""An approval's columns, in the order ``approval_row`` writes and ``approval_from_row``
reads them."""


def refs_json(refs: Sequence[MessageRef]) -> str:
    """Posted messages as JSON: each its target and message id."""
    return json.dumps(
        [{"target": target_data(r.target), "message_id": r.message_id} for r in refs],
        ensure_ascii=False,
    )


def refs_from_json(text: str | None) -> tuple[MessageRef, ...]:
    return tuple(
        MessageRef(target_from_data(r["target"]), str(r["message_id"]))
        for r in json.loads(text or "[]")
    )


def approval_row(approval: StoredApproval) -> tuple[Any, ...]:
    """``approval`` as its ``APPROVAL_COLUMNS``."""
    a = approval
    return (
        a.key,
        a.token,
        a.session_id,
        a.call_id,
        a.tool_name,
        a.summary,
        a.deadline,
        a.state,
        a.decided_by,
        refs_json(a.messages),
        a.created_at,
        a.decided_at,
        a.grant,
        a.grant_chat,
    )


def approval_from_row(row: Sequence[Any]) -> StoredApproval:
    """An approval from its ``APPROVAL_COLUMNS``."""
    return StoredApproval(
        key=str(row[0]),
        token=str(row[1]),
        session_id=str(row[2]),
        call_id=str(row[3]),
        tool_name=str(row[4]),
        summary=str(row[5]),
        deadline=float(row[6]),
        state=row[7],
        decided_by=str(row[8]),
        messages=refs_from_json(row[9]),
        created_at=float(row[10]),
        decided_at=None if row[11] is None else float(row[11]),
        grant=None if row[12] is None else str(row[12]),
        grant_chat=None if row[13] is None else str(row[13]),
    )


__all__ = [
    "APPROVAL_COLUMNS",
    "EDITOR_SESSION_COLUMNS",
    "JOB_COLUMNS",
    "approval_from_row",
    "approval_row",
    "button_message_row",
    "editor_session_from_row",
    "inbound_from_json",
    "inbound_json",
    "iso",
    "job_from_row",
    "job_row",
    "media_from_json",
    "media_json",
    "message_from_json",
    "message_json",
    "posted_buttons_from_row",
    "preview_from_row",
    "preview_refs_json",
    "refs_json",
    "resumable_prefix",
    "said_lines",
]
