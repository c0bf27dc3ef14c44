-- Leaner run indexes (issue 16, speed).
--
-- Every run row is written four times (its insert, its lease, its end, and
-- usually one phase change), and the lease and the end change indexed
-- columns, so none of them is a HOT update: each writes an entry into
-- every index of belay_runs. Two of those indexes served only listings:
--
-- - the GIN index of tags held an entry for every row, most of them for
--   an empty array; it now holds only the rows with tags (`runs list
--   --tag` asks for those: runFilter says tags <> '{}' with a tag);
-- - the btree of created_at (for `--since`) becomes a BRIN index: runs are
--   inserted in about the order of their creation time, so block ranges
--   summarize it, at a fraction of the cost of a btree entry per write.
--
-- Measured (belay bench runs --store postgres://... --runs 8000 --idle 0,
-- the indexes before and after alternated four times on fresh databases):
-- 1,642-1,799 runs/s before, 1,652-1,958 after; PostgreSQL CPU per run
-- 0.92x.
DROP INDEX belay_runs_tags;
CREATE INDEX belay_runs_tags ON belay_runs USING gin (tags) WHERE tags <> '{}';
DROP INDEX belay_runs_created;
CREATE INDEX belay_runs_created ON belay_runs USING brin (created_at);
