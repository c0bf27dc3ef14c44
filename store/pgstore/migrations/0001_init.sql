-- belay PostgreSQL store, schema version 1.
--
-- Every state change of a session is written in one transaction that holds
-- the session's row lock (SELECT ... FOR UPDATE on belay_sessions): it
-- appends the session's events with the next gap-free seqs, changes the
-- run and delivery rows, and advances belay_sessions.last_seq. The row
-- lock is the session's mutex across every node.

CREATE TABLE belay_sessions (
	id            text PRIMARY KEY,
	provider      text NOT NULL,
	model         text NOT NULL DEFAULT '',
	labels        jsonb,
	options       json,
	idem_key      text UNIQUE,
	ref           jsonb NOT NULL DEFAULT '{}',
	-- last_seq is the seq of the session's last event: the per-session
	-- counter the next append continues from.
	last_seq      bigint NOT NULL,
	created_at    timestamptz NOT NULL,
	-- updated_at is the time of the last state change (store events);
	-- last_event_at that of the last event of any kind (retention).
	updated_at    timestamptz NOT NULL,
	last_event_at timestamptz NOT NULL
);
CREATE INDEX belay_sessions_created ON belay_sessions (created_at DESC, id DESC);

CREATE TABLE belay_events (
	session text NOT NULL REFERENCES belay_sessions (id) ON DELETE CASCADE,
	seq     bigint NOT NULL,
	ts      timestamptz NOT NULL,
	type    text NOT NULL,
	idem    text,
	run     text,
	epoch   bigint NOT NULL DEFAULT 0,
	data    json NOT NULL,
	PRIMARY KEY (session, seq)
);
-- An event id is written once per session (idempotent appends).
CREATE UNIQUE INDEX belay_events_idem ON belay_events (session, idem) WHERE idem IS NOT NULL;

CREATE TABLE belay_runs (
	id               text PRIMARY KEY,
	session          text NOT NULL REFERENCES belay_sessions (id) ON DELETE CASCADE,
	-- ord is the global submit order: FIFO among equal priorities.
	ord              bigserial NOT NULL UNIQUE,
	idem_key         text,
	status           text NOT NULL,
	phase            text NOT NULL,
	priority         integer NOT NULL DEFAULT 0,
	provider         text NOT NULL,
	model            text NOT NULL DEFAULT '',
	epoch            bigint NOT NULL DEFAULT 0,
	lease_owner      text,
	lease_granted_at timestamptz,
	lease_expires_at timestamptz,
	attempt          integer NOT NULL DEFAULT 0,
	error_class      text,
	error_message    text,
	reason           text NOT NULL DEFAULT '',
	deadline         timestamptz,
	input_seq        bigint NOT NULL,
	ref              jsonb NOT NULL DEFAULT '{}',
	created_at       timestamptz NOT NULL,
	updated_at       timestamptz NOT NULL,
	started_at       timestamptz,
	ended_at         timestamptz,
	UNIQUE (session, idem_key),
	CHECK (status IN ('queued', 'running', 'complete', 'failed', 'cancelled', 'stranded')),
	CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
);
CREATE INDEX belay_runs_session ON belay_runs (session, ord);
-- Runnable runs in claim order (priority, then FIFO), per provider: the
-- index a store-side claim scans.
CREATE INDEX belay_runs_queue ON belay_runs (priority DESC, ord) WHERE status = 'queued';
CREATE INDEX belay_runs_queue_provider ON belay_runs (provider, priority DESC, ord) WHERE status = 'queued';
-- Running runs by lease expiry: what a rescuer scans.
CREATE INDEX belay_runs_leases ON belay_runs (lease_expires_at) WHERE status = 'running';
CREATE INDEX belay_runs_status ON belay_runs (status, ord);

CREATE TABLE belay_deliveries (
	id               text PRIMARY KEY,
	session          text NOT NULL REFERENCES belay_sessions (id) ON DELETE CASCADE,
	type             text NOT NULL,
	key              text,
	priority         integer NOT NULL DEFAULT 0,
	data             json,
	status           text NOT NULL,
	seq              bigint NOT NULL,
	epoch            bigint NOT NULL DEFAULT 0,
	lease_owner      text,
	lease_granted_at timestamptz,
	lease_expires_at timestamptz,
	attempts         integer NOT NULL DEFAULT 0,
	not_before       timestamptz,
	result           text NOT NULL DEFAULT '',
	created_at       timestamptz NOT NULL,
	settled_at       timestamptz,
	-- (key, type) is posted once per session; a delivery without a key is
	-- never deduplicated (NULLs are distinct).
	UNIQUE (session, type, key),
	CHECK (status IN ('pending', 'leased', 'done', 'error'))
);
CREATE INDEX belay_deliveries_order ON belay_deliveries (session, priority DESC, seq) WHERE status IN ('pending', 'leased');
CREATE INDEX belay_deliveries_leases ON belay_deliveries (lease_expires_at) WHERE status = 'leased';
