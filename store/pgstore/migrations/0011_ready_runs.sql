-- Ready runs (issue 16, speed).
--
-- A claim takes a session's next queued run (front runs first, then
-- FIFO) only while the session has no running run. It found them by
-- walking every queued run in priority order and testing each: with a
-- backlog in busy sessions, thousands of runs per claim, under the
-- sessions' locks. belay_ready holds the runs that pass the test, at most
-- one per session; every write that changes a session's queued or running
-- runs sets its row again in the same transaction (refreshReady in
-- pgstore.go), a claim deletes the rows of the runs it takes, and walks
-- only this table (still testing each run under the lock). A narrow table
-- of its own, not a column of belay_runs: marking a run there would
-- rewrite the run's row and every index of belay_runs once more per run.
CREATE TABLE belay_ready (
	run      text PRIMARY KEY,
	session  text NOT NULL,
	priority integer NOT NULL,
	ord      bigint NOT NULL
);
CREATE INDEX belay_ready_order ON belay_ready (priority DESC, ord);
CREATE INDEX belay_ready_session ON belay_ready (session);
INSERT INTO belay_ready (run, session, priority, ord)
	SELECT r.id, r.session, r.priority, r.ord FROM belay_runs r
	WHERE r.status = 'queued'
	  AND r.id = (SELECT n.id FROM belay_runs n WHERE n.session = r.session AND n.status = 'queued'
		ORDER BY front DESC, CASE WHEN front THEN -ord ELSE ord END LIMIT 1)
	  AND NOT EXISTS (SELECT 1 FROM belay_runs a WHERE a.session = r.session AND a.status = 'running');

CREATE OR REPLACE FUNCTION belay_session_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM belay_events WHERE session = OLD.id;
	DELETE FROM belay_runs WHERE session = OLD.id;
	DELETE FROM belay_deliveries WHERE session = OLD.id;
	DELETE FROM belay_ready WHERE session = OLD.id;
	RETURN NULL;
END
$$;

-- The claim's walk of all queued runs, by priority and by provider: no
-- query reads them any more.
DROP INDEX IF EXISTS belay_runs_queue;
DROP INDEX IF EXISTS belay_runs_queue_provider;
