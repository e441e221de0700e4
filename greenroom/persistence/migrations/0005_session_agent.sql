-- greenroom schema 5: the session's agent (decision 0019): the agent file (source) and the agent
-- in it that the session runs, stored at its first run and on every agent switch. Empty for a
-- session that never ran.
ALTER TABLE sessions ADD COLUMN agent_file TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN agent_name TEXT NOT NULL DEFAULT '';
