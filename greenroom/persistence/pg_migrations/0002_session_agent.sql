-- greenroom PostgreSQL schema 2: the session's agent (decision 0019), as SQLite's schema 5.
ALTER TABLE gr_sessions ADD COLUMN agent_file text NOT NULL DEFAULT '';
ALTER TABLE gr_sessions ADD COLUMN agent_name text NOT NULL DEFAULT '';
