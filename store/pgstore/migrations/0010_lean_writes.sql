-- Fewer statements on every write (issue 16, speed).
--
-- Foreign keys to belay_sessions: every row of belay_events, belay_runs
-- and belay_deliveries is written by a transaction that holds its
-- session's row lock (FOR UPDATE: a write's lock, a claim's FOR UPDATE OF
-- s) or that inserted the session itself, and a session is deleted only
-- under that same lock, together with its rows (deleteSession). The
-- foreign key's check ran again, per row, what the lock already
-- guarantees: about eleven trigger queries per run. The cascade it gave is
-- now the delete's own statement.
ALTER TABLE belay_events DROP CONSTRAINT IF EXISTS belay_events_session_fkey;
ALTER TABLE belay_runs DROP CONSTRAINT IF EXISTS belay_runs_session_fkey;
ALTER TABLE belay_deliveries DROP CONSTRAINT IF EXISTS belay_deliveries_session_fkey;

-- The (status, ord) index: queued and running runs have partial indexes
-- (queue, leases, session_queued, session_running), and no query looks up
-- finished runs by status alone. It took an entry on every status change
-- and kept the entries of long-finished runs, which the planner then
-- walked for "status = 'running'".
DROP INDEX IF EXISTS belay_runs_status;
