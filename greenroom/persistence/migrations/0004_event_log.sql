-- greenroom schema 4: durable event logs, turn and tool-call records, idempotency keys.

-- boot_epoch: +1 each time a process opens the file; every claim of that process gets it.
CREATE TABLE meta (
    key     TEXT PRIMARY KEY NOT NULL,
    value   INTEGER NOT NULL
);
INSERT INTO meta (key, value) VALUES ('boot_epoch', 0);

-- One row per session: its committed log head (the writer's fence) and its state.
CREATE TABLE heads (
    session_id  TEXT PRIMARY KEY NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    epoch       INTEGER NOT NULL DEFAULT 0,
    last_seq    INTEGER NOT NULL DEFAULT 0,
    state       TEXT NOT NULL DEFAULT 'idle' CHECK (state IN ('idle', 'running', 'needs_decision'))
);
INSERT INTO heads (session_id) SELECT id FROM sessions;
CREATE INDEX idx_heads_busy ON heads(state) WHERE state != 'idle';

-- The log: body is the event's JSON exactly as it is served (UTF-8, encoded once).
-- No foreign key: a deleted session's rows are removed by the delete itself.
CREATE TABLE events (
    session_id  TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    epoch       INTEGER NOT NULL,
    type        TEXT NOT NULL,
    body        BLOB NOT NULL,
    created_at  REAL NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
-- Retention by age looks at token deltas only.
CREATE INDEX idx_events_delta_age ON events(created_at)
    WHERE type IN ('agent_choice', 'agent_choice_reasoning');

CREATE TABLE turns (
    turn_id     TEXT PRIMARY KEY NOT NULL,
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    epoch       INTEGER NOT NULL,
    state       TEXT NOT NULL
                CHECK (state IN ('running', 'done', 'failed', 'cancelled', 'interrupted')),
    first_seq   INTEGER NOT NULL,
    text_seq    INTEGER NOT NULL,
    last_seq    INTEGER,
    source      TEXT NOT NULL DEFAULT '',
    agent_name  TEXT NOT NULL DEFAULT '',
    started_at  TEXT NOT NULL,
    ended_at    TEXT,
    reason      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX idx_turns_session ON turns(session_id, state);

CREATE TABLE tool_calls (
    session_id      TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    tool_call_id    TEXT NOT NULL,
    turn_id         TEXT NOT NULL,
    name            TEXT NOT NULL,
    arguments       TEXT NOT NULL,
    agent_name      TEXT NOT NULL DEFAULT '',
    state           TEXT NOT NULL CHECK (state IN ('started', 'finished', 'in_doubt', 'resolved')),
    started_seq     INTEGER NOT NULL,
    started_at      TEXT NOT NULL,
    placeholder_id  INTEGER,
    decision        TEXT NOT NULL DEFAULT '',
    decided_by      TEXT NOT NULL DEFAULT '',
    decided_at      TEXT,
    PRIMARY KEY (session_id, tool_call_id)
) WITHOUT ROWID;

CREATE TABLE idempotency_keys (
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    created_at  REAL NOT NULL,
    PRIMARY KEY (session_id, key)
) WITHOUT ROWID;
