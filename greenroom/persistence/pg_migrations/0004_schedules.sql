-- greenroom PostgreSQL schema 4: scheduled runs (issue 25, decision 0028). next_fire is the
-- next occurrence in whole epoch seconds: the node whose compare-and-set moves it on fires it.
CREATE TABLE schedules (
    id TEXT PRIMARY KEY,
    cron TEXT NOT NULL,
    timezone TEXT NOT NULL,
    agent TEXT NOT NULL,
    agent_name TEXT NOT NULL DEFAULT '',
    message TEXT NOT NULL,
    session_id TEXT NOT NULL DEFAULT '',
    title TEXT NOT NULL DEFAULT '',
    paused BOOLEAN NOT NULL DEFAULT FALSE,
    next_fire BIGINT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    fires BIGINT NOT NULL DEFAULT 0,
    last_occurrence BIGINT,
    last_fired_at DOUBLE PRECISION,
    last_session_id TEXT NOT NULL DEFAULT '',
    last_error TEXT NOT NULL DEFAULT ''
);
CREATE INDEX schedules_due ON schedules (paused, next_fire);
