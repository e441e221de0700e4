-- greenroom PostgreSQL schema 3: the process groups of running tool calls (issue 23), so that
-- a restart ends what a crash left behind (host: host name and boot id).
CREATE TABLE tool_processes (
    host TEXT NOT NULL,
    pgid BIGINT NOT NULL,
    start_ticks BIGINT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (host, pgid)
);
