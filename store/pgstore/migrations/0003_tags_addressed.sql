-- Run tags and metadata (`belay send --tag/--meta`, GET /v1/runs?tag=),
-- and addressed or held inbox items (MCP wake-ups): an item with an
-- addressee is leased only by LeaseDeliveriesTo for that addressee; an
-- item with after_run only once that run of its session has ended.
ALTER TABLE belay_runs ADD COLUMN tags text[] NOT NULL DEFAULT '{}';
ALTER TABLE belay_runs ADD COLUMN meta jsonb;
CREATE INDEX belay_runs_tags ON belay_runs USING gin (tags);
CREATE INDEX belay_runs_created ON belay_runs (created_at);

ALTER TABLE belay_deliveries ADD COLUMN addressee text;
ALTER TABLE belay_deliveries ADD COLUMN after_run text;
-- Open items by addressee, in delivery order: what an addressed lease
-- scans across sessions.
CREATE INDEX belay_deliveries_addressee ON belay_deliveries (addressee, priority DESC, created_at)
	WHERE addressee IS NOT NULL AND status IN ('pending', 'leased');
