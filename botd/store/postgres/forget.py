"""Forgetting a person on PostgreSQL (``Forgetting``), as on SQLite
(``botd.store.sqlite.forget``): ``RULES`` one entry per table in the order they run,
``KEPT`` the tables that hold nothing of a person, every table of the schema in one of them
(``tests/store/test_forget_contracts.py``). Pairing is in the database here, so its three
tables have rules of their own.

It runs in one transaction while the nodes run. A conversation of the person's that a node
is running at that moment may still write its last rows after it (the answer being
written); running it again removes them. A conversation's lease row is removed only once it
expired (a held one is its node's fence, and names no more than the key).
"""

from __future__ import annotations

from typing import Any

from ..forgetting import REDACTED, Forgotten, Person, key_range, speaker_marks, traces
from .base import Conn, PostgresBase

__all__ = ["KEPT", "REDACT", "RETENTION", "RULES", "ForgetStore"]

_KEYS = "= ANY(%(keys)s)"
_OF_CHANNEL = "starts_with(conversation_key, %(lo)s)"

RULES: dict[str, tuple[str, ...]] = {
    "messages": ("DELETE FROM messages WHERE session_id = ANY(%(sessions)s)",),
    "approvals": ("DELETE FROM approvals WHERE session_id = ANY(%(sessions)s)",),
    "active_sessions": (f"DELETE FROM active_sessions WHERE conversation_key {_KEYS}",),
    "sessions": (f"DELETE FROM sessions WHERE conversation_key {_KEYS}",),
    "inbound_seen": (
        "DELETE FROM inbound_seen WHERE channel = %(channel)s AND message_id = ANY(%(dedupe)s)",
    ),
    "scheduler_runs": (
        "DELETE FROM scheduler_runs WHERE job_id IN "
        f"(SELECT id FROM scheduler_jobs WHERE conversation_key {_KEYS})",
    ),
    "scheduler_jobs": (f"DELETE FROM scheduler_jobs WHERE conversation_key {_KEYS}",),
    "previews": ("DELETE FROM previews WHERE anchor = ANY(%(inbox)s)",),
    "outbox": (
        "DELETE FROM outbox WHERE anchor = ANY(%(inbox)s) OR (anchor IS NULL "
        "AND target::jsonb ->> 'channel' = %(channel)s "
        "AND target::jsonb ->> 'chat_id' = ANY(%(chats)s))",
    ),
    "inbox": ("DELETE FROM inbox WHERE id = ANY(%(inbox)s)",),
    "chatter": (
        f"DELETE FROM chatter WHERE conversation_key {_KEYS} "
        f"OR (sender_id = %(user)s AND {_OF_CHANNEL})",
    ),
    "chatter_read": (f"DELETE FROM chatter_read WHERE reader_key {_KEYS}",),
    "run_usage": (f"DELETE FROM run_usage WHERE conversation_key {_KEYS}",),
    "conversation_models": (f"DELETE FROM conversation_models WHERE conversation_key {_KEYS}",),
    "conversation_voice": (f"DELETE FROM conversation_voice WHERE conversation_key {_KEYS}",),
    "status_lines": (f"DELETE FROM status_lines WHERE conversation_key {_KEYS}",),
    "button_messages": (
        f"DELETE FROM button_messages WHERE conversation_key {_KEYS} "
        "OR (channel = %(channel)s AND chat_id = ANY(%(chats)s))",
    ),
    "chat_marks": (
        "DELETE FROM chat_marks WHERE channel = %(channel)s AND chat_id = ANY(%(chats)s)",
    ),
    "editor_sessions": (
        "DELETE FROM editor_sessions WHERE channel = %(channel)s "
        f"AND (channel || ':' || session_id) {_KEYS}",
    ),
    "memories": (
        "DELETE FROM memories WHERE channel = %(channel)s "
        "AND (author = %(user)s OR (kind = 'user' AND owner = %(user)s))",
    ),
    "leases": ("DELETE FROM leases WHERE name = ANY(%(leases)s) AND expires_at < now()",),
    "pairing_codes": (
        "DELETE FROM pairing_codes WHERE channel = %(channel)s AND sender = %(user)s",
    ),
    "pairing_approved": (
        "DELETE FROM pairing_approved WHERE channel = %(channel)s AND sender = %(user)s",
    ),
    "pairing_welcomes": (
        "DELETE FROM pairing_welcomes WHERE channel = %(channel)s AND sender = %(user)s",
    ),
}

REDACT = (
    "UPDATE messages SET body = %(redacted)s WHERE role = 'user' AND body != %(redacted)s "
    "AND (strpos(body, %(mark)s) > 0 OR strpos(body, %(quoted)s) > 0) AND session_id IN "
    f"(SELECT session_id FROM sessions WHERE {_OF_CHANNEL})"
)
"""The group turns that carry the person's label, in the channel's remaining sessions."""

_RUNNING = (
    "SELECT session_id FROM inbox WHERE state IN ('accepted', 'running') AND session_id IS NOT NULL"
)

RETENTION = (
    # As on SQLite: an idle session loses its whole transcript, one in use whole turns.
    "DELETE FROM messages WHERE session_id IN (SELECT session_id FROM sessions "
    f"WHERE updated_at < %(cut)s AND session_id NOT IN ({_RUNNING}))",
    "UPDATE sessions SET summary = NULL WHERE updated_at < %(cut)s AND summary IS NOT NULL",
    "DELETE FROM messages m WHERE created_at < %(cut)s AND id < (SELECT min(u.id) "
    "FROM messages u WHERE u.session_id = m.session_id AND u.role = 'user' "
    "AND u.created_at >= %(cut)s)",
    "DELETE FROM memories WHERE created_at < %(cut)s",
)
"""What ``retention`` drops besides chatter and finished rows (``prune_kept``)."""

KEPT: dict[str, str] = {
    "offsets": "a channel account's polling position",
    "imports": "which one-time imports ran",
    "budgets": "a bot's shared sending budget",
    "schema_version": "the schema's version",
}


class ForgetStore(PostgresBase):
    """``Forgetting`` on PostgreSQL (see the module docstring)."""

    async def forget_person(self, person: Person) -> Forgotten:
        lo, _ = key_range(person.channel)

        async def write(conn: Conn) -> Forgotten:
            cur = await conn.execute(
                "SELECT id, conversation_key, message FROM inbox WHERE channel = %s",
                (person.channel,),
            )
            inbox_rows = [(int(r[0]), str(r[1]), str(r[2])) for r in await cur.fetchall()]
            cur = await conn.execute(
                "SELECT conversation_key FROM sessions WHERE starts_with(conversation_key, %s) "
                "UNION SELECT conversation_key FROM inbox WHERE channel = %s",
                (lo, person.channel),
            )
            found = traces(person, inbox_rows, [str(r[0]) for r in await cur.fetchall()])
            keys = sorted(found.keys)
            cur = await conn.execute(
                "SELECT session_id FROM sessions WHERE conversation_key = ANY(%s)", (keys,)
            )
            sessions = [str(r[0]) for r in await cur.fetchall()]
            params: dict[str, Any] = {
                "channel": person.channel,
                "user": person.user,
                "keys": keys,
                "leases": [f"conversation:{key}" for key in keys],
                "sessions": sessions,
                "inbox": sorted(found.inbox),
                "chats": sorted(found.chats),
                "dedupe": sorted(found.dedupe),
                "lo": lo,
                "mark": speaker_marks(person.user)[0],
                "quoted": speaker_marks(person.user)[1],
                "redacted": REDACTED,
            }
            done = Forgotten(conversations=found.keys, sessions=frozenset(sessions))
            for table, statements in RULES.items():
                for statement in statements:
                    done.add(table, (await conn.execute(statement, params)).rowcount)
            done.redacted = (await conn.execute(REDACT, params)).rowcount
            return done

        return await self._commit("forget_person", write)

    async def prune_kept(self, older_than_seconds: float) -> int:
        cut = self._clock() - older_than_seconds

        async def write(conn: Conn) -> int:
            count = 0
            for sql in RETENTION:
                count += (await conn.execute(sql, {"cut": cut})).rowcount
            return count

        return await self._commit("prune_kept", write)
