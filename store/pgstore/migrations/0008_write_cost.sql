-- Cheaper writes (issue 16, speed).
--
-- A change is written without a cursor and numbered later by the
-- sequencer; a unique constraint on cursor put every unnumbered row's NULL
-- into its index, all at its right end, where every writer and the
-- sequencer contend for the same leaf page. Numbered rows only are
-- indexed now (every read of the feed names a cursor range, which implies
-- NOT NULL).
ALTER TABLE belay_changes DROP CONSTRAINT belay_changes_cursor_key;
CREATE UNIQUE INDEX belay_changes_cursor ON belay_changes (cursor) WHERE cursor IS NOT NULL;

-- Rows updated in place many times (a session's counter on every write, a
-- run's phase, a change's cursor) keep room on their page, so that an
-- update that changes no indexed column stays on the page (a HOT update:
-- no index entry written).
ALTER TABLE belay_sessions SET (fillfactor = 70);
ALTER TABLE belay_runs SET (fillfactor = 70);
