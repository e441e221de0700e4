-- greenroom schema 1: sessions and their history items.
CREATE TABLE sessions (
    id                      TEXT PRIMARY KEY NOT NULL,
    parent_id               TEXT REFERENCES sessions(id) ON DELETE CASCADE,
    created_at              TEXT NOT NULL,
    title                   TEXT NOT NULL DEFAULT '',
    tools_approved          INTEGER NOT NULL DEFAULT 0,
    safety_policy           TEXT NOT NULL DEFAULT '',
    input_tokens            INTEGER NOT NULL DEFAULT 0,
    output_tokens           INTEGER NOT NULL DEFAULT 0,
    cost                    REAL NOT NULL DEFAULT 0,
    working_dir             TEXT NOT NULL DEFAULT '',
    permissions             TEXT,
    max_iterations          INTEGER NOT NULL DEFAULT 0,
    max_tool_result_tokens  INTEGER NOT NULL DEFAULT 0,
    agent_model_overrides   TEXT NOT NULL DEFAULT '{}',
    custom_models_used      TEXT NOT NULL DEFAULT '[]',
    starred                 INTEGER NOT NULL DEFAULT 0,
    attributes              TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX idx_sessions_parent ON sessions(parent_id);
CREATE INDEX idx_sessions_created ON sessions(created_at);

-- One row per history item; the row id of a message item is the message id.
CREATE TABLE items (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id      TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    position        INTEGER NOT NULL,
    kind            TEXT NOT NULL CHECK (kind IN ('message', 'sub_session', 'summary', 'error')),
    role            TEXT,
    body            TEXT NOT NULL,
    sub_session_id  TEXT REFERENCES sessions(id) ON DELETE SET NULL
);
CREATE INDEX idx_items_session ON items(session_id, position);
