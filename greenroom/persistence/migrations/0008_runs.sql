-- greenroom schema 7: run records and the webhook outbox (issue 25, decision 0027). A turn's
-- row is its run record: when it was asked for, its first token, the model, tokens, cost and
-- error. A run that asked for a webhook gets an outbox row in the transaction that ends it;
-- the deliverer claims due rows (claimed_by, claimed_until) and records every attempt. No
-- foreign key: a delivery outlives its session's deletion.
ALTER TABLE turns ADD COLUMN created_at TEXT;
ALTER TABLE turns ADD COLUMN first_token_at TEXT;
ALTER TABLE turns ADD COLUMN model TEXT NOT NULL DEFAULT '';
ALTER TABLE turns ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE turns ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE turns ADD COLUMN cost REAL NOT NULL DEFAULT 0;
ALTER TABLE turns ADD COLUMN error TEXT NOT NULL DEFAULT '';
ALTER TABLE turns ADD COLUMN error_code TEXT NOT NULL DEFAULT '';
ALTER TABLE turns ADD COLUMN webhook TEXT NOT NULL DEFAULT '';
CREATE INDEX idx_turns_runs ON turns(session_id, started_at);

CREATE TABLE webhook_outbox (
    delivery_id      TEXT PRIMARY KEY NOT NULL,
    session_id       TEXT NOT NULL,
    run_id           TEXT NOT NULL,
    url              TEXT NOT NULL,
    body             BLOB NOT NULL,
    created_at       REAL NOT NULL,
    state            TEXT NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT NOT NULL DEFAULT '',
    next_attempt_at  REAL NOT NULL,
    finished_at      REAL,
    claimed_by       TEXT NOT NULL DEFAULT '',
    claimed_until    REAL NOT NULL DEFAULT 0
);
CREATE INDEX idx_outbox_due ON webhook_outbox(next_attempt_at) WHERE state = 'pending';
CREATE INDEX idx_outbox_run ON webhook_outbox(run_id);
