-- Notifications of inbox items to webhooks and exec hooks
-- (store.NotificationStore): one row per (delivery, target) once it was
-- first claimed. A claim is a lease judged by the database's now(); it
-- is written, with its notify.claimed / notify.settled event, under the
-- delivery's session row lock like every other state change.
CREATE TABLE belay_notifications (
	delivery         text NOT NULL REFERENCES belay_deliveries (id) ON DELETE CASCADE,
	target           text NOT NULL,
	session          text NOT NULL REFERENCES belay_sessions (id) ON DELETE CASCADE,
	state            text NOT NULL,
	attempts         integer NOT NULL DEFAULT 0,
	epoch            bigint NOT NULL DEFAULT 0,
	claim_owner      text,
	claim_granted_at timestamptz,
	claim_expires_at timestamptz,
	not_before       timestamptz,
	error            text NOT NULL DEFAULT '',
	settled_at       timestamptz,
	PRIMARY KEY (delivery, target),
	CHECK (state IN ('pending', 'claimed', 'sent', 'abandoned')),
	CHECK ((state = 'claimed') = (claim_expires_at IS NOT NULL))
);
-- Open notifications of a target by the moment they are due again: what
-- the next-due query reads.
CREATE INDEX belay_notifications_due ON belay_notifications (target, coalesce(claim_expires_at, not_before))
	WHERE state IN ('pending', 'claimed');
-- Deliveries in notification order, for the listing of those never
-- claimed.
CREATE INDEX belay_deliveries_notify ON belay_deliveries (created_at, session, seq);
