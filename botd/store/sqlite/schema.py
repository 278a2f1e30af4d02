"""The schema, as the migrations that build it: ``MIGRATIONS[n]`` takes version ``n`` to ``n + 1``.

A migration that shipped is never edited: a change is a new entry at the end.
"""

from __future__ import annotations

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 0 -> 1: the initial schema.
    (
        """
        CREATE TABLE sessions (
            session_id TEXT PRIMARY KEY,
            conversation_key TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0,
            summary TEXT,
            meta TEXT NOT NULL DEFAULT '{}'
        )
        """,
        "CREATE INDEX sessions_by_key ON sessions (conversation_key)",
        # The session each conversation key uses now; /new repoints it.
        """
        CREATE TABLE active_sessions (
            conversation_key TEXT PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions (session_id)
        )
        """,
        # AUTOINCREMENT: ids are never reused, so id order is append order for audit too.
        """
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions (session_id),
            role TEXT NOT NULL,
            body TEXT NOT NULL,
            created_at REAL NOT NULL,
            compacted_at REAL
        )
        """,
        "CREATE INDEX messages_live ON messages (session_id, compacted_at, id)",
        """
        CREATE TABLE inbound_seen (
            channel TEXT NOT NULL,
            message_id TEXT NOT NULL,
            seen_at REAL NOT NULL,
            PRIMARY KEY (channel, message_id)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX inbound_seen_by_time ON inbound_seen (seen_at)",
        """
        CREATE TABLE offsets (
            channel TEXT NOT NULL,
            account TEXT NOT NULL,
            value TEXT NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (channel, account)
        ) WITHOUT ROWID
        """,
    ),
    # 1 -> 2: the scheduler's jobs and run log, and a record of one-time imports.
    (
        # One row per job: its definition (the trigger as JSON: cron expression and zone,
        # interval and start, or the one run time) and when it runs next, so a restart knows
        # which runs it missed. next_run_time is ISO 8601 with its offset; NULL: no next run.
        """
        CREATE TABLE scheduler_jobs (
            id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            trigger TEXT NOT NULL,
            name TEXT NOT NULL,
            prompt TEXT NOT NULL,
            target TEXT NOT NULL,
            conversation_key TEXT,
            source TEXT,
            fingerprint TEXT,
            next_run_time TEXT,
            updated_at REAL NOT NULL
        ) WITHOUT ROWID
        """,
        """
        CREATE TABLE scheduler_runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            job_id TEXT NOT NULL,
            at TEXT NOT NULL,
            outcome TEXT NOT NULL,
            error TEXT
        )
        """,
        "CREATE INDEX scheduler_runs_by_job ON scheduler_runs (job_id, id)",
        """
        CREATE TABLE imports (
            name TEXT PRIMARY KEY,
            imported_at REAL NOT NULL,
            detail TEXT
        ) WITHOUT ROWID
        """,
    ),
    # 2 -> 3: the durable inbox and outbox.
    (
        # Neither table has an index beyond its id: each write touches one table page, and both
        # are searched only at start (unfinished messages, unconfirmed pieces) and by the daily
        # pruning, where a scan of a week's rows is cheap.
        # One row per accepted message, in arrival order (id). The message is the
        # InboundMessage as JSON. state: accepted -> running -> answered | failed | skipped.
        # A running row names the run (run_id), its session and the transcript row of the
        # user turn it wrote (user_turn_id), so a restart resumes it without writing it twice.
        """
        CREATE TABLE inbox (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            channel TEXT NOT NULL,
            conversation_key TEXT NOT NULL,
            message TEXT NOT NULL,
            state TEXT NOT NULL,
            run_id TEXT,
            session_id TEXT,
            user_turn_id INTEGER,
            attempts INTEGER NOT NULL DEFAULT 0,
            accepted_at REAL NOT NULL,
            updated_at REAL NOT NULL
        )
        """,
        # One row per block or final reply of a run, written before it is sent (pending) and
        # marked sent with the platform's message ids (refs, a JSON list) or failed. anchor is
        # the inbox id the run answers (the first of its batch); NULL for runs of no inbox
        # message (scheduled jobs).
        """
        CREATE TABLE outbox (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            anchor INTEGER,
            seq INTEGER NOT NULL,
            kind TEXT NOT NULL,
            target TEXT NOT NULL,
            text TEXT NOT NULL,
            state TEXT NOT NULL,
            refs TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        )
        """,
    ),
    # 3 -> 4: how many runs each session started, so run ids (session:number) and the
    # recordings named after them keep counting across restarts. Sessions from before count
    # on from the highest run number their inbox rows still name.
    (
        "ALTER TABLE sessions ADD COLUMN runs INTEGER NOT NULL DEFAULT 0",
        """
        UPDATE sessions SET runs = coalesce((
            SELECT max(CAST(substr(run_id, length(session_id) + 2) AS INTEGER))
            FROM inbox
            WHERE inbox.session_id = sessions.session_id AND run_id IS NOT NULL
        ), 0)
        """,
    ),
    # 4 -> 5: group messages the bot was not addressed in (kept chatter, with the files they
    # came with as JSON, '' for none), shown with the next message that is addressed to it in
    # that conversation and deleted then. The index serves
    # both the read of one conversation's chatter and the trim to its newest rows on write.
    (
        """
        CREATE TABLE chatter (
            id INTEGER PRIMARY KEY,
            conversation_key TEXT NOT NULL,
            sender_id TEXT NOT NULL,
            sender_name TEXT NOT NULL,
            text TEXT NOT NULL,
            kept_at REAL NOT NULL,
            attachments TEXT NOT NULL DEFAULT ''
        )
        """,
        "CREATE INDEX chatter_by_conversation ON chatter (conversation_key, id)",
    ),
    # 5 -> 6: token usage per run and model that answered, and the model each conversation chose
    # with /model (none: the configured primary).
    (
        """
        CREATE TABLE run_usage (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_key TEXT NOT NULL,
            session_id TEXT NOT NULL,
            run_id TEXT NOT NULL,
            model TEXT NOT NULL,
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            cache_read_tokens INTEGER NOT NULL DEFAULT 0,
            cache_write_tokens INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL
        )
        """,
        "CREATE INDEX run_usage_by_key ON run_usage (conversation_key, id)",
        "CREATE INDEX run_usage_by_time ON run_usage (created_at)",
        """
        CREATE TABLE conversation_models (
            conversation_key TEXT PRIMARY KEY,
            model TEXT NOT NULL,
            updated_at REAL NOT NULL
        )
        """,
    ),
    # 6 -> 7: the files an outbox piece uploads, as references (URLs or paths, never bytes):
    # a JSON object {"urls": [...], "voice": bool}; NULL for a piece of text only.
    ("ALTER TABLE outbox ADD COLUMN media TEXT",),
    # 7 -> 8: partial indexes of the unfinished inbox rows and the unconfirmed outbox pieces,
    # so /metrics and /healthz count them (and find the oldest) without reading the tables.
    # They hold only the few rows waiting: a row enters at its write and leaves when done.
    (
        "CREATE INDEX inbox_unfinished ON inbox (accepted_at) "
        "WHERE state IN ('accepted', 'running')",
        "CREATE INDEX outbox_waiting ON outbox (id) WHERE state = 'pending'",
    ),
    # 8 -> 9: a heartbeat check's acknowledgement bound per job; NULL for an ordinary job.
    ("ALTER TABLE scheduler_jobs ADD COLUMN heartbeat INTEGER",),
    # issue 28 part E: tool progress. The tool status a run shows in its chat (a status line
    # message, or an assistant thread's status), kept until it was removed.
    (
        """
        CREATE TABLE status_lines (
            conversation_key TEXT NOT NULL,
            kind TEXT NOT NULL,
            message_id TEXT NOT NULL,
            target TEXT NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (conversation_key, kind, message_id)
        )
        """,
    ),
    # issue 28 part D1: buttons. The buttons under an outbox piece's last message, as JSON
    # rows of {"label", "value"}; NULL for a piece without buttons.
    ("ALTER TABLE outbox ADD COLUMN buttons TEXT",),
    # issue 28 part D2: approvals. A request to approve a tool call (``botd.approvals``), by
    # the call it gates (``key``) and by the token its buttons carry; a session's rows are
    # what a resumed run's transcript keeps its unanswered calls for.
    (
        """
        CREATE TABLE approvals (
            key TEXT PRIMARY KEY,
            token TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL,
            call_id TEXT NOT NULL,
            tool_name TEXT NOT NULL,
            summary TEXT NOT NULL,
            deadline REAL NOT NULL,
            state TEXT NOT NULL,
            decided_by TEXT NOT NULL DEFAULT '',
            messages TEXT NOT NULL DEFAULT '[]',
            created_at REAL NOT NULL,
            decided_at REAL
        )
        """,
        "CREATE INDEX approvals_by_session ON approvals (session_id)",
    ),
    # issue 28 part C: previews. The live messages a run shows its answer in (an edit
    # preview, a Slack stream), by the run's anchor, so a resumed run finishes them.
    (
        """
        CREATE TABLE previews (
            anchor INTEGER PRIMARY KEY,
            refs TEXT NOT NULL,
            streaming INTEGER NOT NULL DEFAULT 0,
            updated_at REAL NOT NULL
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
            channel TEXT NOT NULL,
            account TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            message_id TEXT NOT NULL,
            buttons TEXT NOT NULL,
            posted_at REAL NOT NULL,
            PRIMARY KEY (channel, account, chat_id, message_id)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX button_messages_by_time ON button_messages (posted_at)",
        """
        INSERT OR IGNORE INTO button_messages
        SELECT json_extract(r.value, '$.target.channel'),
               coalesce(json_extract(r.value, '$.target.account_id'), 'default'),
               json_extract(r.value, '$.target.chat_id'),
               json_extract(r.value, '$.message_id'), o.buttons, o.updated_at
        FROM outbox o, json_each(o.refs) r
        WHERE o.buttons IS NOT NULL AND o.state = 'sent' AND o.refs IS NOT NULL
          AND r.key = json_array_length(o.refs) - 1
        """,
        """
        INSERT OR IGNORE INTO button_messages
        SELECT json_extract(r.value, '$.target.channel'),
               coalesce(json_extract(r.value, '$.target.account_id'), 'default'),
               json_extract(r.value, '$.target.chat_id'),
               json_extract(r.value, '$.message_id'),
               '[[{"label": "Approve", "value": "approval:' || a.token || ':approve"}, '
               || '{"label": "Deny", "value": "approval:' || a.token || ':deny"}]]',
               a.created_at
        FROM approvals a, json_each(a.messages) r
        """,
    ),
    # issue 34: the dispatcher pulls one conversation's unfinished entries past the last it
    # took (``conversation_inbox``); without this index that read would walk every row
    # accepted since, in any conversation. Partial like ``inbox_unfinished``: only the rows
    # waiting are in it.
    (
        "CREATE INDEX inbox_unfinished_by_conversation ON inbox (conversation_key, id) "
        "WHERE state IN ('accepted', 'running')",
    ),
    # issue 35: catch-up marks. In each chat (or thread) of a platform whose history botd
    # reads again after a start, the newest message of it botd accepted or kept as context
    # (``marks``); thread_id is '' for none.
    (
        """
        CREATE TABLE chat_marks (
            channel TEXT NOT NULL,
            account TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            thread_id TEXT NOT NULL,
            message_id TEXT NOT NULL,
            marked_at REAL NOT NULL,
            PRIMARY KEY (channel, account, chat_id, thread_id)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX chat_marks_by_time ON chat_marks (channel, account, marked_at)",
    ),
    # issue 36: the ACP channel's sessions, so that session/list lists them after a restart:
    # each session an editor made on a channel instance, its working directory, a title (the
    # start of its first prompt) and when it last changed (made, loaded, prompted).
    (
        """
        CREATE TABLE editor_sessions (
            channel TEXT NOT NULL,
            session_id TEXT NOT NULL,
            cwd TEXT NOT NULL,
            title TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (channel, session_id)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX editor_sessions_by_time ON editor_sessions (channel, updated_at)",
    ),
    # issue 37 (session_scope: user): how far each member's conversation in a user-scoped
    # group read the group's kept chatter (the last line id shown to it), since those lines
    # are shared, not consumed. The index serves the new chatter ids, which are never at or
    # below a mark (``chatter``). And the conversation whose run posted a message's buttons,
    # where a press of them goes (NULL: posted before).
    (
        "ALTER TABLE button_messages ADD COLUMN conversation_key TEXT",
        """
        CREATE TABLE chatter_read (
            reader_key TEXT PRIMARY KEY,
            up_to INTEGER NOT NULL,
            read_at REAL NOT NULL
        ) WITHOUT ROWID
        """,
        "CREATE INDEX chatter_read_by_line ON chatter_read (up_to)",
    ),
    # issue 38, memory: what botd keeps for a person (kind 'user', owner their user id) or a
    # group (kind 'group', owner the chat id) on a channel instance, each row with the user
    # who had it written (author), so that a person's rows go by (channel, author).
    (
        """
        CREATE TABLE memories (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            channel TEXT NOT NULL,
            kind TEXT NOT NULL,
            owner TEXT NOT NULL,
            author TEXT NOT NULL,
            text TEXT NOT NULL,
            created_at REAL NOT NULL
        )
        """,
        "CREATE INDEX memories_by_owner ON memories (channel, kind, owner, id)",
        "CREATE INDEX memories_by_author ON memories (channel, author)",
    ),
    # issue 38, exec: "always allow this exact command in this chat". A request offering it
    # keeps a digest of the exact call in its chat (grant_key) and the chat (grant_chat);
    # decided 'always', the row is a standing grant the pruner leaves until it is revoked.
    (
        "ALTER TABLE approvals ADD COLUMN grant_key TEXT",
        "ALTER TABLE approvals ADD COLUMN grant_chat TEXT",
        "CREATE INDEX approvals_grants ON approvals (grant_key) WHERE grant_key IS NOT NULL",
        "CREATE INDEX approvals_grants_by_chat ON approvals (grant_chat) "
        "WHERE grant_chat IS NOT NULL",
    ),
    # issue 38, voice replies: a row for each conversation whose answers are spoken
    # (``/voice on``); none, as before: text.
    (
        """
        CREATE TABLE conversation_voice (
            conversation_key TEXT PRIMARY KEY,
            updated_at REAL NOT NULL
        ) WITHOUT ROWID
        """,
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)
