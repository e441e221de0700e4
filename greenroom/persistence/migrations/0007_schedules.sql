-- greenroom schema 7: scheduled runs (issue 25, decision 0028). next_fire is the next
-- occurrence in whole epoch seconds: firing one moves it on with a compare-and-set.
CREATE TABLE schedules (
    id TEXT PRIMARY KEY,
    cron TEXT NOT NULL,
    timezone TEXT NOT NULL,
    agent TEXT NOT NULL,
    agent_name TEXT NOT NULL DEFAULT '',
    message TEXT NOT NULL,
    session_id TEXT NOT NULL DEFAULT '',
    title TEXT NOT NULL DEFAULT '',
    paused INTEGER NOT NULL DEFAULT 0,
    next_fire INTEGER NOT NULL,
    created_at REAL NOT NULL,
    fires INTEGER NOT NULL DEFAULT 0,
    last_occurrence INTEGER,
    last_fired_at REAL,
    last_session_id TEXT NOT NULL DEFAULT '',
    last_error TEXT NOT NULL DEFAULT ''
);
CREATE INDEX schedules_due ON schedules (paused, next_fire);
