-- The writer lock is gone: several daemons (nodes) serve one database, and
-- every decision that must hold across them is a store operation (claims,
-- owner records, fenced leases). belay_writer (migration 7) kept the lock's
-- generation; nothing reads it any more.
DROP TABLE IF EXISTS belay_writer;
