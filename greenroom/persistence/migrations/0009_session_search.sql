-- greenroom schema 7: session search (decision 0026).
-- search_index: an FTS5 index over the session titles (row -sessions.rowid) and the text of
-- user and assistant messages (row items.id), external-content over the view search_docs, kept
-- in step by the triggers below (the store's writes need no change). The triggers hand FTS5
-- the old values exactly as the view gives them, so 'delete' removes what was indexed. The escape
-- \u0000 in a stored message becomes \u0020 (json_extract would end the text at a NUL).
-- After a VACUUM (which may renumber sessions.rowid) run
-- INSERT INTO search_index (search_index) VALUES ('rebuild').
CREATE VIEW search_docs (doc, title, body) AS
    SELECT -rowid, title, '' FROM sessions
    UNION ALL
    SELECT id, '', COALESCE(json_extract(replace(body, '\u0000', '\u0020'), '$.message.content'), '') FROM items
    WHERE kind = 'message' AND role IN ('user', 'assistant');

CREATE VIRTUAL TABLE search_index USING fts5 (
    title, body,
    content = 'search_docs', content_rowid = 'doc',
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER search_session_insert AFTER INSERT ON sessions BEGIN
    INSERT INTO search_index (rowid, title, body) VALUES (-new.rowid, new.title, '');
END;
CREATE TRIGGER search_session_title AFTER UPDATE OF title ON sessions BEGIN
    INSERT INTO search_index (search_index, rowid, title, body)
        VALUES ('delete', -old.rowid, old.title, '');
    INSERT INTO search_index (rowid, title, body) VALUES (-new.rowid, new.title, '');
END;
CREATE TRIGGER search_session_delete AFTER DELETE ON sessions BEGIN
    INSERT INTO search_index (search_index, rowid, title, body)
        VALUES ('delete', -old.rowid, old.title, '');
END;

CREATE TRIGGER search_item_insert AFTER INSERT ON items
WHEN new.kind = 'message' AND new.role IN ('user', 'assistant') BEGIN
    INSERT INTO search_index (rowid, title, body)
        VALUES (new.id, '', COALESCE(json_extract(replace(new.body, '\u0000', '\u0020'), '$.message.content'), ''));
END;
CREATE TRIGGER search_item_delete AFTER DELETE ON items
WHEN old.kind = 'message' AND old.role IN ('user', 'assistant') BEGIN
    INSERT INTO search_index (search_index, rowid, title, body)
        VALUES ('delete', old.id, '', COALESCE(json_extract(replace(old.body, '\u0000', '\u0020'), '$.message.content'), ''));
END;
CREATE TRIGGER search_item_update AFTER UPDATE OF kind, role, body ON items BEGIN
    INSERT INTO search_index (search_index, rowid, title, body)
        SELECT 'delete', old.id, '', COALESCE(json_extract(replace(old.body, '\u0000', '\u0020'), '$.message.content'), '')
        WHERE old.kind = 'message' AND old.role IN ('user', 'assistant');
    INSERT INTO search_index (rowid, title, body)
        SELECT new.id, '', COALESCE(json_extract(replace(new.body, '\u0000', '\u0020'), '$.message.content'), '')
        WHERE new.kind = 'message' AND new.role IN ('user', 'assistant');
END;

-- What existed before this migration.
INSERT INTO search_index (search_index) VALUES ('rebuild');

-- The list's sort key: the creation time in microseconds since the epoch (SQLite's date
-- functions keep milliseconds), newest first, ties by rowid. _sqlite_search.CREATED_US is the
-- same expression, so that the planner uses this index.
CREATE INDEX idx_sessions_recent ON sessions (
    (CAST(round((julianday(created_at) - 2440587.5) * 86400000.0) AS INTEGER) * 1000)
) WHERE parent_id IS NULL;
