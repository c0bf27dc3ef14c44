-- Fewer statements on every write (issue 16, speed).
--
-- Foreign keys to belay_sessions: every row of belay_events, belay_runs
-- and belay_deliveries is written by a transaction that holds its
-- session's row lock (FOR UPDATE: a write's lock, a claim's FOR UPDATE OF
-- s) or that inserted the session itself, and a session is deleted only
-- under that same lock. The foreign keys' checks ran again, per row, what
-- the lock already guarantees: about eleven trigger queries per run.
ALTER TABLE belay_events DROP CONSTRAINT IF EXISTS belay_events_session_fkey;
ALTER TABLE belay_runs DROP CONSTRAINT IF EXISTS belay_runs_session_fkey;
ALTER TABLE belay_deliveries DROP CONSTRAINT IF EXISTS belay_deliveries_session_fkey;

-- What their ON DELETE CASCADE did, done by a trigger that costs nothing
-- on writes: whoever deletes a session (belay, a node still running an
-- older belay, an operator in psql) deletes its rows with it. Its
-- notifications go with its deliveries (their own foreign key).
CREATE FUNCTION belay_session_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM belay_events WHERE session = OLD.id;
	DELETE FROM belay_runs WHERE session = OLD.id;
	DELETE FROM belay_deliveries WHERE session = OLD.id;
	RETURN NULL;
END
$$;
CREATE TRIGGER belay_session_deleted AFTER DELETE ON belay_sessions
	FOR EACH ROW EXECUTE FUNCTION belay_session_deleted();

-- The (status, ord) index: queued and running runs have partial indexes
-- (queue, leases, session_queued, session_running), and no query looks up
-- finished runs by status alone. It took an entry on every status change
-- and kept the entries of long-finished runs, which the planner then
-- walked for "status = 'running'".
DROP INDEX IF EXISTS belay_runs_status;
