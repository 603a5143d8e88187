-- +goose Up
-- A memory tool's call writes one version whatever its attempts: a write
-- or a delete made again under the same call (a retry after a lost
-- answer, a recovery by another instance) finds the version its call
-- wrote, by this index, and writes none.
CREATE UNIQUE INDEX memory_versions_tool_call ON memory_versions (tenant_id, tool_call_id)
    WHERE tool_call_id IS NOT NULL;

-- +goose Down
DROP INDEX memory_versions_tool_call;
