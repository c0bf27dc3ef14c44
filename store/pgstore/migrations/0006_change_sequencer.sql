-- The change feed's cursors are numbered after commit by a sequencer, not
-- handed out in the writing transaction under a lock held through its
-- commit (which serialized every commit with changes through the WAL
-- flush). A change is written with cursor NULL; id is the order rows were
-- written in. A sequencer (any node, one at a time under an advisory
-- lock) numbers the committed rows it sees, by id, continuing from
-- belay_change_head.head: cursors still appear in commit order without
-- gaps, and writers never wait for one another (docs/postgres.md).
ALTER TABLE belay_changes DROP CONSTRAINT belay_changes_pkey;
ALTER TABLE belay_changes ADD COLUMN id bigserial PRIMARY KEY;
ALTER TABLE belay_changes ALTER COLUMN cursor DROP NOT NULL;
ALTER TABLE belay_changes ADD CONSTRAINT belay_changes_cursor_key UNIQUE (cursor);
CREATE INDEX belay_changes_unnumbered ON belay_changes (id) WHERE cursor IS NULL;
