-- The writer lock's generation. Each daemon that takes the database's
-- writer lock (an advisory lock held on its own connection) increments it
-- while holding the lock. A daemon whose lock connection broke (the
-- database restarted or was unreachable, the connection was killed) takes
-- the lock again and resumes writing only if the generation is still the
-- one it set: then no other daemon held the lock, and so none wrote, in
-- between.
CREATE TABLE belay_writer (
	id          boolean PRIMARY KEY DEFAULT true CHECK (id),
	generation  bigint NOT NULL,
	holder      text NOT NULL,
	acquired_at timestamptz NOT NULL DEFAULT now()
);
