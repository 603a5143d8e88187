-- +goose Up
-- runs, steps and tool_calls rows are updated many times each (every
-- executor write advances runs.last_event_seq); free room in each page lets
-- those updates stay HOT (no new index entries, less WAL), since they change
-- no indexed column.
ALTER TABLE runs SET (fillfactor = 70);
ALTER TABLE steps SET (fillfactor = 80);
ALTER TABLE tool_calls SET (fillfactor = 80);

-- +goose Down
ALTER TABLE runs RESET (fillfactor);
ALTER TABLE steps RESET (fillfactor);
ALTER TABLE tool_calls RESET (fillfactor);
