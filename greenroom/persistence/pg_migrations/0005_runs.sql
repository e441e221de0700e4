-- greenroom PostgreSQL schema 4: run records and the webhook outbox (issue 25, decision 0027).
-- A turn's row is its run record; a run that asked for a webhook gets an outbox row in the
-- transaction that ends it. Nodes claim due rows with FOR UPDATE SKIP LOCKED and a lease
-- (claimed_by, claimed_until), so two nodes never send one row at once and a dead node's
-- claims run out. No foreign key: a delivery outlives its session's deletion.
ALTER TABLE gr_turns ADD COLUMN created_at text;
ALTER TABLE gr_turns ADD COLUMN first_token_at text;
ALTER TABLE gr_turns ADD COLUMN model text NOT NULL DEFAULT '';
ALTER TABLE gr_turns ADD COLUMN input_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE gr_turns ADD COLUMN output_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE gr_turns ADD COLUMN cost double precision NOT NULL DEFAULT 0;
ALTER TABLE gr_turns ADD COLUMN error text NOT NULL DEFAULT '';
ALTER TABLE gr_turns ADD COLUMN error_code text NOT NULL DEFAULT '';
ALTER TABLE gr_turns ADD COLUMN webhook text NOT NULL DEFAULT '';
CREATE INDEX gr_turns_runs ON gr_turns (session_id, started_at);

CREATE TABLE webhook_outbox (
    delivery_id      text PRIMARY KEY,
    session_id       text NOT NULL,
    run_id           text NOT NULL,
    url              text NOT NULL,
    body             bytea NOT NULL,
    created_at       double precision NOT NULL,
    state            text NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    last_error       text NOT NULL DEFAULT '',
    next_attempt_at  double precision NOT NULL,
    finished_at      double precision,
    claimed_by       text NOT NULL DEFAULT '',
    claimed_until    double precision NOT NULL DEFAULT 0
);
CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_outbox_run ON webhook_outbox (run_id);
