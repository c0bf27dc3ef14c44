-- Issue 14: the decisions that must hold across nodes live in the
-- database. Claims, submit policies, owner records, durable cancel
-- requests, persisted activity and the change feed.

-- front: submitted with policy interrupt, the run goes ahead of its
-- session's other queued runs (the newest front run first).
-- cancel_*: a durable cancel request on a running run (RequestCancel, or
-- a submit with policy interrupt) that the owner of its lease carries out.
-- activity: the last progress its runner reported with a lease renewal.
ALTER TABLE belay_runs
	ADD COLUMN front         boolean NOT NULL DEFAULT false,
	ADD COLUMN cancel_reason text,
	ADD COLUMN cancel_by     text NOT NULL DEFAULT '',
	ADD COLUMN cancel_at     timestamptz,
	ADD COLUMN activity      jsonb;

-- A session's queued runs in conversation order, and its running run: what
-- a claim looks up for every candidate.
CREATE INDEX belay_runs_session_queued ON belay_runs (session, front DESC, ord) WHERE status = 'queued';
CREATE INDEX belay_runs_session_running ON belay_runs (session) WHERE status = 'running';

-- Owner records: one per runtime instance, kept alive by heartbeats. A
-- run leased to an owner whose record expired (by the database clock), or
-- that has none, is rescued by the next claim.
CREATE TABLE belay_owners (
	id         text PRIMARY KEY,
	since      timestamptz NOT NULL,
	heartbeat  timestamptz NOT NULL,
	expires_at timestamptz NOT NULL
);

-- The change feed: one row per state-changing event, numbered by cursor in
-- commit order without gaps. Cursors are handed out from
-- belay_change_head by the last statement before COMMIT: the update of its
-- one row locks it until the commit is visible, so commits with changes
-- take their cursors one after another and become visible in cursor order.
-- floor is the newest cursor trimmed away: a reader behind it has missed
-- changes (ErrCursorExpired).
CREATE TABLE belay_changes (
	cursor   bigint PRIMARY KEY,
	session  text NOT NULL,
	seq      bigint NOT NULL,
	type     text NOT NULL,
	run      text,
	delivery text,
	ended    boolean NOT NULL DEFAULT false
);

CREATE TABLE belay_change_head (
	one   boolean PRIMARY KEY DEFAULT true CHECK (one),
	head  bigint NOT NULL,
	floor bigint NOT NULL
);
INSERT INTO belay_change_head (one, head, floor) VALUES (true, 0, 0);
