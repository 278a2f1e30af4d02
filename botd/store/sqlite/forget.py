"""Forgetting a person on SQLite (``Forgetting``; what is theirs: ``botd.store.forgetting``).

``RULES`` has one entry per table, in the order they run (a transcript's rows before its
session, a job's runs before the job): the statements that remove (or, for ``messages``,
redact) the person's rows. ``KEPT`` names the tables that hold nothing of a person, with
why. Every table of the schema is in one of them (``tests/store/test_forget_contracts.py``):
a migration that adds a table adds its rule here. The statements take named parameters
(``forget_params``); the sets are JSON arrays read with ``json_each``.

Pairing is not in the database on SQLite but in ``pairing.json`` beside it: its rows go too
(``PairingFile.forget``), counted as ``pairing.json``.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ..forgetting import REDACTED, Forgotten, Person, key_range, speaker_marks, traces
from ..pairing import PairingFile
from .deferred import DeferredWrites

__all__ = ["KEPT", "REDACT", "RETENTION", "RULES", "ForgetStore"]


def _in(name: str) -> str:
    return f"(SELECT value FROM json_each(:{name}))"


_KEYS = _in("keys")
_CHANNEL_KEYS = "conversation_key >= :lo AND conversation_key < :hi"

RULES: dict[str, tuple[str, ...]] = {
    "messages": (f"DELETE FROM messages WHERE session_id IN {_in('sessions')}",),
    "approvals": (f"DELETE FROM approvals WHERE session_id IN {_in('sessions')}",),
    "active_sessions": (f"DELETE FROM active_sessions WHERE conversation_key IN {_KEYS}",),
    "sessions": (f"DELETE FROM sessions WHERE conversation_key IN {_KEYS}",),
    "inbound_seen": (
        f"DELETE FROM inbound_seen WHERE channel = :channel AND message_id IN {_in('dedupe')}",
    ),
    "scheduler_runs": (
        "DELETE FROM scheduler_runs WHERE job_id IN "
        f"(SELECT id FROM scheduler_jobs WHERE conversation_key IN {_KEYS})",
    ),
    "scheduler_jobs": (f"DELETE FROM scheduler_jobs WHERE conversation_key IN {_KEYS}",),
    "previews": (f"DELETE FROM previews WHERE anchor IN {_in('inbox')}",),
    "outbox": (
        f"DELETE FROM outbox WHERE anchor IN {_in('inbox')} OR (anchor IS NULL "
        "AND json_extract(target, '$.channel') = :channel "
        f"AND json_extract(target, '$.chat_id') IN {_in('chats')})",
    ),
    "inbox": (f"DELETE FROM inbox WHERE id IN {_in('inbox')}",),
    "chatter": (
        f"DELETE FROM chatter WHERE conversation_key IN {_KEYS} "
        f"OR (sender_id = :user AND {_CHANNEL_KEYS})",
    ),
    "chatter_read": (f"DELETE FROM chatter_read WHERE reader_key IN {_KEYS}",),
    "run_usage": (f"DELETE FROM run_usage WHERE conversation_key IN {_KEYS}",),
    "conversation_models": (f"DELETE FROM conversation_models WHERE conversation_key IN {_KEYS}",),
    "conversation_voice": (f"DELETE FROM conversation_voice WHERE conversation_key IN {_KEYS}",),
    "status_lines": (f"DELETE FROM status_lines WHERE conversation_key IN {_KEYS}",),
    "button_messages": (
        f"DELETE FROM button_messages WHERE conversation_key IN {_KEYS} "
        f"OR (channel = :channel AND chat_id IN {_in('chats')})",
    ),
    "chat_marks": (
        f"DELETE FROM chat_marks WHERE channel = :channel AND chat_id IN {_in('chats')}",
    ),
    "editor_sessions": (
        f"DELETE FROM editor_sessions WHERE channel = :channel "
        f"AND (channel || ':' || session_id) IN {_KEYS}",
    ),
    "memories": (
        "DELETE FROM memories WHERE channel = :channel "
        "AND (author = :user OR (kind = 'user' AND owner = :user))",
    ),
}

REDACT = (
    "UPDATE messages SET body = :redacted WHERE role = 'user' AND body != :redacted "
    "AND (instr(body, :mark) > 0 OR instr(body, :quoted) > 0) AND session_id IN "
    f"(SELECT session_id FROM sessions WHERE {_CHANNEL_KEYS})"
)
"""The group turns that carry the person's label, in the channel's remaining sessions."""

_RUNNING = "SELECT session_id FROM inbox WHERE state IN ('accepted', 'running')"

RETENTION = (
    # A session idle since the cut loses its whole transcript and its summary; one in use,
    # its turns before its first user turn since the cut (a whole turn or none).
    "DELETE FROM messages WHERE session_id IN (SELECT session_id FROM sessions "
    f"WHERE updated_at < :cut AND session_id NOT IN ({_RUNNING} AND session_id IS NOT NULL))",
    "UPDATE sessions SET summary = NULL WHERE updated_at < :cut AND summary IS NOT NULL",
    "DELETE FROM messages WHERE created_at < :cut AND id < (SELECT min(u.id) FROM messages u "
    "WHERE u.session_id = messages.session_id AND u.role = 'user' AND u.created_at >= :cut)",
    "DELETE FROM memories WHERE created_at < :cut",
)
"""What ``retention`` drops besides chatter and finished rows (``prune_kept``)."""

KEPT: dict[str, str] = {
    "offsets": "a channel account's polling position",
    "imports": "which one-time imports ran",
    "sqlite_sequence": "SQLite's own id counters",
}


class ForgetStore(DeferredWrites):
    """``Forgetting`` on SQLite (see the module docstring)."""

    async def forget_person(self, person: Person) -> Forgotten:
        lo, hi = key_range(person.channel)

        def write(conn: sqlite3.Connection) -> Forgotten:
            inbox_rows = conn.execute(
                "SELECT id, conversation_key, message FROM inbox WHERE channel = ?",
                (person.channel,),
            ).fetchall()
            keys = [
                str(row[0])
                for row in conn.execute(
                    "SELECT conversation_key FROM sessions WHERE conversation_key >= ? "
                    "AND conversation_key < ? UNION SELECT conversation_key FROM inbox "
                    "WHERE channel = ?",
                    (lo, hi, person.channel),
                )
            ]
            found = traces(person, ((int(r[0]), str(r[1]), str(r[2])) for r in inbox_rows), keys)
            sessions = [
                str(row[0])
                for row in conn.execute(
                    f"SELECT session_id FROM sessions WHERE conversation_key IN {_KEYS}",
                    {"keys": json.dumps(sorted(found.keys))},
                )
            ]
            params = forget_params(person, found.keys, sessions)
            params.update(
                inbox=json.dumps(sorted(found.inbox)),
                chats=json.dumps(sorted(found.chats)),
                dedupe=json.dumps(sorted(found.dedupe)),
            )
            done = Forgotten(conversations=found.keys, sessions=frozenset(sessions))
            for table, statements in RULES.items():
                for statement in statements:
                    done.add(table, conn.execute(statement, params).rowcount)
            done.redacted = conn.execute(REDACT, params).rowcount
            return done

        done = await self._commit("forget_person", write)
        done.add(
            "pairing.json",
            PairingFile(self.path.parent / "pairing.json").forget(person.channel, person.user),
        )
        return done

    async def prune_kept(self, older_than_seconds: float) -> int:
        cut = self._clock() - older_than_seconds

        def write(conn: sqlite3.Connection) -> int:
            return sum(conn.execute(sql, {"cut": cut}).rowcount for sql in RETENTION)

        return await self._commit("prune_kept", write)


def forget_params(person: Person, keys: frozenset[str], sessions: list[str]) -> dict[str, Any]:
    """The named parameters every statement of ``RULES`` and ``REDACT`` may use."""
    lo, hi = key_range(person.channel)
    return {
        "channel": person.channel,
        "user": person.user,
        "keys": json.dumps(sorted(keys)),
        "sessions": json.dumps(sessions),
        "lo": lo,
        "hi": hi,
        "mark": speaker_marks(person.user)[0],
        "quoted": speaker_marks(person.user)[1],
        "redacted": REDACTED,
    }
