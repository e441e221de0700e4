-- greenroom schema 6: the process groups of running tool calls (issue 23), so that a restart
-- ends what a crash left behind.
CREATE TABLE tool_processes (
    host TEXT NOT NULL,
    pgid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL,
    started_at REAL NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (host, pgid)
);
