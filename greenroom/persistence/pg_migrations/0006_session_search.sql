-- greenroom PostgreSQL schema 4: session search (decision 0026), as SQLite's schema 7.
-- Full text: a tsvector (configuration 'simple': no stemming, as FTS5's unicode61) of each
-- user or assistant message and of each title, stored generated columns with GIN indexes. The
-- text is lower-cased and the common Latin diacritics removed first (the query's words are
-- folded the same way in Python; 'simple' alone would keep them). Adding the columns fills them
-- for every existing row. jsonb refuses the escape \u0000 (which the stored JSON may hold):
-- it becomes \u0020, a space, in the indexed text only (and stays valid JSON where its
-- backslash was itself escaped).
ALTER TABLE gr_items ADD COLUMN search tsvector GENERATED ALWAYS AS (
    CASE WHEN kind = 'message' AND role IN ('user', 'assistant') THEN to_tsvector('simple',
        translate(lower(COALESCE(replace(body, '\u0000', '\u0020')::jsonb #>> '{message,content}', '')),
            'áàâäãåāéèêëēíìîïīóòôöõøōúùûüūçñýÿ', 'aaaaaaaeeeeeiiiiiooooooouuuuucnyy'))
    END
) STORED;
CREATE INDEX gr_items_search ON gr_items USING gin (search);

ALTER TABLE gr_sessions ADD COLUMN title_search tsvector GENERATED ALWAYS AS (
    to_tsvector('simple', translate(lower(title),
        'áàâäãåāéèêëēíìîïīóòôöõøōúùûüūçñýÿ', 'aaaaaaaeeeeeiiiiiooooooouuuuucnyy'))
) STORED;
CREATE INDEX gr_sessions_title_search ON gr_sessions USING gin (title_search)
    WHERE deleted_at IS NULL;

-- The list's sort key: created_at (RFC 3339 text) in microseconds since the epoch, set by a
-- trigger (the cast to timestamptz is not immutable, so it cannot be a generated column), 0
-- for a text that is not RFC 3339. Newest first, ties by insertion.
ALTER TABLE gr_sessions ADD COLUMN created_us bigint NOT NULL DEFAULT 0;
CREATE FUNCTION gr_sessions_created_us() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.created_at ~ '^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$' THEN
        NEW.created_us := floor(extract(epoch FROM NEW.created_at::timestamptz) * 1000000);
    ELSE
        NEW.created_us := 0;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER gr_sessions_created_us BEFORE INSERT OR UPDATE OF created_at ON gr_sessions
    FOR EACH ROW EXECUTE FUNCTION gr_sessions_created_us();
UPDATE gr_sessions SET created_at = created_at;
CREATE INDEX gr_sessions_recent ON gr_sessions (created_us DESC, inserted DESC)
    WHERE deleted_at IS NULL AND parent_id IS NULL;
