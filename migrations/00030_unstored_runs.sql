-- +goose Up
-- A run that is not to be kept (the Responses API's store: false) is
-- deleted with its conversation once it ended; this index finds the ended
-- ones for the sweeper, and holds only those few rows.
CREATE INDEX runs_unstored_ended ON runs (finished_at)
    WHERE (params ->> 'unstored') = 'true' AND finished_at IS NOT NULL;

-- +goose Down
DROP INDEX runs_unstored_ended;
