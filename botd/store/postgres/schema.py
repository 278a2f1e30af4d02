"""The PostgreSQL schema, as migrations: ``MIGRATIONS[n]`` takes version ``n`` to ``n + 1``.

The tables hold what the SQLite schema holds, in the shape it reached, with what several
nodes need besides: ``leases`` (``botd.cluster.leases``), a per-conversation ``seq`` on the
inbox (an identity column gives ids in the order they were *taken*, not the order their
transactions *committed*; the accept takes the next ``seq`` of its conversation under a
transaction-scoped advisory lock, so within a conversation ``seq`` order is commit order),
the fencing epoch a run's writes carry, pairing in the database, and the node clock check's
reference. Times are seconds since the epoch (``double precision``), as the SQLite backend
keeps them, so the records read the same from both.

The version is the one row of ``schema_version``; ``migrate`` applies what is missing in one
transaction under an advisory lock, so several nodes starting at once migrate once, and the
one that did logs it (``schema migrated from version 5 to 6``). A migration that shipped is
never edited: a change is a new entry at the end.

**Migrations only add** (tables, indexes, columns that may be NULL or have a default, rows),
never drop, rename or narrow what an earlier version reads or writes: during a rolling upgrade
the nodes still on the previous release keep running against the schema the first upgraded
node migrated (``tests/cluster/test_rolling_upgrade.py``). What they cannot do is *start*
against it: a botd refuses a schema newer than it knows (``NewerSchema``), and a running one
that finds one says so in ``/healthz`` (``botd.ops.node``). Going back is not supported: no
migration is ever undone.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from ..migrations import log_migrated, newer_schema

MIGRATION_LOCK = 0x626F7464  # "botd": the advisory lock key migrations run under

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 0 -> 1: the whole schema.
    (
        """
        CREATE TABLE sessions (
            session_id text PRIMARY KEY,
            conversation_key text NOT NULL,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            message_count integer NOT NULL DEFAULT 0,
            runs integer NOT NULL DEFAULT 0,
            summary text,
            meta text NOT NULL DEFAULT '{}'
        )
        """,
        "CREATE INDEX sessions_by_key ON sessions (conversation_key)",
        """
        CREATE TABLE active_sessions (
            conversation_key text PRIMARY KEY,
            session_id text NOT NULL REFERENCES sessions (session_id)
        )
        """,
        """
        CREATE TABLE messages (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            session_id text NOT NULL REFERENCES sessions (session_id),
            role text NOT NULL,
            body text NOT NULL,
            created_at double precision NOT NULL,
            compacted_at double precision
        )
        """,
        "CREATE INDEX messages_live ON messages (session_id, compacted_at, id)",
        """
        CREATE TABLE inbound_seen (
            channel text NOT NULL,
            message_id text NOT NULL,
            seen_at double precision NOT NULL,
            PRIMARY KEY (channel, message_id)
        )
        """,
        "CREATE INDEX inbound_seen_by_time ON inbound_seen (seen_at)",
        """
        CREATE TABLE offsets (
            channel text NOT NULL,
            account text NOT NULL,
            value text NOT NULL,
            updated_at double precision NOT NULL,
            PRIMARY KEY (channel, account)
        )
        """,
        """
        CREATE TABLE scheduler_jobs (
            id text PRIMARY KEY,
            kind text NOT NULL,
            trigger text NOT NULL,
            name text NOT NULL,
            prompt text NOT NULL,
            target text NOT NULL,
            conversation_key text,
            source text,
            fingerprint text,
            next_run_time text,
            heartbeat integer,
            updated_at double precision NOT NULL
        )
        """,
        """
        CREATE TABLE scheduler_runs (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            job_id text NOT NULL,
            at text NOT NULL,
            outcome text NOT NULL,
            error text
        )
        """,
        "CREATE INDEX scheduler_runs_by_job ON scheduler_runs (job_id, id)",
        """
        CREATE TABLE imports (
            name text PRIMARY KEY,
            imported_at double precision NOT NULL,
            detail text
        )
        """,
        # seq: the entry's place in its conversation (see the module docstring).
        """
        CREATE TABLE inbox (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            channel text NOT NULL,
            conversation_key text NOT NULL,
            seq bigint NOT NULL,
            message text NOT NULL,
            state text NOT NULL,
            run_id text,
            session_id text,
            user_turn_id bigint,
            attempts integer NOT NULL DEFAULT 0,
            accepted_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            UNIQUE (conversation_key, seq)
        )
        """,
        "CREATE INDEX inbox_unfinished ON inbox (conversation_key, seq) "
        "WHERE state IN ('accepted', 'running')",
        # epoch: the lease epoch of the run that wrote the piece (NULL on one node), so a
        # takeover knows which pieces an earlier owner left.
        """
        CREATE TABLE outbox (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            anchor bigint,
            seq integer NOT NULL,
            kind text NOT NULL,
            target text NOT NULL,
            text text NOT NULL,
            state text NOT NULL,
            refs text,
            media text,
            epoch bigint,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL
        )
        """,
        "CREATE INDEX outbox_waiting ON outbox (id) WHERE state = 'pending'",
        "CREATE INDEX outbox_by_anchor ON outbox (anchor)",
        """
        CREATE TABLE chatter (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            conversation_key text NOT NULL,
            sender_id text NOT NULL,
            sender_name text NOT NULL,
            text text NOT NULL,
            kept_at double precision NOT NULL,
            attachments text NOT NULL DEFAULT ''
        )
        """,
        "CREATE INDEX chatter_by_conversation ON chatter (conversation_key, id)",
        """
        CREATE TABLE run_usage (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            conversation_key text NOT NULL,
            session_id text NOT NULL,
            run_id text NOT NULL,
            model text NOT NULL,
            input_tokens bigint NOT NULL DEFAULT 0,
            output_tokens bigint NOT NULL DEFAULT 0,
            cache_read_tokens bigint NOT NULL DEFAULT 0,
            cache_write_tokens bigint NOT NULL DEFAULT 0,
            created_at double precision NOT NULL
        )
        """,
        "CREATE INDEX run_usage_by_key ON run_usage (conversation_key, id)",
        "CREATE INDEX run_usage_by_time ON run_usage (created_at)",
        """
        CREATE TABLE conversation_models (
            conversation_key text PRIMARY KEY,
            model text NOT NULL,
            updated_at double precision NOT NULL
        )
        """,
        """
        CREATE TABLE leases (
            name text PRIMARY KEY,
            holder text NOT NULL,
            epoch bigint NOT NULL,
            expires_at timestamptz NOT NULL
        )
        """,
        # Pairing: the codes waiting for an admin and the senders approved, per channel.
        """
        CREATE TABLE pairing_codes (
            code text PRIMARY KEY,
            channel text NOT NULL,
            sender text NOT NULL,
            name text,
            issued_at double precision NOT NULL
        )
        """,
        "CREATE INDEX pairing_codes_by_channel ON pairing_codes (channel, issued_at)",
        """
        CREATE TABLE pairing_approved (
            channel text NOT NULL,
            sender text NOT NULL,
            name text,
            approved_at double precision NOT NULL,
            PRIMARY KEY (channel, sender)
        )
        """,
    ),
    # issue 28 part E: tool progress. The tool status a run shows in its chat (a status line
    # message, or an assistant thread's status), kept until it was removed.
    (
        """
        CREATE TABLE status_lines (
            conversation_key text NOT NULL,
            kind text NOT NULL,
            message_id text NOT NULL,
            target text NOT NULL,
            created_at double precision NOT NULL,
            PRIMARY KEY (conversation_key, kind, message_id)
        )
        """,
    ),
    # issue 28 part D1: buttons. The buttons under an outbox piece's last message, as JSON
    # rows of {"label", "value"}; NULL for a piece without buttons.
    ("ALTER TABLE outbox ADD COLUMN buttons text",),
    # issue 28 part D2: approvals. A request to approve a tool call (``botd.approvals``), by
    # the call it gates (``key``) and by the token its buttons carry; a session's rows are
    # what a resumed run's transcript keeps its unanswered calls for.
    (
        """
        CREATE TABLE approvals (
            key text PRIMARY KEY,
            token text NOT NULL UNIQUE,
            session_id text NOT NULL,
            call_id text NOT NULL,
            tool_name text NOT NULL,
            summary text NOT NULL,
            deadline double precision NOT NULL,
            state text NOT NULL,
            decided_by text NOT NULL DEFAULT '',
            messages text NOT NULL DEFAULT '[]',
            created_at double precision NOT NULL,
            decided_at double precision
        )
        """,
        "CREATE INDEX approvals_by_session ON approvals (session_id)",
    ),
    # issue 28 part C: previews. The live messages a run shows its answer in (an edit
    # preview, a Slack stream), by the run's anchor, so a resumed run finishes them.
    (
        """
        CREATE TABLE previews (
            anchor bigint PRIMARY KEY,
            refs text NOT NULL,
            streaming boolean NOT NULL DEFAULT false,
            updated_at double precision NOT NULL
        )
        """,
    ),
    # issue 33: the buttons botd put under each of its messages, so a press counts only as
    # one of them, on that very message. Filled from what the earlier schema kept: each
    # sent piece's buttons under its last message, and each request to approve a call under
    # its messages (its Approve / Deny values as ``botd.approvals`` spells them).
    (
        """
        CREATE TABLE button_messages (
            channel text NOT NULL,
            account text NOT NULL,
            chat_id text NOT NULL,
            message_id text NOT NULL,
            buttons text NOT NULL,
            posted_at double precision NOT NULL,
            PRIMARY KEY (channel, account, chat_id, message_id)
        )
        """,
        "CREATE INDEX button_messages_by_time ON button_messages (posted_at)",
        """
        INSERT INTO button_messages
        SELECT r.value #>> '{target,channel}',
               coalesce(r.value #>> '{target,account_id}', 'default'),
               r.value #>> '{target,chat_id}',
               r.value ->> 'message_id', o.buttons, o.updated_at
        FROM outbox o,
             jsonb_array_elements(o.refs::jsonb) WITH ORDINALITY AS r(value, n)
        WHERE o.buttons IS NOT NULL AND o.state = 'sent' AND o.refs IS NOT NULL
          AND r.n = jsonb_array_length(o.refs::jsonb)
        ON CONFLICT DO NOTHING
        """,
        """
        INSERT INTO button_messages
        SELECT r.value #>> '{target,channel}',
               coalesce(r.value #>> '{target,account_id}', 'default'),
               r.value #>> '{target,chat_id}',
               r.value ->> 'message_id',
               '[[{"label": "Approve", "value": "approval:' || a.token || ':approve"}, '
               || '{"label": "Deny", "value": "approval:' || a.token || ':deny"}]]',
               a.created_at
        FROM approvals a, jsonb_array_elements(a.messages::jsonb) AS r(value)
        ON CONFLICT DO NOTHING
        """,
    ),
    # issue 35: catch-up marks. In each chat (or thread) of a platform whose history botd
    # reads again after a start, the newest message of it botd accepted or kept as context
    # (``marks``); thread_id is '' for none.
    (
        """
        CREATE TABLE chat_marks (
            channel text NOT NULL,
            account text NOT NULL,
            chat_id text NOT NULL,
            thread_id text NOT NULL,
            message_id text NOT NULL,
            marked_at double precision NOT NULL,
            PRIMARY KEY (channel, account, chat_id, thread_id)
        )
        """,
        "CREATE INDEX chat_marks_by_time ON chat_marks (channel, account, marked_at)",
    ),
    # issue 35: one platform budget per bot, shared by the nodes. For each rate (a bot of a
    # platform, by its id), when its next slot is free, in epoch seconds of the server's clock.
    (
        """
        CREATE TABLE budgets (
            name text PRIMARY KEY,
            next_at double precision NOT NULL
        )
        """,
    ),
    # issue 36: the ACP channel's sessions, so that session/list lists them after a restart
    # (as on SQLite).
    (
        """
        CREATE TABLE editor_sessions (
            channel text NOT NULL,
            session_id text NOT NULL,
            cwd text NOT NULL,
            title text,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            PRIMARY KEY (channel, session_id)
        )
        """,
        "CREATE INDEX editor_sessions_by_time ON editor_sessions (channel, updated_at)",
    ),
    # issue 37, owners: the messages a sender wrote while waiting for a pairing approval,
    # kept with the code, and the approved senders not told yet (``botd pairing approve`` in
    # another process, an owner's /pair on another node), handed to one node at a time.
    (
        "ALTER TABLE pairing_codes ADD COLUMN held jsonb NOT NULL DEFAULT '[]'::jsonb",
        """
        CREATE TABLE pairing_welcomes (
            channel text NOT NULL,
            sender text NOT NULL,
            held jsonb NOT NULL,
            taken_until double precision NOT NULL DEFAULT 0,
            PRIMARY KEY (channel, sender)
        )
        """,
    ),
    # issue 37 (session_scope: user): how far each member's conversation in a user-scoped
    # group read the group's kept chatter (as on SQLite; the identity's ids are never
    # reused, so no index is needed for new ones), and the conversation whose run posted a
    # message's buttons (NULL: posted before).
    (
        "ALTER TABLE button_messages ADD COLUMN conversation_key text",
        """
        CREATE TABLE chatter_read (
            reader_key text PRIMARY KEY,
            up_to bigint NOT NULL,
            read_at double precision NOT NULL
        )
        """,
    ),
    # issue 38, memory: as on SQLite, a person's or a group's rows with who had them written.
    (
        """
        CREATE TABLE memories (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            channel text NOT NULL,
            kind text NOT NULL,
            owner text NOT NULL,
            author text NOT NULL,
            text text NOT NULL,
            created_at double precision NOT NULL
        )
        """,
        "CREATE INDEX memories_by_owner ON memories (channel, kind, owner, id)",
        "CREATE INDEX memories_by_author ON memories (channel, author)",
    ),
    # issue 38, exec: "always allow this exact command in this chat". A request offering it
    # keeps a digest of the exact call in its chat (grant_key) and the chat (grant_chat);
    # decided 'always', the row is a standing grant the pruner leaves until it is revoked.
    (
        "ALTER TABLE approvals ADD COLUMN grant_key text",
        "ALTER TABLE approvals ADD COLUMN grant_chat text",
        "CREATE INDEX approvals_grants ON approvals (grant_key) WHERE grant_key IS NOT NULL",
        "CREATE INDEX approvals_grants_by_chat ON approvals (grant_chat) "
        "WHERE grant_chat IS NOT NULL",
    ),
    # issue 38, voice replies: as on SQLite, a row for each conversation whose answers are
    # spoken (``/voice on``).
    (
        """
        CREATE TABLE conversation_voice (
            conversation_key text PRIMARY KEY,
            updated_at double precision NOT NULL
        )
        """,
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)


class NewerSchema(Exception):
    """The database was migrated by a newer botd; this one refuses to guess at it."""


async def schema_version(conn: AsyncConnection[TupleRow]) -> int:
    """The database's schema version (0: botd never migrated it)."""
    cur = await conn.execute("SELECT to_regclass('schema_version') IS NOT NULL")
    exists = await cur.fetchone()
    if exists is None or not exists[0]:
        return 0
    cur = await conn.execute("SELECT version FROM schema_version")
    row = await cur.fetchone()
    return 0 if row is None else int(row[0])


async def migrate(
    conn: AsyncConnection[TupleRow],
    where: str,
    migrations: Sequence[Sequence[str]] = MIGRATIONS,
) -> int:
    """Bring the database to the version of ``migrations`` (``SCHEMA_VERSION``) in one
    transaction, and log it when it moved; the version it has now. ``where`` names the
    database (without its password) in the log line and the refusal of a newer schema."""
    target = len(migrations)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        version = await schema_version(conn)
        if version > target:
            raise NewerSchema(newer_schema(where, version, target, "store.dsn"))
        if version == target:
            return version
        await conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version integer NOT NULL)")
        for steps in migrations[version:]:
            for statement in steps:
                await conn.execute(statement)
        await conn.execute("DELETE FROM schema_version")
        await conn.execute("INSERT INTO schema_version VALUES (%s)", (target,))
    log_migrated(where, version, target)
    return target
