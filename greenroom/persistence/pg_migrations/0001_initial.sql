-- greenroom PostgreSQL schema 1: sessions, history, durable event logs, records, and the nodes
-- of a cluster. Applied in one transaction under an advisory lock (see _pg_open.py).

-- One row per node id; incarnation +1 on every join; leases run on the database clock.
CREATE TABLE gr_nodes (
    node_id        text PRIMARY KEY,
    incarnation    bigint NOT NULL,
    advertise_url  text NOT NULL DEFAULT '',
    lease_until    timestamptz NOT NULL,
    state          text NOT NULL DEFAULT 'up' CHECK (state IN ('up', 'draining'))
);

-- Session metadata (the columns of the SQLite store). A deleted session stays as a tombstone
-- (deleted_at set): its id is never reused.
CREATE TABLE gr_sessions (
    session_id              text PRIMARY KEY,
    parent_id               text REFERENCES gr_sessions (session_id),
    created_at              text NOT NULL,
    title                   text NOT NULL DEFAULT '',
    tools_approved          integer NOT NULL DEFAULT 0,
    safety_policy           text NOT NULL DEFAULT '',
    input_tokens            bigint NOT NULL DEFAULT 0,
    output_tokens           bigint NOT NULL DEFAULT 0,
    cost                    double precision NOT NULL DEFAULT 0,
    working_dir             text NOT NULL DEFAULT '',
    permissions             text,
    max_iterations          bigint NOT NULL DEFAULT 0,
    max_tool_result_tokens  bigint NOT NULL DEFAULT 0,
    agent_model_overrides   text NOT NULL DEFAULT '{}',
    custom_models_used      text NOT NULL DEFAULT '[]',
    starred                 integer NOT NULL DEFAULT 0,
    attributes              text NOT NULL DEFAULT '{}',
    approvals               text NOT NULL DEFAULT '[]',
    thinking                integer NOT NULL DEFAULT 1,
    hide_tool_results       integer NOT NULL DEFAULT 0,
    inserted                bigint GENERATED ALWAYS AS IDENTITY,
    deleted_at              timestamptz
);
CREATE INDEX gr_sessions_parent ON gr_sessions (parent_id) WHERE deleted_at IS NULL;
CREATE INDEX gr_sessions_roots ON gr_sessions (inserted) WHERE deleted_at IS NULL AND parent_id IS NULL;

-- The fencing row of a session: every write of its log and records updates it, matching epoch
-- and owner. epoch +1 on every takeover and on delete.
CREATE TABLE gr_heads (
    session_id  text PRIMARY KEY REFERENCES gr_sessions (session_id),
    epoch       bigint NOT NULL DEFAULT 0,
    owner_node  text,
    owner_inc   bigint,
    last_seq    bigint NOT NULL DEFAULT 0,
    state       text NOT NULL DEFAULT 'idle' CHECK (state IN ('idle', 'running', 'needs_decision'))
);
CREATE INDEX gr_heads_owner ON gr_heads (owner_node, owner_inc) WHERE owner_node IS NOT NULL;
CREATE INDEX gr_heads_busy ON gr_heads (state) WHERE state <> 'idle';

-- History items; a message's item_id is its message id.
CREATE TABLE gr_items (
    item_id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id      text NOT NULL REFERENCES gr_sessions (session_id),
    pos             integer NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('message', 'sub_session', 'summary', 'error')),
    role            text,
    body            text NOT NULL,
    sub_session_id  text REFERENCES gr_sessions (session_id)
);
CREATE INDEX gr_items_session ON gr_items (session_id, pos);

-- The log: body is the event's JSON exactly as served. created_at: seconds since the epoch.
CREATE TABLE gr_events (
    session_id  text NOT NULL,
    seq         bigint NOT NULL,
    epoch       bigint NOT NULL,
    type        text NOT NULL,
    body        bytea NOT NULL,
    created_at  double precision NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX gr_events_delta_age ON gr_events (created_at)
    WHERE type IN ('agent_choice', 'agent_choice_reasoning');

CREATE TABLE gr_turns (
    turn_id     text PRIMARY KEY,
    session_id  text NOT NULL REFERENCES gr_sessions (session_id),
    epoch       bigint NOT NULL,
    state       text NOT NULL
                CHECK (state IN ('running', 'done', 'failed', 'cancelled', 'interrupted')),
    first_seq   bigint NOT NULL,
    text_seq    bigint NOT NULL,
    last_seq    bigint,
    source      text NOT NULL DEFAULT '',
    agent_name  text NOT NULL DEFAULT '',
    started_at  text NOT NULL,
    ended_at    text,
    reason      text NOT NULL DEFAULT '',
    inserted    bigint GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX gr_turns_session ON gr_turns (session_id, state);

CREATE TABLE gr_tool_calls (
    session_id      text NOT NULL REFERENCES gr_sessions (session_id),
    tool_call_id    text NOT NULL,
    turn_id         text NOT NULL,
    name            text NOT NULL,
    arguments       text NOT NULL,
    agent_name      text NOT NULL DEFAULT '',
    state           text NOT NULL CHECK (state IN ('started', 'finished', 'in_doubt', 'resolved')),
    started_seq     bigint NOT NULL,
    started_at      text NOT NULL,
    placeholder_id  bigint,
    decision        text NOT NULL DEFAULT '',
    decided_by      text NOT NULL DEFAULT '',
    decided_at      text,
    PRIMARY KEY (session_id, tool_call_id)
);
CREATE INDEX gr_tool_calls_doubt ON gr_tool_calls (session_id) WHERE state = 'in_doubt';

-- Follow-up idempotency keys; created_at: seconds since the epoch.
CREATE TABLE gr_idempotency (
    session_id  text NOT NULL REFERENCES gr_sessions (session_id),
    key         text NOT NULL,
    created_at  double precision NOT NULL,
    PRIMARY KEY (session_id, key)
);
