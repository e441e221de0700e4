-- greenroom schema 2: the audited tool-call approvals of a session (a JSON array).
ALTER TABLE sessions ADD COLUMN approvals TEXT NOT NULL DEFAULT '[]';
