-- +goose Up
-- A run's place in its conversation's queue. Runs of one conversation run
-- one at a time, oldest place first, and a claim (which does not lock the
-- conversation) decides from what its statement's snapshot shows. The
-- place is taken from a sequence by the statement that queues the run
-- while it holds the conversation's lock (a creation, a resume), so places
-- follow the order in which the runs were queued, and every run with an
-- earlier place is visible to any snapshot that shows a later one. Run ids
-- do not: they are made before the lock, on any instance's clock, and a
-- resumed run keeps its id, so ordered by id a resumed run jumped the
-- queue, and two claims could each pick a different run of one
-- conversation (the unique index on running runs then failed one of them).
CREATE SEQUENCE runs_queue_seq;
ALTER TABLE runs ADD COLUMN queue_seq bigint;
-- Runs in flight keep the order their ids gave them; ended runs get a place
-- if they are resumed.
UPDATE runs r SET queue_seq = o.n
FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM runs
      WHERE status IN ('queued', 'running', 'requires_action')) o
WHERE r.id = o.id;
SELECT setval('runs_queue_seq', coalesce((SELECT max(queue_seq) FROM runs), 0) + 1, false);
-- Set after the column exists, so that adding it rewrites nothing.
ALTER TABLE runs ALTER COLUMN queue_seq SET DEFAULT nextval('runs_queue_seq');
ALTER SEQUENCE runs_queue_seq OWNED BY runs.queue_seq;

-- +goose Down
ALTER TABLE runs DROP COLUMN queue_seq;
