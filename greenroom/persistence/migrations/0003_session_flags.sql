-- greenroom schema 3: docker-agent's session flags: thinking (on by default) and
-- hide_tool_results.
ALTER TABLE sessions ADD COLUMN thinking INTEGER NOT NULL DEFAULT 1;
ALTER TABLE sessions ADD COLUMN hide_tool_results INTEGER NOT NULL DEFAULT 0;
